"""GPU catalog: which EC2 instance serves each GPU, and what it offers the scheduler.

Data only, and the one place the EFA layout of an instance lives. ``product`` is the
``nvidia.com/gpu.product`` node label the catalog's DGDs select on. ``efa_cards`` are the
network cards that carry an EFA interface (one EFA device each, which is also the
``vpc.amazonaws.com/efa`` capacity the EFA device plugin advertises); ``efa_per_gpu`` is
what a worker requests per GPU (the fabric profile, the scheduling check and the node count
all read it from here).

Sources: EC2 user guide "Maximize network bandwidth on Amazon EC2 instances with multiple
network cards" (efa-acc-inst-types: p5/p5e 32 EFA, p5en 16, p6-b200 8); amazon-vpc-cni-k8s
``vpc_ip_resource_limit.go``; EKS "Use P6e-GB200 UltraServers with Amazon EKS"
(ml-eks-nvidia-ultraserver). GB200: UNVERIFIED here (no DescribeInstanceTypes output for
p6e-gb200.36xlarge was available): the layout follows aws-parallelcluster PR #6930 (17
network cards, EFA on the odd cards 1..15 = 8 devices, 400 Gb/s each) and is checked at
run time by ``python -m stacks preflight`` against ``NetworkInfo.NetworkCards``.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Optional

from stacks import registry


@dataclass(frozen=True)
class InstanceShape:
    instance_type: str
    gpu: str
    gpus_per_node: int
    efa_cards: tuple[int, ...]  # network card indexes with an EFA interface (first: efa, rest: efa-only)
    network_cards: int
    arch: str  # x86_64 | arm64
    product: str
    gpu_memory_gib: int
    vcpus: int
    local_nvme: bool = True
    verified: bool = True  # EFA layout confirmed against AWS documentation
    ultraserver: bool = False  # sold only inside UltraServers, through Capacity Blocks

    @property
    def efa_interfaces(self) -> int:
        return len(self.efa_cards)

    @property
    def efa_per_gpu(self) -> int:
        """EFA devices a worker requests per GPU: the instance's EFA devices shared evenly by its GPUs."""
        return self.efa_interfaces // self.gpus_per_node

    @property
    def kubernetes_arch(self) -> str:
        return {"x86_64": "amd64", "arm64": "arm64"}[self.arch]


INSTANCES: dict[str, InstanceShape] = {
    s.instance_type: s
    for s in (
        InstanceShape("p5.48xlarge", "h100", 8, tuple(range(32)), 32, "x86_64", "NVIDIA-H100-80GB-HBM3", 80, 192),
        InstanceShape("p5e.48xlarge", "h200", 8, tuple(range(32)), 32, "x86_64", "NVIDIA-H200", 141, 192),
        InstanceShape("p5en.48xlarge", "h200", 8, tuple(range(16)), 16, "x86_64", "NVIDIA-H200", 141, 192),
        InstanceShape("p6-b200.48xlarge", "b200", 8, tuple(range(8)), 8, "x86_64", "NVIDIA-B200", 179, 192),
        # GB200: p6e-gb200 UltraServers (9 or 18 of these instances); see the module docstring (unverified layout).
        InstanceShape(
            "p6e-gb200.36xlarge",
            "gb200",
            4,
            tuple(range(1, 17, 2)),
            17,
            "arm64",
            "NVIDIA-GB200",
            185,
            144,
            verified=False,
            ultraserver=True,
        ),
    )
}

# The instance type a GPU gets unless the stack names another one of the same GPU.
# (defined once, with each GPU, in stacks/registry/__init__.py GPUS; a GPU registered without one is absent here).
DEFAULT_INSTANCE = {g.id: g.instance for g in registry.GPUS.values() if g.instance}

# What a GPU registered without instance data lacks, for every error that refuses it on an EKS cluster.
MISSING_INSTANCE_DATA = (
    "no EC2 instance data: its stacks/registry/__init__.py GPUS entry names no instance and no stacks/registry/gpus.py "
    "INSTANCES entry carries it, so it runs on existing clusters only (dynamo:cluster.mode kubeconfig, "
    "or render); to build an EKS cluster for it, add its instance type to stacks/registry/gpus.py INSTANCES and "
    "HOSTS and name it as the instance of its registry entry (docs/adding-a-model-or-gpu.md)"
)


def default_shape(gpu: str) -> Optional[InstanceShape]:
    """The shape of the GPU's default instance (read from the registry when called), or None for a GPU registered
    without instance data (``Gpu.instance`` None): it runs on existing clusters only."""
    g = registry.GPUS.get(gpu)
    return INSTANCES.get(g.instance) if g and g.instance else None


def shape_for(gpu: str, instance_type: str | None = None) -> InstanceShape:
    """The instance shape for a GPU, checking that an explicit instance type carries that GPU."""
    g = registry.GPUS.get(gpu)
    it = instance_type or (g.instance if g else None)
    if it is None:
        carriers = sorted(k for k, v in INSTANCES.items() if v.gpu == gpu)
        if not carriers:
            raise ValueError(f"GPU {gpu!r} has {MISSING_INSTANCE_DATA}")
        raise ValueError(
            f"GPU {gpu!r} has no default instance type (stacks/registry/__init__.py GPUS); name an instance type that "
            f"carries it: {', '.join(carriers)}"
        )
    if it not in INSTANCES:
        raise ValueError(f"instance type {it!r} is not in the GPU catalog; known: {', '.join(sorted(INSTANCES))}")
    shape = INSTANCES[it]
    if shape.gpu != gpu:
        choices = ", ".join(sorted(k for k, v in INSTANCES.items() if v.gpu == gpu))
        raise ValueError(
            f"instance type {it!r} carries {shape.gpu}, not {gpu}; choose one of: "
            f"{choices or 'none (' + gpu + ' has ' + MISSING_INSTANCE_DATA + ')'}"
        )
    return shape


def efa_per_gpu(gpu: str, instance_type: str | None = None) -> int:
    """EFA devices per GPU on the instance that serves ``gpu`` (the default instance unless named)."""
    return shape_for(gpu, instance_type).efa_per_gpu


def nodes_needed(gpus: int, shape: InstanceShape) -> int:
    """GPU nodes for a GPU count alone: whole nodes, at least one (see ``stacks.catalog.fit.pack`` for the full fit)."""
    return max(1, -(-gpus // shape.gpus_per_node))


@dataclass(frozen=True)
class HostResources:
    """What a node's kubelet starts from, for the simulated cluster (``stacks/cli/simulate.py``)."""

    vcpus: int
    memory_gib: int
    local_nvme_gb: int  # instance store; 0 = not counted (ephemeral storage is then the EBS root volume)
    max_pods: int


# Sources: EC2 "Accelerated computing instance specifications" (P5, P5e, P5en, P6-B200: 192 vCPU, 2,048 GiB,
# 8 x 3.84 TB NVMe SSD; P6e-GB200: 144 vCPU, 960 GiB, its instance store not confirmed here, so not counted);
# EC2 "General purpose instance specifications" (m7i.2xlarge, the default system node: 8 vCPU, 32 GiB, EBS
# only). max_pods: the VPC CNI formula ENIs x (IPv4 addresses per ENI - 1) + 2 for m7i.2xlarge (4 x 14 + 2);
# the kubelet default 110 for the GPU instances (nodeadm derives theirs from the ENI limits at boot).
HOSTS: dict[str, HostResources] = {
    **{
        it: HostResources(INSTANCES[it].vcpus, 2048, 8 * 3840, 110)
        for it in ("p5.48xlarge", "p5e.48xlarge", "p5en.48xlarge", "p6-b200.48xlarge")
    },
    "p6e-gb200.36xlarge": HostResources(INSTANCES["p6e-gb200.36xlarge"].vcpus, 960, 0, 110),
    "m7i.2xlarge": HostResources(8, 32, 0, 58),
}


# An existing cluster's GPU node, where the GPU has no instance data of its own: the scheduling check and
# ``simulate`` give it the CPU, memory and disk of this catalog host (an approximation, like every
# existing-cluster shape here; ``simulate --nodes`` checks a cluster's real nodes instead).
EXISTING_HOST = "p5.48xlarge"


def host_type_for(gpu: str) -> str:
    """The instance type whose ``HOSTS`` entry stands for a node of ``gpu``: its default instance, else ``EXISTING_HOST``."""
    shape = default_shape(gpu)
    return shape.instance_type if shape else EXISTING_HOST
