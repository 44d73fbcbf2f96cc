"""Every catalog target's workers fit its cluster: GPU/EFA/RDMA requests, affinity, tolerations.

The oracle is independent of the product: the GPU nodes are written here from the AWS instance facts of the reference
data (aws/FACTS.md through tests/aws_reference.py: GPUs per instance, EFA interfaces, architecture; only the
``nvidia.com/gpu.product`` label and the instance type a GPU defaults to come from stacks/registry) and the taint is
spelled literally, never read back from what the target tolerates. A typo in a toleration the catalog renders
therefore makes these tests fail (checked by mutating ``stacks/catalog/k8s.py GPU_TOLERATION``), and so does a wrong
instance figure in stacks/registry/gpus.py (checked by halving p5.48xlarge's EFA cards)."""

import math

import pytest

import aws_reference
from stacks import catalog, registry
from stacks.cluster import NodeShape
from stacks.registry.gpus import DEFAULT_INSTANCE
from stacks.cluster.scheduling import SYSTEM, check_target, default_shapes

TARGETS = catalog.targets()

# The taint on GPU nodes, spelled here. Kubernetes form (NoSchedule); the EKS managed node group API spells the
# same effect NO_SCHEDULE ("When using AWS CLI or API, taint effects must be NO_SCHEDULE, PREFER_NO_SCHEDULE, or
# NO_EXECUTE. When using Kubernetes directly or kubectl, taint effects must be NoSchedule ...":
# https://docs.aws.amazon.com/cdk/api/v2/docs/aws-cdk-lib.aws_eks_v2.TaintEffect.html, which points at
# https://docs.aws.amazon.com/eks/latest/userguide/node-taints-managed-node-groups.html).
GPU_TAINT = {"key": "nvidia.com/gpu", "value": "true", "effect": "NoSchedule"}
# The Nemotron Ultra GB200 recipes are written for nodes tainted nvidia.com/gpu=present (upstream
# recipes/nemotron-3-ultra/vllm/{agg-gb200-agentic-1M-kv-router,disagg-gb200-agentic-256K,...}/deploy.yaml tolerate
# that value; the NVIDIA device plugin chart's values tolerate it too: shared reference
# device-plugins/nvidia/nvidia-device-plugin-values.yaml); the program taints those targets' GB200 node group so.
PRESENT_TAINT = {"key": "nvidia.com/gpu", "value": "present", "effect": "NoSchedule"}
PRESENT_TARGETS = {
    "ultra-vllm-agg-gb200-agentic-1M-kv-router",
    "ultra-vllm-agg-gb200-agentic-256K-kv-router",
    "ultra-vllm-disagg-gb200-agentic-1M",
    "ultra-vllm-disagg-gb200-agentic-256K",
}
# Interconnect capacity each fabric's nodes advertise (device plugins): EFA from the reference's instance facts; the
# InfiniBand/GKE/nscale clusters' RDMA resources as those clusters' device plugins name them.
GKE_RDMA = {f"networking.gke.io.networks/rdma-{i}{s}": 1 for i in range(4) for s in ("", ".IP")}


# GPUs per node of an existing cluster whose GPU has no instance data in stacks/registry/gpus.py (registered for existing
# clusters only): the eight-GPU node the scheduling check assumes for it.
EXISTING_GPUS_PER_NODE = 8


def literal_gpu_node(t) -> NodeShape:
    """The GPU node a target's cluster offers: its default instance's GPUs, EFA interfaces and architecture from the
    reference's AWS facts (or, for a GPU registered without an instance, its registry label and arch on an eight-GPU
    node), the GPU's product label, and the literal taint only."""
    instance_type = DEFAULT_INSTANCE.get(t.gpu)
    g = registry.GPUS[t.gpu]
    if instance_type:
        facts = aws_reference.instance(instance_type)
        arch, per_node = facts.kubernetes_arch, facts.gpus
        extra = {"node.kubernetes.io/instance-type": instance_type}
    else:
        arch, per_node, extra = g.arch, EXISTING_GPUS_PER_NODE, {}
    labels = {
        "nvidia.com/gpu.product": g.label,
        "nvidia.com/gpu.present": "true",
        "kubernetes.io/arch": arch,
        "kubernetes.io/os": "linux",
        **extra,
    }
    capacity = {"nvidia.com/gpu": per_node}
    if t.fabric == "aws-efa":
        capacity["vpc.amazonaws.com/efa"] = aws_reference.efa_interfaces(instance_type)
        labels["vpc.amazonaws.com/efa.present"] = "true"
    elif t.fabric == "infiniband":
        capacity["rdma/ib"] = 1000
    elif t.fabric == "nscale":
        capacity["rdma/shared_ib"] = 1000
        labels["node.kubernetes.io/instance-type"] = "g.192.b200.8"
    elif t.fabric == "gke-rdma":
        capacity.update(GKE_RDMA)
        labels["cloud.google.com/gke-accelerator"] = "nvidia-gb200"
    taint = PRESENT_TAINT if t.id in PRESENT_TARGETS else GPU_TAINT
    gpus = catalog.gpus_needed(next(o for o in catalog.recipe_objects(t) if o["kind"] == "DynamoGraphDeployment"))
    return NodeShape("gpu", labels, [dict(taint)], capacity, max(1, math.ceil(gpus / per_node)))


@pytest.mark.parametrize("tid", sorted(TARGETS))
def test_target_schedules_on_nodes_written_from_the_instance_data(tid):
    t = TARGETS[tid]
    assert check_target(t, [SYSTEM, literal_gpu_node(t)]) == []


@pytest.mark.parametrize("tid", sorted(TARGETS))
def test_target_does_not_fit_a_node_tainted_otherwise(tid):
    """The check above can fail: the same node with the other literal taint value repels the GPU workers."""
    t = TARGETS[tid]
    node = literal_gpu_node(t)
    node.taints = [dict(GPU_TAINT if t.id in PRESENT_TARGETS else PRESENT_TAINT)]
    other = node.taints[0]["value"]
    assert any(f"taint nvidia.com/gpu={other}:NoSchedule not tolerated" in p for p in check_target(t, [SYSTEM, node]))


@pytest.mark.parametrize(
    "tid", sorted(tid for tid, t in TARGETS.items() if t.fabric in ("aws-efa", "none") and t.gpu in DEFAULT_INSTANCE)
)
def test_eks_node_group_carries_the_literal_taint(tid):
    """What the program's EKS GPU node group sets (EKS API form) is the literal taint."""
    from stacks.cluster import build_cluster_plan
    from stacks.cluster.scheduling import default_eks_config

    t = TARGETS[tid]
    plan = build_cluster_plan("check", default_eks_config(t), t)
    expected = PRESENT_TAINT if tid in PRESENT_TARGETS else GPU_TAINT
    assert plan.gpu_pools[0].nodegroup["taints"] == [{**expected, "effect": "NO_SCHEDULE"}]


@pytest.mark.parametrize(
    "tid", sorted(tid for tid, t in TARGETS.items() if t.fabric in ("aws-efa", "none") and t.gpu in DEFAULT_INSTANCE)
)
def test_eks_gpu_node_group_offers_the_instances_gpus_and_efa(tid):
    """The GPU node group the program plans on EKS (its node shape and launch template) has the GPUs and, on an EFA
    target, the EFA interfaces the reference states for its instance type: a wrong figure in stacks/registry/gpus.py
    sizes the node group and its launch template wrongly even where the workers still fit."""
    from stacks.cluster import build_cluster_plan
    from stacks.cluster.scheduling import default_eks_config

    t = TARGETS[tid]
    plan = build_cluster_plan("check", default_eks_config(t), t)
    instance_type = DEFAULT_INSTANCE[t.gpu]
    facts = aws_reference.instance(instance_type)
    ng, lt = plan.gpu_pools[0].nodegroup, plan.launch_template  # a Capacity Block node group names it in its template
    assert ng.get("instance_types", [lt.get("instance_type")]) == [instance_type], (ng, lt.get("instance_type"))
    capacity = plan.gpu_shape.capacity
    assert capacity["nvidia.com/gpu"] == facts.gpus, (instance_type, capacity, facts)
    assert plan.gpu_shape.labels["kubernetes.io/arch"] == facts.kubernetes_arch
    efa = [n for n in plan.launch_template.get("network_interfaces", []) if n.get("interface_type") in ("efa", "efa-only")]
    if t.fabric == "aws-efa" or efa or "vpc.amazonaws.com/efa" in capacity:
        want = aws_reference.efa_interfaces(instance_type)
        assert capacity.get("vpc.amazonaws.com/efa") == want, (
            f"{instance_type}: the node group advertises "
            f"{capacity.get('vpc.amazonaws.com/efa')} EFA devices, "
            f"{aws_reference.FACTS} states {want} ({facts.source})"
        )
        assert len(efa) == want, (
            f"{instance_type}: the launch template attaches {len(efa)} EFA interfaces, {aws_reference.FACTS} states {want}"
        )
        assert (
            len({n["network_card_index"] for n in efa}) == want
            and max(n["network_card_index"] for n in efa) < facts.network_cards
        )


def test_mismatched_product_label_is_reported_with_target_and_field():
    t = TARGETS["lightning-vllm-agg-h100-dspark"]
    system, gpu = default_shapes(t)
    gpu.labels["nvidia.com/gpu.product"] = "NVIDIA-H200"
    problems = check_target(t, [system, gpu])
    assert problems and problems[0].startswith("lightning-vllm-agg-h100-dspark agg: fits no node group")
    assert "nvidia.com/gpu.product" in problems[0]


def test_missing_efa_capacity_is_reported():
    t = TARGETS["lightning-vllm-disagg-h100-dspark"]
    system, gpu = default_shapes(t)
    gpu.capacity.pop("vpc.amazonaws.com/efa")
    problems = check_target(t, [system, gpu])
    assert any("VllmPrefillWorker" in p and "vpc.amazonaws.com/efa=4 > node capacity 0" in p for p in problems)


def test_untolerated_taint_is_reported():
    t = TARGETS["ultra-vllm-agg-gb200-agentic-256k-2w-kv"]
    system, gpu = default_shapes(t)
    assert gpu.taints[0]["value"] == "present"  # derived from what the GB200 Ultra workers tolerate
    gpu.taints = [{"key": "nvidia.com/gpu", "value": "true", "effect": "NoSchedule"}]
    assert any("taint nvidia.com/gpu=true:NoSchedule not tolerated" in p for p in check_target(t, [system, gpu]))


def test_too_few_nodes_is_reported():
    t = TARGETS["lightning-vllm-agg-h100-dspark-kv-router"]  # 4 x 1 GPU workers
    system, gpu = default_shapes(t)
    gpu.capacity["nvidia.com/gpu"] = 2
    assert any("replica 3 does not fit" in p for p in check_target(t, [system, gpu]))


def _eks_fit(stack_cfg):
    from stacks.cluster import build_cluster_plan
    from stacks.config.keys import parse
    from stacks.config import cluster_config
    from stacks.cluster.scheduling import SYSTEM
    from stacks.serving import build_plan

    from stacks.cluster import plan_eks

    cfg = parse(stack_cfg)
    if (stack_cfg.get("cluster") or {}).get("mode") == "eks" and cfg.fabric_profile:
        _, cplan, plan = plan_eks("t", cfg, cluster_config(stack_cfg), stack_cfg, frozenset(), require_secrets=False)
    else:
        plan = build_plan(cfg)
        cplan = build_cluster_plan("t", cluster_config(stack_cfg), plan.target, dgd=plan.dgd)
    return check_target(plan.target, [SYSTEM, cplan.gpu_shape], dgd=plan.dgd)


@pytest.mark.parametrize("gpu", ["h200", "b200"])
def test_infiniband_recipe_fits_eks_with_the_efa_profile(gpu):
    base = {"gpu": gpu, "topology": "disagg", "cluster": {"mode": "eks", "region": "us-east-1"}}
    assert any("rdma/ib=1 > node capacity 0" in p for p in _eks_fit(base))
    assert _eks_fit({**base, "fabricProfile": "aws-efa"}) == []


def test_final_plan_fits_after_replica_overrides():
    """The node group is sized from the final DGD (after replica overrides), with EFA per GPU from the instance's
    data: sized from the recipe, h100 with 9 decode replicas kept 1 node and `up` waited out the DGD timeout."""
    h100 = {
        "gpu": "h100",
        "topology": "disagg",
        "replicas": {"VllmDecodeWorker": 9},
        "cluster": {"mode": "eks", "region": "us-east-1"},
    }
    assert _eks_fit(h100) == []
    b200 = {
        "gpu": "b200",
        "topology": "disagg",
        "fabricProfile": "aws-efa",
        "replicas": {"VllmDecodeWorker": 3},
        "cluster": {"mode": "eks", "region": "us-east-1"},
    }
    assert _eks_fit(b200) == []
