"""GPU catalog: which EC2 instance serves each GPU, and what it offers the scheduler.

Data only. ``product`` is the ``nvidia.com/gpu.product`` node label the catalog's
DGDs select on; ``efa_interfaces`` is how many EFA interfaces the launch template
attaches (one per network card: the first ``efa``, the rest ``efa-only``), which is
also the ``vpc.amazonaws.com/efa`` capacity the EFA device plugin advertises.
"""
from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class InstanceShape:
    instance_type: str
    gpu: str
    gpus_per_node: int
    efa_interfaces: int
    network_cards: int
    arch: str  # x86_64 | arm64
    product: str
    gpu_memory_gib: int
    local_nvme: bool = True

    @property
    def kubernetes_arch(self) -> str:
        return {"x86_64": "amd64", "arm64": "arm64"}[self.arch]


INSTANCES: dict[str, InstanceShape] = {
    s.instance_type: s
    for s in (
        InstanceShape("p5.48xlarge", "h100", 8, 32, 32, "x86_64", "NVIDIA-H100-80GB-HBM3", 80),
        InstanceShape("p5e.48xlarge", "h200", 8, 32, 32, "x86_64", "NVIDIA-H200", 141),
        InstanceShape("p5en.48xlarge", "h200", 8, 16, 16, "x86_64", "NVIDIA-H200", 141),
        InstanceShape("p6-b200.48xlarge", "b200", 8, 8, 8, "x86_64", "NVIDIA-B200", 179),
        # GB200 comes as p6e-gb200 UltraServers (9 or 18 of these instances); EFA on the even network cards.
        InstanceShape("p6e-gb200.36xlarge", "gb200", 4, 8, 17, "arm64", "NVIDIA-GB200", 185),
    )
}

# The instance type a GPU gets unless the stack names another one of the same GPU.
DEFAULT_INSTANCE = {"h100": "p5.48xlarge", "h200": "p5en.48xlarge", "b200": "p6-b200.48xlarge", "gb200": "p6e-gb200.36xlarge"}


def shape_for(gpu: str, instance_type: str | None = None) -> InstanceShape:
    """The instance shape for a GPU, checking that an explicit instance type carries that GPU."""
    it = instance_type or DEFAULT_INSTANCE[gpu]
    if it not in INSTANCES:
        raise ValueError(f"instance type {it!r} is not in the GPU catalog; known: {', '.join(sorted(INSTANCES))}")
    shape = INSTANCES[it]
    if shape.gpu != gpu:
        choices = ", ".join(sorted(k for k, v in INSTANCES.items() if v.gpu == gpu))
        raise ValueError(f"instance type {it!r} carries {shape.gpu}, not {gpu}; choose one of: {choices}")
    return shape


def nodes_needed(gpus: int, shape: InstanceShape) -> int:
    """GPU nodes for a target: whole nodes, at least one."""
    return max(1, -(-gpus // shape.gpus_per_node))
