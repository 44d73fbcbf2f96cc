"""Pure cluster plan: GPU node groups shaped by the GPU catalog, EFA interfaces, placement, capacity."""
import base64

import pytest

from stacks import catalog
from stacks.cluster import EksConfig, build_cluster_plan
from stacks.config import ConfigError
from stacks.providers import cluster_config

T = catalog.targets()


def plan(tid="lightning-vllm-disagg-h100-dspark", **kw):
    return build_cluster_plan("t", EksConfig(**kw), T[tid])


@pytest.mark.parametrize(
    "tid, instance, efa",
    [
        ("lightning-vllm-disagg-h100-dspark", None, 32),
        ("lightning-vllm-agg-h200-dspark", "p5en.48xlarge", 16),
        ("lightning-vllm-agg-h200-dspark", "p5e.48xlarge", 32),
        ("lightning-vllm-agg-b200-dspark-bf16", None, 8),
    ],
)
def test_every_efa_interface_first_efa_rest_efa_only(tid, instance, efa):
    nis = plan(tid, instance_type=instance).launch_template["network_interfaces"]
    assert len(nis) == efa
    assert nis[0]["interface_type"] == "efa" and nis[0]["network_card_index"] == 0
    assert {n["interface_type"] for n in nis[1:]} == {"efa-only"}
    assert len({n["network_card_index"] for n in nis}) == efa


def test_efa_off_leaves_one_plain_interface_and_no_efa_capacity():
    p = plan(efa=False)
    assert p.launch_template["network_interfaces"] == [{"device_index": 0, "network_card_index": 0, "delete_on_termination": True}]
    assert "vpc.amazonaws.com/efa" not in p.gpu_shape.capacity


def test_placement_group_on_by_default_and_can_be_turned_off():
    assert plan().placement_group == {"strategy": "cluster"}
    assert plan(placement_group=False).placement_group is None


def test_on_demand_capacity_reservation():
    p = plan(capacity_reservation_id="cr-0123", availability_zones=("us-east-1a", "us-east-1b"), gpu_availability_zone="us-east-1b")
    assert p.launch_template["capacity_reservation_specification"] == {"capacity_reservation_target": {"capacity_reservation_id": "cr-0123"}}
    assert "instance_market_options" not in p.launch_template
    assert p.gpu_nodegroup["capacity_type"] == "ON_DEMAND"
    assert p.gpu_nodegroup["availability_zone"] == "us-east-1b"


def test_capacity_block():
    p = plan(market_type="capacity-block", capacity_reservation_id="cr-cb1")
    assert p.launch_template["instance_market_options"] == {"market_type": "capacity-block"}
    assert p.gpu_nodegroup["capacity_type"] == "CAPACITY_BLOCK"
    assert p.gpu_nodegroup["scaling_config"]["min_size"] == 0


def test_capacity_block_without_reservation_is_a_config_error():
    with pytest.raises(ConfigError, match="capacityReservationId"):
        cluster_config({"cluster": {"mode": "eks", "marketType": "capacity-block"}})


def test_gpu_zone_must_be_a_cluster_zone():
    with pytest.raises(ConfigError, match="gpuAvailabilityZone"):
        cluster_config({"cluster": {"mode": "eks", "availabilityZones": ["us-east-1a", "us-east-1b"], "gpuAvailabilityZone": "us-east-1f"}})


def test_taints_labels_and_ami():
    p = plan("lightning-vllm-agg-gb200-dspark-bf16")
    assert p.gpu_nodegroup["ami_type"] == "AL2023_ARM_64_NVIDIA"
    assert p.gpu_nodegroup["taints"] == [{"key": "nvidia.com/gpu", "value": "true", "effect": "NO_SCHEDULE"}]
    assert p.gpu_nodegroup["labels"]["nvidia.com/gpu.product"] == "NVIDIA-GB200"
    assert plan().gpu_nodegroup["ami_type"] == "AL2023_x86_64_NVIDIA"
    assert plan("ultra-vllm-agg-gb200-agentic-256k-2w-kv").gpu_nodegroup["taints"][0]["value"] == "present"


def test_local_nvme_raid0_user_data():
    ud = base64.b64decode(plan().launch_template["user_data"]).decode()
    assert "kind: NodeConfig" in ud and "strategy: RAID0" in ud


@pytest.mark.parametrize(
    "tid, nodes",
    [
        ("lightning-vllm-agg-h100-dspark", 1),
        ("ultra-vllm-agg-h200-agentic-256k-2w-kv", 2),  # 2 workers x TP8
        ("ultra-vllm-agg-gb200-agentic-256k-2w-kv", 2),  # 2 workers x TP4 on 4-GPU nodes
    ],
)
def test_node_count_derived_from_target(tid, nodes):
    p = plan(tid)
    assert p.gpu_nodegroup["scaling_config"]["desired_size"] == nodes


def test_too_few_gpu_nodes_is_a_config_error():
    with pytest.raises(ConfigError, match="at least 2"):
        plan("ultra-vllm-agg-h200-agentic-256k-2w-kv", gpu_nodes=1)


def test_instance_type_must_carry_the_gpu():
    with pytest.raises(ConfigError, match="carries h100, not h200"):
        plan("lightning-vllm-agg-h200-dspark", instance_type="p5.48xlarge")


def test_storage_efs_or_fsx():
    assert plan().storage_class["provisioner"] == "efs.csi.aws.com"
    p = plan(cache_storage="fsx-lustre")
    assert p.storage_class["provisioner"] == "fsx.csi.aws.com" and "aws-fsx-csi-driver" in p.addons
