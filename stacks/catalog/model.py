"""Catalog types: one ``Target`` per upstream recipe file, one ``ModelFamily`` per model."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Callable, Optional

from stacks import registry
from stacks.catalog.builders import Cache
from stacks.catalog.ops import Op

# The axes a stack selects on, with the values the catalog may use (defined once, in stacks/registry/__init__.py).
AXES: dict[str, tuple[str, ...]] = registry.axes()
# Order in which selection narrows the catalog (and in which errors are reported).
SELECT_ORDER = (
    "model",
    "runtime",
    "gpu",
    "topology",
    "shape",
    "precision",
    "context",
    "workload",
    "spec",
    "routing",
    "fabric",
    "profile",
)


@dataclass(frozen=True)
class Perf:
    """One row of the upstream perf table for this target."""

    concurrency: int
    ttft_p50_ms: Optional[float]  # None where the upstream table has no TTFT column
    output_tok_s_per_gpu: float
    tok_s_per_user: float
    source: str  # perf README the row comes from
    recipe: Optional[str] = None  # the table's recipe path, where upstream renamed the file since


# A perf table row as the catalog entries write it: Perf's fields up to ``source``, in order.
PerfRow = tuple[int, Optional[float], float, float]


@dataclass(frozen=True)
class Target:
    id: str
    upstream: Optional[str]  # path below recipes/, or None for targets of our own
    model: str
    runtime: str
    gpu: str
    topology: str
    spec: str
    routing: str
    precision: str
    fabric: str
    dgd_name: str
    family: str  # key of the base builder in the model family
    params: dict[str, Any] = field(default_factory=dict, hash=False, compare=False)
    ops: tuple[Op, ...] = ()
    shape: Optional[str] = None
    context: Optional[str] = None
    workload: Optional[str] = None
    profile: Optional[str] = None
    experimental: bool = False
    perf: Optional[Perf] = None
    cache_jobs: tuple[str, ...] = ()  # model-cache Job keys this target needs
    image: Optional[str] = None  # the runtime image the target runs (from versions manifest)
    # Which reference snapshot below ../shared/reference holds the file the target reproduces (stacks/cli/fidelity.py).
    reference: str = "dynamo-recipes"
    source: Optional[str] = None  # repo, path and commit of that file, where the snapshot holds files of several origins
    # Deprecated: upstream dropped the recipe; the target still renders it, and `up` warns and names this successor id.
    successor: Optional[str] = None
    # Legacy: the target follows a layout upstream main has since replaced (its file renamed or dropped there), kept
    # because the project's documents name it; why, and what replaced it. `render` and `up` warn; `drift` lists it.
    legacy: Optional[str] = None

    def axis(self, name: str) -> Optional[str]:
        return getattr(self, name)


@dataclass(frozen=True)
class ModelFamily:
    """Everything shared by the targets of one model."""

    id: str
    short: str
    served_model: str
    cache: Cache  # the model-cache PVC: its name, size, mount path, labels, storage-class placeholder
    builders: dict[str, Callable[[Target], list[dict]]]  # Target.family -> recipe builder (a function or an builders.Recipe)
    cache_job_builders: dict[str, Callable[[], dict]]  # Job name -> builder (an builders.DownloadJob is one)
    defaults: dict[str, Any]  # per-axis default: a value, preferred values, or a per-GPU mapping
    targets: tuple[Target, ...] = ()
    # Ids upstream renamed: old id -> successor id (the old id resolves to the successor, with a warning),
    # and the same as upstream paths below recipes/ (old -> new), for `stacks drift` and fidelity.
    renamed: dict[str, str] = field(default_factory=dict)
    renamed_paths: dict[str, str] = field(default_factory=dict)
    # Ids this catalog respelled (the same target, DGD and objects under a new id): old id -> new id. Two upstream
    # directories may differ only by case (disagg-b200-agentic-256k and -256K); the ids of their targets may not, since
    # render writes <id>.yaml and a case-insensitive file system keeps one of the two.
    respelled: dict[str, str] = field(default_factory=dict)

    @property
    def cache_size(self) -> str:
        return self.cache.size

    @property
    def cache_mount(self) -> str:
        return self.cache.mount
