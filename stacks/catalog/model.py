"""Catalog types: one ``Target`` per upstream recipe file, one ``ModelFamily`` per model."""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Callable, Optional

from .ops import Op

# The axes a stack selects on, with the values the catalog may use.
AXES: dict[str, tuple[str, ...]] = {
    "model": ("nemotron-3.5-lightning", "nemotron-3-ultra", "motif-3"),
    "runtime": ("vllm", "trtllm"),
    "gpu": ("h100", "h200", "b200", "gb200"),
    "topology": ("agg", "disagg"),
    "shape": ("1P1D", "1P2D", "2P1D", "3P1D"),
    "spec": ("mtp", "dflash", "dspark", "none"),
    "routing": ("single", "kv", "round-robin"),
    "precision": ("nvfp4", "bf16"),
    "context": ("256k", "1m"),
    "workload": ("agentic", "chat"),
    "fabric": ("aws-efa", "infiniband", "gke-rdma", "nscale", "none"),
    "profile": ("refresh", "day0", "generic", "nscale", "current", "legacy"),
}
# Order in which selection narrows the catalog (and in which errors are reported).
SELECT_ORDER = ("model", "runtime", "gpu", "topology", "shape", "precision", "context", "workload", "spec", "routing", "fabric", "profile")


@dataclass(frozen=True)
class Perf:
    """One row of the upstream perf table for this target."""

    concurrency: int
    ttft_p50_ms: Optional[float]  # None where the upstream table has no TTFT column
    output_tok_s_per_gpu: float
    tok_s_per_user: float
    source: str  # perf README the row comes from
    recipe: Optional[str] = None  # the table's recipe path, where upstream renamed the file since


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

    def axis(self, name: str) -> Optional[str]:
        return getattr(self, name)


@dataclass(frozen=True)
class ModelFamily:
    """Everything shared by the targets of one model."""

    id: str
    short: str
    served_model: str
    cache_size: str
    cache_mount: str
    builders: dict[str, Callable[[Target], list[dict]]]
    cache_job_builders: dict[str, Callable[[Any], dict]]
    defaults: dict[str, Any]  # per-axis default: a value, preferred values, or a per-GPU mapping
    targets: tuple[Target, ...] = ()
    cache_labels: dict[str, str] = field(default_factory=dict)  # labels on the model-cache PVC
