"""The registry: models, GPUs, axes, instance data, version pins and prices, as data. Imports nothing of the project.

The one registry of choices: every value a stack may select on, defined once.

Models, GPUs (with their node label and a reference to the instance data in
``stacks/registry/gpus.py``), runtimes, speculative-decoding methods, topologies and
shapes, routing, precision, context, workload, fabrics and profiles. Everything
else derives from here: the pydantic ``Literal`` types of ``stacks/config/keys.py``
(so error messages list these choices), the catalog's ``AXES``, the default
instance of each GPU in ``stacks/registry/gpus.py``, the family builders' node labels,
and the README's "Choosing what to serve" table (``readme_rows``; a test keeps
the README in step).

A GPU entry holds no engine setting: flags that differ per GPU (quantization,
backends, engine config) are data on the model family's targets or per-GPU
profiles, so registering a GPU never changes what an existing recipe runs.

Adding a GPU is one ``Gpu`` entry here (plus that GPU's engine settings in the
model families that serve it, and its instance in ``stacks/registry/gpus.py`` if it runs
on an instance type the project does not know yet; without one it runs on
existing clusters only). Adding a model is one ``Model`` entry pointing at its
data module. Every step: docs/adding-a-model-or-gpu.md.

This module imports nothing from the project, so every other module may import it.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Literal, Optional


@dataclass(frozen=True)
class Model:
    id: str
    module: str  # the data module that defines ``FAMILY`` (a ``stacks.catalog.model.ModelFamily``)
    title: str


@dataclass(frozen=True)
class Gpu:
    """A GPU the catalog serves on.

    ``label``: the ``nvidia.com/gpu.product`` node label GPU Feature Discovery sets and the DGDs
    select on (https://github.com/NVIDIA/k8s-device-plugin, gpu-feature-discovery labels).
    ``instance``: the default EC2 instance type, a key of ``stacks.registry.gpus.INSTANCES`` (its EFA layout,
    GPUs per node and architecture live there, not here); None for a GPU served only on existing
    clusters (``cluster.mode: kubeconfig``), which the EKS plan then refuses by name.
    ``arch``: the nodes' ``kubernetes.io/arch``.
    No engine setting lives here (see the module docstring).
    """

    id: str
    label: str
    instance: Optional[str]
    arch: Literal["amd64", "arm64"] = "amd64"


MODELS: dict[str, Model] = {
    m.id: m
    for m in (
        Model("nemotron-3.5-lightning", "stacks.catalog.lightning", "Nemotron-3.5-Lightning 30B-A3B"),
        Model("nemotron-3-ultra", "stacks.catalog.ultra", "Nemotron-3-Ultra 550B-A55B"),
        Model("motif-3", "stacks.catalog.motif", "Motif-3"),
    )
}
DEFAULT_MODEL = "nemotron-3.5-lightning"

GPUS: dict[str, Gpu] = {
    g.id: g
    for g in (
        Gpu("h100", "NVIDIA-H100-80GB-HBM3", "p5.48xlarge"),
        Gpu("h200", "NVIDIA-H200", "p5en.48xlarge"),
        Gpu("b200", "NVIDIA-B200", "p6-b200.48xlarge"),
        Gpu("gb200", "NVIDIA-GB200", "p6e-gb200.36xlarge", arch="arm64"),
    )
}

# The other axes: value -> what it means (the README table and `targets --json` show these).
RUNTIMES = {"vllm": "vLLM", "trtllm": "TensorRT-LLM (aggregated-only)"}
TOPOLOGIES = {"agg": "aggregated", "disagg": "disaggregated prefill/decode"}
SHAPES = {
    "1P1D": "1 prefill, 1 decode",
    "1P2D": "1 prefill, 2 decode",
    "2P1D": "2 prefill, 1 decode",
    "3P1D": "3 prefill, 1 decode",
}
SPEC_METHODS = {
    "mtp": "multi-token prediction",
    "dflash": "DFlash draft model",
    "dspark": "DSpark draft model",
    "none": "no speculative decoding",
}
ROUTING = {"single": "one worker or the default router", "kv": "KV-cache-aware routing", "round-robin": "round robin"}
PRECISIONS = {"nvfp4": "NVFP4 checkpoint", "bf16": "BF16 checkpoint"}
CONTEXTS = {"256k": "256K tokens", "1m": "1M tokens"}
WORKLOADS = {"agentic": "agentic traces", "chat": "chat traces"}
FABRICS = {
    "aws-efa": "AWS EFA (libfabric)",
    "infiniband": "InfiniBand (UCX, rdma/ib)",
    "gke-rdma": "GKE RDMA networks",
    "nscale": "Nscale shared InfiniBand (rdma/shared_ib)",
    "none": "no KV-transfer fabric",
}
PROFILES = {
    "refresh": "Ultra, Dynamo 1.4.0 Refresh",
    "day0": "Ultra, Day-0 256K",
    "generic": "Motif-3, any cluster",
    "nscale": "Motif-3, Nscale cluster",
    "current": "Lightning, upstream main",
    "legacy": "Lightning, first published layout",
}


def axes() -> dict[str, tuple[str, ...]]:
    """Axis -> its values, in the order the config's choices and error messages list them."""
    return {
        "model": tuple(MODELS),
        "runtime": tuple(RUNTIMES),
        "gpu": tuple(GPUS),
        "topology": tuple(TOPOLOGIES),
        "shape": tuple(SHAPES),
        "spec": tuple(SPEC_METHODS),
        "routing": tuple(ROUTING),
        "precision": tuple(PRECISIONS),
        "context": tuple(CONTEXTS),
        "workload": tuple(WORKLOADS),
        "fabric": tuple(FABRICS),
        "profile": tuple(PROFILES),
    }


# pydantic Literal types for stacks/config/keys.py, built from the entries above when the module is imported. Their
# values are only known at run time, so a type checker sees each as the str it holds.
if TYPE_CHECKING:
    ModelId = str
    RuntimeId = str
    GpuId = str
    TopologyId = str
    ShapeId = str
    SpecId = str
    RoutingId = str
    PrecisionId = str
    ContextId = str
    WorkloadId = str
    FabricId = str
    ProfileId = str
else:
    ModelId = Literal[tuple(MODELS)]
    RuntimeId = Literal[tuple(RUNTIMES)]
    GpuId = Literal[tuple(GPUS)]
    TopologyId = Literal[tuple(TOPOLOGIES)]
    ShapeId = Literal[tuple(SHAPES)]
    SpecId = Literal[tuple(SPEC_METHODS)]
    RoutingId = Literal[tuple(ROUTING)]
    PrecisionId = Literal[tuple(PRECISIONS)]
    ContextId = Literal[tuple(CONTEXTS)]
    WorkloadId = Literal[tuple(WORKLOADS)]
    FabricId = Literal[tuple(FABRICS)]
    ProfileId = Literal[tuple(PROFILES)]


def gpu(gpu_id: str) -> Gpu:
    """The registry entry of a GPU, or a ValueError naming the known ones (with a close match)."""
    if gpu_id not in GPUS:
        raise ValueError(f"GPU {gpu_id!r} is not in the registry{did_you_mean(gpu_id, GPUS)}; known: {', '.join(GPUS)}")
    return GPUS[gpu_id]


def label(gpu_id: str) -> str:
    """The ``nvidia.com/gpu.product`` node label of a GPU."""
    return gpu(gpu_id).label


def did_you_mean(word: str, choices) -> str:
    """``; did you mean 'x'?`` for the closest choice (difflib), or an empty string."""
    import difflib

    close = difflib.get_close_matches(str(word), [str(c) for c in choices], n=1, cutoff=0.6)
    return f"; did you mean {close[0]!r}?" if close else ""


def _codes(values, default: Optional[str] = None) -> str:
    return ", ".join(f"`{v}`" + (" (default)" if v == default else "") for v in values)


def readme_rows() -> list[str]:
    """The axis rows of the README table "Choosing what to serve", generated from this registry."""
    return [
        f"| `model` | {_codes(MODELS, DEFAULT_MODEL)} |",
        f"| `runtime` | {_codes(RUNTIMES)} (TensorRT-LLM is aggregated-only) |",
        f"| `gpu` | {_codes(GPUS)} |",
        f"| `topology`, `shape` | {_codes(TOPOLOGIES)}; {_codes(SHAPES)} |",
        f"| `spec` | {_codes(SPEC_METHODS)} |",
        f"| `routing` | {_codes(ROUTING)} |",
        f"| `precision`, `context`, `workload` | {'/'.join(f'`{v}`' for v in PRECISIONS)}; "
        f"{'/'.join(f'`{v}`' for v in CONTEXTS)} (Ultra); {'/'.join(f'`{v}`' for v in WORKLOADS)} |",
        f"| `fabric`, `profile` | {_codes(FABRICS)}; {_codes(PROFILES)} |",
    ]
