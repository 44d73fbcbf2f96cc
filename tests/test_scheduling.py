"""Every catalog target's workers fit its default cluster shape: GPU/EFA/RDMA requests, affinity, tolerations."""

import pytest

from stacks import catalog
from stacks.scheduling import check_target, default_shapes

TARGETS = catalog.targets()


@pytest.mark.parametrize("tid", sorted(TARGETS))
def test_target_schedules_on_default_cluster_shape(tid):
    assert check_target(TARGETS[tid]) == []


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
    from stacks.config import parse
    from stacks.providers import cluster_config
    from stacks.scheduling import SYSTEM
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
    base = {"gpu": gpu, "topology": "disagg", "cluster": {"mode": "eks"}}
    assert any("rdma/ib=1 > node capacity 0" in p for p in _eks_fit(base))
    assert _eks_fit({**base, "fabricProfile": "aws-efa"}) == []



def test_final_plan_fits_after_replica_overrides():
    """The node group is sized from the final DGD (after replica overrides), with EFA per GPU from the instance's
    data: sized from the recipe, h100 with 9 decode replicas kept 1 node and `up` waited out the DGD timeout."""
    h100 = {"gpu": "h100", "topology": "disagg", "replicas": {"VllmDecodeWorker": 9}, "cluster": {"mode": "eks"}}
    assert _eks_fit(h100) == []
    b200 = {"gpu": "b200", "topology": "disagg", "fabricProfile": "aws-efa", "replicas": {"VllmDecodeWorker": 3}, "cluster": {"mode": "eks"}}
    assert _eks_fit(b200) == []
