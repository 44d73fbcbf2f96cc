"""Pure cluster plan: GPU node groups shaped by the GPU catalog and the final DGD, EFA interfaces, placement,
capacity, storage, and the EKS settings refused before any resource (each a ConfigError naming
dynamo:cluster.<key>, the value and the valid choices, so a bad value never reaches AWS mid-apply)."""

import base64

import pytest

from stacks import catalog
from stacks.cluster import EksConfig, build_cluster_plan, check_secrets_on_new_cluster, resolve_region
from stacks.config.keys import ConfigError, parse
from stacks.config import cluster_config
from stacks.serving import build_plan

T = catalog.targets()
CB = {"market_type": "capacity-block", "capacity_reservation_id": "cr-0123456789abcdef0"}
GB200_AGG = "lightning-vllm-agg-gb200-dspark-bf16"


def plan(tid="lightning-vllm-disagg-h100-dspark", dgd=None, **kw):
    if T[tid].gpu == "gb200" and "market_type" not in kw:
        kw = {**CB, **kw}
    return build_cluster_plan("t", EksConfig(**kw), T[tid], dgd=dgd)


def final(stack_cfg: dict):
    """Serving plan and cluster plan as the program builds them (final DGD after replicas and the fabric profile)."""
    cfg = parse(stack_cfg)
    cc = cluster_config(stack_cfg)
    from stacks.config.keys import select_target
    from stacks.registry.gpus import shape_for

    sp = build_plan(cfg, efa_per_gpu=shape_for(select_target(cfg).gpu, cc.instance_type).efa_per_gpu)
    return sp, build_cluster_plan("t", cc, sp.target, dgd=sp.dgd)


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
    nis = plan(tid, instance_type=instance, efa=True).launch_template["network_interfaces"]
    assert len(nis) == efa
    assert nis[0]["interface_type"] == "efa" and nis[0]["network_card_index"] == 0
    assert {n["interface_type"] for n in nis[1:]} == {"efa-only"}
    assert len({n["network_card_index"] for n in nis}) == efa


def test_gb200_primary_interface_is_ena_and_efa_on_the_odd_cards():
    nis = plan(GB200_AGG, efa=True).launch_template["network_interfaces"]
    assert nis[0] == {"device_index": 0, "network_card_index": 0, "delete_on_termination": True}
    assert [n["network_card_index"] for n in nis[1:]] == [1, 3, 5, 7, 9, 11, 13, 15]
    assert {n["interface_type"] for n in nis[1:]} == {"efa-only"}


@pytest.mark.parametrize(
    "instance, per_gpu",
    [("p5.48xlarge", 4), ("p5e.48xlarge", 4), ("p5en.48xlarge", 2), ("p6-b200.48xlarge", 1), ("p6e-gb200.36xlarge", 2)],
)
def test_efa_per_gpu_from_instance_data(instance, per_gpu):
    from stacks.registry.gpus import INSTANCES

    assert INSTANCES[instance].efa_per_gpu == per_gpu


def test_efa_off_leaves_one_plain_interface_and_no_efa_capacity():
    p = plan("lightning-vllm-agg-h100-dspark", efa=False)
    assert p.launch_template["network_interfaces"] == [
        {"device_index": 0, "network_card_index": 0, "delete_on_termination": True}
    ]
    assert "vpc.amazonaws.com/efa" not in p.gpu_shape.capacity


def test_efa_off_on_an_efa_disaggregated_target_is_refused():
    with pytest.raises(ConfigError, match=r"dynamo:cluster\.efa: false.*VllmPrefillWorker.*vpc.amazonaws.com/efa"):
        plan("lightning-vllm-disagg-h100-dspark", efa=False)


def test_placement_group_on_demand_only():
    assert plan().placement_group == {"strategy": "cluster"}
    assert plan(placement_group=False).placement_group is None
    assert plan(capacity_reservation_id="cr-0123456789abcdef0").placement_group is None
    assert plan(**CB).placement_group is None
    with pytest.raises(ConfigError, match=r"dynamo:cluster\.placementGroup: true conflicts"):
        cluster_config({"cluster": {"mode": "eks", "placementGroup": True, "capacityReservationId": "cr-0123456789abcdef0"}})


def test_on_demand_capacity_reservation():
    p = plan(
        capacity_reservation_id="cr-0123456789abcdef0",
        availability_zones=("us-east-1a", "us-east-1b"),
        gpu_availability_zone="us-east-1b",
    )
    assert p.launch_template["capacity_reservation_specification"] == {
        "capacity_reservation_target": {"capacity_reservation_id": "cr-0123456789abcdef0"}
    }
    assert "instance_market_options" not in p.launch_template and "instance_type" not in p.launch_template
    assert p.gpu_nodegroup["capacity_type"] == "ON_DEMAND" and p.gpu_nodegroup["instance_types"] == ["p5.48xlarge"]
    assert p.gpu_nodegroup["availability_zone"] == "us-east-1b"


def test_capacity_block_instance_type_on_the_launch_template_not_the_node_group():
    p = plan(**CB)
    assert p.launch_template["instance_market_options"] == {"market_type": "capacity-block"}
    assert p.launch_template["instance_type"] == "p5.48xlarge"
    assert (
        p.launch_template["capacity_reservation_specification"]["capacity_reservation_target"]["capacity_reservation_id"]
        == CB["capacity_reservation_id"]
    )
    assert p.gpu_nodegroup["capacity_type"] == "CAPACITY_BLOCK" and "instance_types" not in p.gpu_nodegroup
    assert p.gpu_nodegroup["scaling_config"]["min_size"] == 0


def test_capacity_block_without_reservation_is_a_config_error():
    with pytest.raises(ConfigError, match="capacityReservationId"):
        cluster_config({"cluster": {"mode": "eks", "marketType": "capacity-block"}})


def test_gb200_needs_a_capacity_block():
    with pytest.raises(ConfigError, match=r"dynamo:cluster\.marketType: 'on-demand'.*UltraServer Capacity Blocks"):
        build_cluster_plan("t", EksConfig(), T[GB200_AGG])


def test_gb200_in_a_local_zone_gets_a_gpu_only_subnet():
    p = plan(
        GB200_AGG,
        availability_zones=("us-east-1a", "us-east-1b"),
        gpu_availability_zone="us-east-1-dfw-2a",
        cache_storage="fsx-lustre",
    )
    assert [s["availability_zone"] for s in p.private_subnets] == ["us-east-1a", "us-east-1b"]
    assert p.gpu_subnet["availability_zone"] == "us-east-1-dfw-2a"
    assert p.gpu_nodegroup["availability_zone"] == "us-east-1-dfw-2a"
    cidrs = [s["cidr_block"] for s in p.private_subnets + p.public_subnets] + [p.gpu_subnet["cidr_block"]]
    assert len(set(cidrs)) == len(cidrs)
    assert p.dra_driver and p.compute_domain is None  # one node: nothing spans the NVLink domain


def test_gb200_disagg_spanning_nodes_gets_a_compute_domain():
    tid = "ultra-vllm-disagg-gb200-agentic-1m-1p1d"
    sp, cp = final(
        {
            "target": tid,
            "fabricProfile": "aws-efa",
            "cluster": {
                "mode": "eks",
                "region": "us-east-1",
                "marketType": "capacity-block",
                "capacityReservationId": "cr-0123456789abcdef0",
            },
        }
    )
    assert cp.gpu_nodegroup["scaling_config"]["desired_size"] == 2
    assert cp.compute_domain["kind"] == "ComputeDomain" and cp.compute_domain["spec"]["numNodes"] == 0
    from stacks.cluster import COMPUTE_DOMAIN_CLAIM, apply_compute_domain

    apply_compute_domain(sp.dgd, cp.compute_domain)
    for comp in sp.dgd["spec"]["components"]:
        pod = comp["podTemplate"]["spec"]
        if comp["name"] == "Frontend":
            assert "resourceClaims" not in pod
        else:
            assert pod["resourceClaims"] == [
                {
                    "name": COMPUTE_DOMAIN_CLAIM,
                    "resourceClaimTemplateName": cp.compute_domain["spec"]["channel"]["resourceClaimTemplate"]["name"],
                }
            ]


def test_gpu_zone_must_be_a_cluster_zone_or_a_local_zone_of_the_region():
    with pytest.raises(ConfigError, match="gpuAvailabilityZone"):
        cluster_config(
            {"cluster": {"mode": "eks", "availabilityZones": ["us-east-1a", "us-east-1b"], "gpuAvailabilityZone": "us-east-1f"}}
        )
    with pytest.raises(ConfigError, match="gpuAvailabilityZone"):
        cluster_config({"cluster": {"mode": "eks", "gpuAvailabilityZone": "us-west-2-lax-1a"}})


def test_taints_labels_and_ami():
    p = plan(GB200_AGG)
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
    assert plan(tid).gpu_nodegroup["scaling_config"]["desired_size"] == nodes


def test_h100_with_9_decode_replicas_gets_2_gpu_nodes():
    # 1 prefill + 9 decode workers, 1 GPU and 4 EFA each: 10 GPUs, 40 EFA > one p5 node (8 GPUs, 32 EFA)
    _, cp = final(
        {
            "gpu": "h100",
            "topology": "disagg",
            "replicas": {"VllmDecodeWorker": 9},
            "cluster": {"mode": "eks", "region": "us-east-1"},
        }
    )
    assert cp.gpu_nodegroup["scaling_config"]["desired_size"] == 2


def test_efa_not_gpus_can_be_what_fills_a_node():
    # 8 one-GPU workers with 4 EFA each fit 8 GPUs but 32 EFA exactly: 1 node; 9 need 2
    sp, cp = final(
        {
            "gpu": "h100",
            "topology": "disagg",
            "replicas": {"VllmDecodeWorker": 7},
            "cluster": {"mode": "eks", "region": "us-east-1"},
        }
    )
    assert cp.gpu_nodegroup["scaling_config"]["desired_size"] == 1


def test_b200_disagg_with_3_decode_replicas_fits_one_node():
    from stacks.cluster.scheduling import SYSTEM, check_target

    sp, cp = final(
        {
            "gpu": "b200",
            "topology": "disagg",
            "fabricProfile": "aws-efa",
            "replicas": {"VllmDecodeWorker": 3},
            "cluster": {"mode": "eks", "region": "us-east-1"},
        }
    )
    assert cp.gpu_nodegroup["scaling_config"]["desired_size"] == 1
    assert check_target(sp.target, [SYSTEM, cp.gpu_shape], dgd=sp.dgd) == []


def test_too_few_gpu_nodes_is_a_config_error():
    with pytest.raises(ConfigError, match=r"dynamo:cluster\.gpuNodes: 1 .*use at least 2"):
        plan("ultra-vllm-agg-h200-agentic-256k-2w-kv", gpu_nodes=1)
    with pytest.raises(ConfigError, match=r"dynamo:cluster\.gpuNodes: 1 .*use at least 2"):
        final(
            {
                "gpu": "h100",
                "topology": "disagg",
                "replicas": {"VllmDecodeWorker": 9},
                "cluster": {"mode": "eks", "region": "us-east-1", "gpuNodes": 1},
            }
        )


def test_instance_type_must_carry_the_gpu():
    with pytest.raises(ConfigError, match="carries h100, not h200"):
        plan("lightning-vllm-agg-h200-dspark", instance_type="p5.48xlarge")


def test_storage_efs_or_fsx():
    p = plan()
    assert p.storage_class["provisioner"] == "efs.csi.aws.com" and p.static_pv is None
    p = plan(cache_storage="fsx-lustre")
    assert p.storage_class is None and "aws-fsx-csi-driver" in p.addons
    pv = p.static_pv
    assert pv["spec"]["csi"]["driver"] == "fsx.csi.aws.com"
    assert set(pv["spec"]["csi"]["volumeAttributes"]) == {"dnsname", "mountname"}
    assert pv["spec"]["storageClassName"] == p.cache_class_name == "fsx-model-cache"
    assert pv["spec"]["persistentVolumeReclaimPolicy"] == "Retain"


def test_fsx_default_is_not_slower_than_one_efs_client():
    from stacks.cluster import EFS_CLIENT_MBPS

    p = plan(cache_storage="fsx-lustre")
    assert p.storage["storage_capacity"] == 2400 and p.storage["per_unit_storage_throughput"] == 1000
    assert p.fsx_mbps >= EFS_CLIENT_MBPS


@pytest.mark.parametrize("gib", [1200, 2400, 4800, 9600])
def test_fsx_capacity_steps_accepted(gib):
    assert plan(cache_storage="fsx-lustre", fsx_storage_capacity_gib=gib).storage["storage_capacity"] == gib


@pytest.mark.parametrize("gib", [1000, 1800, 3600, 0])
def test_fsx_capacity_steps_refused(gib):
    with pytest.raises(ConfigError, match=rf"fsxStorageCapacityGib: {gib} .*1200, 2400 or a multiple of 2400"):
        cluster_config({"cluster": {"mode": "eks", "cacheStorage": "fsx-lustre", "fsxStorageCapacityGib": gib}})


def test_efs_provisioned_needs_its_throughput():
    with pytest.raises(ConfigError, match=r"efsThroughputMode: provisioned needs dynamo:cluster\.efsProvisionedThroughputMibps"):
        cluster_config({"cluster": {"mode": "eks", "efsThroughputMode": "provisioned"}})
    with pytest.raises(ConfigError, match="only applies with efsThroughputMode: provisioned"):
        cluster_config({"cluster": {"mode": "eks", "efsProvisionedThroughputMibps": 512}})
    p = plan(efs_throughput_mode="provisioned", efs_provisioned_throughput_mibps=1024)
    assert p.storage["provisioned_throughput_in_mibps"] == 1024


def test_kubernetes_version_defaults_to_standard_support_pin():
    from stacks.registry.versions import versions

    pinned = versions()["eks"]["kubernetesVersion"]
    assert plan().kubernetes_version == pinned
    major, minor = map(int, pinned.split("."))
    assert (major, minor) >= (1, 34)


# ------------------------------------------------------------------ bad EKS settings, refused by name before any resource

BAD = [
    ({"availabilityZones": ["us-west-2a", "us-west-2b"]}, "availabilityZones", "us-west-2a"),
    ({"availabilityZones": ["us-east-1a", "us-east-1a"]}, "availabilityZones", "more than once"),
    ({"availabilityZones": ["us-east-1a"]}, "availabilityZones", "at least two"),
    ({"region": "mars-1"}, "region", "us-east-1"),
    ({"region": ""}, "region", "us-east-1"),
    ({"capacityReservationId": "banana"}, "capacityReservationId", "cr-0123456789abcdef0"),
    ({"kubernetesVersion": "banana"}, "kubernetesVersion", "1.35"),
    ({"kubernetesVersion": "1.29"}, "kubernetesVersion", "1.35"),
    ({"gpuNodes": 0}, "gpuNodes", "greater than or equal to 1"),
    ({"gpuNodes": 1000000}, "gpuNodes", "less than or equal to 450"),
    ({"vpcCidr": "10.0.0.0/24"}, "vpcCidr", "/16 to /20"),
    ({"availabilityZones": [f"us-east-1{c}" for c in "abcdefg"]}, "availabilityZones", "2 to 6"),
]


@pytest.mark.parametrize("cluster, key, hint", BAD, ids=[f"{b[1]}={list(b[0].values())[0]!r}" for b in BAD])
def test_bad_eks_settings_are_refused_naming_the_key(cluster, key, hint):
    with pytest.raises(ConfigError) as e:
        cluster_config({"cluster": {"mode": "eks", **cluster}})
    assert f"cluster.{key}" in str(e.value) or (key in str(e.value) and "dynamo:cluster" in str(e.value))
    assert hint in str(e.value)


@pytest.mark.parametrize("n", [2, 4, 5, 6])
def test_many_zones_get_distinct_subnets(n):
    zones = tuple(f"us-east-1{c}" for c in "abcdef"[:n])
    p = plan(availability_zones=zones)
    cidrs = [s["cidr_block"] for s in p.private_subnets + p.public_subnets]
    assert len(p.private_subnets) == n and len(set(cidrs)) == 2 * n


def test_aws_region_sets_or_must_match_the_cluster_region():
    cc = cluster_config({"cluster": {"mode": "eks"}})
    assert resolve_region(cc, {"mode": "eks"}, "us-west-2").region == "us-west-2"
    assert resolve_region(cc, {"mode": "eks", "region": "us-east-1"}, None).region == "us-east-1"
    for cluster_raw in ({"mode": "eks"}, {}, None):  # neither key: refused, naming both and how to set one
        with pytest.raises(
            ConfigError,
            match=r"dynamo:cluster\.region: not set, and aws:region is not set either.*"
            r"pulumi config set aws:region us-east-1",
        ):
            resolve_region(cc, cluster_raw, None)
    with pytest.raises(ConfigError, match=r"dynamo:cluster\.region: 'us-east-1' contradicts aws:region 'us-west-2'"):
        resolve_region(
            cluster_config({"cluster": {"mode": "eks", "region": "us-east-1"}}),
            {"mode": "eks", "region": "us-east-1"},
            "us-west-2",
        )
    with pytest.raises(ConfigError, match="aws:region: 'mars-1'"):
        resolve_region(cc, {"mode": "eks"}, "mars-1")


def test_secrets_on_a_new_cluster():
    check_secrets_on_new_cluster(None, ("ngc-secret",), {}, {"hfToken", "ngcApiKey"})
    check_secrets_on_new_cluster(None, (), {}, {"hfToken"})
    with pytest.raises(ConfigError, match=r"dynamo:hfTokenSecretName: 'hf-token-secret'.*dynamo:hfToken"):
        check_secrets_on_new_cluster("hf-token-secret", (), {}, {"hfToken"})
    with pytest.raises(ConfigError, match=r"dynamo:ngcApiKey is not set.*ngc-secret"):
        check_secrets_on_new_cluster(None, ("ngc-secret",), {}, {"hfToken"})
    with pytest.raises(ConfigError, match=r"dynamo:ngcApiKey is set in plain text"):
        check_secrets_on_new_cluster(None, ("ngc-secret",), {"ngcApiKey": "k"}, {"hfToken"})


def test_dockerconfigjson_for_nvcr():
    import json

    from stacks.cluster import dockerconfigjson

    d = json.loads(dockerconfigjson("nvapi-x"))["auths"]["nvcr.io"]
    assert d["username"] == "$oauthtoken" and base64.b64decode(d["auth"]).decode() == "$oauthtoken:nvapi-x"


def test_a_storage_class_the_new_cluster_does_not_have_is_refused():
    from stacks.cluster import plan_eks

    raw = {
        "gpu": "h100",
        "storage": {"className": "efs-sc"},
        "cluster": {"mode": "eks", "region": "us-east-1", "cacheStorage": "fsx-lustre"},
    }
    with pytest.raises(ConfigError, match=r"dynamo:storage\.className: 'efs-sc'.*'fsx-model-cache'"):
        plan_eks("t", parse(raw), cluster_config(raw), raw, {"hfToken"})
    raw["storage"] = {"className": "fsx-model-cache"}
    plan_eks("t", parse(raw), cluster_config(raw), raw, {"hfToken"})


# ---------------------------------------------------------------------------- GPU pools (one node group each), cluster stacks


@pytest.mark.parametrize(
    "cluster, must",
    [
        (
            {"gpuPools": [{"gpu": "h100", "nodes": 1}], "gpuNodes": 2},
            r"dynamo:cluster\.gpuNodes: set per pool in dynamo:cluster\.gpuPools",
        ),
        ({"gpuPools": [{"gpu": "h100"}, {"gpu": "h100"}]}, r"gpuPools\[1\]\.gpu: 'h100' already has pool gpuPools\[0\]"),
        (
            {"gpuPools": [{"gpu": "b200", "marketType": "capacity-block"}]},
            r"gpuPools\[0\]\.marketType: capacity-block needs dynamo:cluster\.gpuPools\[0\]\.capacityReservationId",
        ),
        (
            {"gpuPools": [{"gpu": "gb200", "nodes": 2}]},
            r"gpuPools\[0\]\.marketType: 'on-demand': p6e-gb200\.36xlarge is sold only in UltraServer",
        ),
        (
            {"gpuPools": [{"gpu": "h100", "availabilityZone": "us-west-2-lax-1a"}]},
            r"gpuPools\[0\]\.availabilityZone: 'us-west-2-lax-1a' is not one of .* nor a Local Zone of us-east-1",
        ),
        (
            {"gpuPools": [{"gpu": "h100", "availabilityZone": "us-east-1-dfw-2a"}]},
            r"gpuPools\[0\]\.availabilityZone: 'us-east-1-dfw-2a' is a Local Zone, where the EFS model cache cannot be mounted.*cacheStorage: fsx-lustre",
        ),
        (
            {
                "cacheStorage": "fsx-lustre",
                "gpuPools": [
                    {"gpu": "h100", "availabilityZone": "us-east-1-dfw-2a"},
                    {"gpu": "b200", "availabilityZone": "us-east-1-mia-1a"},
                ],
            },
            r"gpuPools: pools in several Local Zones \['us-east-1-dfw-2a', 'us-east-1-mia-1a'\]",
        ),
        (
            {"gpuPools": [{"gpu": "h100", "instanceType": "p5en.48xlarge"}]},
            r"gpuPools\[0\]\.instanceType: instance type 'p5en\.48xlarge' carries h200",
        ),
    ],
)
def test_bad_gpu_pools_name_the_key(cluster, must):
    from stacks.config.keys import ConfigError
    from stacks.config import cluster_config

    with pytest.raises(ConfigError, match=must):
        cluster_config({"cluster": {"mode": "eks", **cluster}})


def test_pool_settings_apply_to_their_gpu_only():
    from stacks.program import build_program

    raw = {
        "cluster": {
            "mode": "eks",
            "region": "us-east-1",
            "gpuPools": [
                {"gpu": "h100"},
                {
                    "gpu": "b200",
                    "marketType": "capacity-block",
                    "capacityReservationId": "cr-0123456789abcdef0",
                    "availabilityZone": "us-east-1b",
                },
            ],
        },
        "serve": [
            {"target": "lightning-vllm-agg-h100-dspark", "namespace": "a"},
            {"model": "motif-3", "topology": "agg", "namespace": "m"},
        ],
    }
    plan = build_program(raw, "t", frozenset({"hfToken"})).cluster_plan
    h100, b200 = plan.gpu_pools
    assert (h100.name, b200.name) == ("gpu", "gpu-b200") and plan.gpu_nodegroup is h100.nodegroup
    # aggregated entries request no EFA: no EFA interfaces, and so no placement group, on the on-demand h100 group
    assert not h100.efa and h100.placement_group is None and h100.nodegroup["capacity_type"] == "ON_DEMAND"
    assert b200.placement_group is None and b200.nodegroup["capacity_type"] == "CAPACITY_BLOCK"
    assert b200.launch_template["instance_type"] == "p6-b200.48xlarge" and b200.nodegroup["availability_zone"] == "us-east-1b"
    assert b200.nodegroup["labels"]["dynamo.nvidia.com/pool"] == "gpu-b200"
    # an entry whose GPU has no pool is refused naming the entry
    from stacks.config.keys import ConfigError

    with pytest.raises(ConfigError, match=r"dynamo:serve\[1\]\.gpu: 'b200' has no pool in dynamo:cluster\.gpuPools"):
        build_program(
            {**raw, "cluster": {"mode": "eks", "region": "us-east-1", "gpuPools": [{"gpu": "h100"}]}}, "t", frozenset({"hfToken"})
        )


def test_preflight_reads_the_cluster_stacks_pool():
    from stacks.cli.preflight import request_from_stack

    req = request_from_stack("h100-cluster")
    assert (req.instance_type, req.nodes, req.availability_zone, req.efa) == ("p5.48xlarge", 2, "us-east-1a", True)


def test_capacity_shortfall_names_efa_and_taint_mismatches():
    from stacks.cluster import capacity_shortfall
    from stacks.program import build_program

    program = build_program(
        {
            "cluster": {"mode": "stack", "stack": "o/p/c"},
            "serve": [{"target": "lightning-vllm-disagg-h100-dspark", "namespace": "a"}],
        },
        "s",
        frozenset({"hfToken"}),
    )
    reqs = program.cluster_plan.requirements
    pool = {
        "name": "gpu",
        "gpu": "h100",
        "instanceType": "p5.48xlarge",
        "count": 4,
        "allocatable": {"nvidia.com/gpu": 8, "vpc.amazonaws.com/efa": 32},
        "taint": {"key": "nvidia.com/gpu", "value": "true", "effect": "NoSchedule"},
    }
    assert capacity_shortfall(reqs, [pool], "o/p/c") is None
    msg = capacity_shortfall(reqs, [{**pool, "allocatable": {"nvidia.com/gpu": 8, "vpc.amazonaws.com/efa": 16}}], "o/p/c")
    assert "2 EFA per GPU" in msg and "request 4 per GPU" in msg
    msg = capacity_shortfall(
        reqs, [{**pool, "taint": {"key": "nvidia.com/gpu", "value": "present", "effect": "NoSchedule"}}], "o/p/c"
    )
    assert "tainted nvidia.com/gpu=present" in msg
    assert "exports no nodePools list" in capacity_shortfall(reqs, None, "o/p/c")


def test_one_group_settings_are_refused_with_several_gpus():
    from stacks.config.keys import ConfigError
    from stacks.program import build_program

    raw = {
        "cluster": {"mode": "eks", "region": "us-east-1", "gpuNodes": 3},
        "serve": [
            {"target": "lightning-vllm-agg-h100-dspark", "namespace": "a"},
            {"model": "motif-3", "topology": "agg", "namespace": "m"},
        ],
    }
    with pytest.raises(
        ConfigError, match=r"dynamo:cluster\.gpuNodes: applies to one GPU node group, but the entries run on h100, b200"
    ):
        build_program(raw, "t", frozenset({"hfToken"}))


def test_group_names_follow_the_pools_not_the_entries():
    from stacks.program import build_program

    pools = [{"gpu": "h100", "nodes": 1}, {"gpu": "b200"}]
    both = [
        {"target": "lightning-vllm-agg-h100-dspark", "namespace": "a"},
        {"model": "motif-3", "topology": "agg", "namespace": "m"},
    ]
    for serve in (both, both[::-1], both[1:]):  # reordered, or the h100 entry removed: the b200 group keeps its name
        plan = build_program(
            {"cluster": {"mode": "eks", "region": "us-east-1", "gpuPools": pools}, "serve": serve}, "t", frozenset({"hfToken"})
        ).cluster_plan
        assert [(p.name, p.gpu) for p in plan.gpu_pools] == [("gpu", "h100"), ("gpu-b200", "b200")]


# ------------------------------------------------------------------ sizing, EFA where it is used, EFS range, versions


@pytest.mark.parametrize(
    "kw, scaling", [({}, (2, 2, 2)), ({"capacity_reservation_id": "cr-0123456789abcdef0"}, (2, 2, 2)), (CB, (0, 2, 2))]
)
def test_gpu_group_sizing_on_every_capacity_type(kw, scaling):
    sc = plan(gpu_nodes=2, **kw).gpu_nodegroup["scaling_config"]
    assert (sc["min_size"], sc["desired_size"], sc["max_size"]) == scaling


def test_aggregated_target_on_one_node_gets_no_efa_or_placement_group():
    p = plan("lightning-vllm-agg-h100-dspark")
    assert not p.efa and p.placement_group is None and "vpc.amazonaws.com/efa" not in p.gpu_shape.capacity
    assert len(p.launch_template["network_interfaces"]) == 1
    assert plan("lightning-vllm-agg-h100-dspark", efa=True).placement_group == {"strategy": "cluster"}  # asked for: kept
    assert plan("lightning-vllm-agg-h100-dspark", placement_group=True).placement_group == {"strategy": "cluster"}
    assert plan().efa and plan().placement_group == {"strategy": "cluster"}  # disaggregated: KV transfer over EFA


@pytest.mark.parametrize("mibps", [0, 3415, 10240])
def test_efs_provisioned_throughput_outside_the_api_range_is_refused(mibps):
    with pytest.raises(
        ConfigError,
        match=rf"dynamo:cluster\.efsProvisionedThroughputMibps: {mibps} is outside what the EFS API accepts, 1-3414 MiB/s",
    ):
        cluster_config({"cluster": {"mode": "eks", "efsThroughputMode": "provisioned", "efsProvisionedThroughputMibps": mibps}})
    assert (
        plan(efs_throughput_mode="provisioned", efs_provisioned_throughput_mibps=3414).storage["provisioned_throughput_in_mibps"]
        == 3414
    )


def test_kubernetes_version_moves_one_minor_at_a_time():
    ok = cluster_config({"cluster": {"mode": "eks", "kubernetesVersion": "1.35", "currentKubernetesVersion": "1.34"}})
    assert ok.kubernetes_version == "1.35"
    assert cluster_config({"cluster": {"mode": "eks", "kubernetesVersion": "1.35", "currentKubernetesVersion": "1.35"}})
    with pytest.raises(ConfigError) as e:
        cluster_config({"cluster": {"mode": "eks", "kubernetesVersion": "1.35", "currentKubernetesVersion": "1.33"}})
    msg = str(e.value)
    assert "dynamo:cluster.kubernetesVersion: '1.35' is 2 minor versions ahead of the cluster's '1.33'" in msg
    assert (
        'set dynamo:cluster.kubernetesVersion: "1.34" and dynamo:cluster.currentKubernetesVersion: "1.33", run `pulumi up`; '
        'then set dynamo:cluster.kubernetesVersion: "1.35" and dynamo:cluster.currentKubernetesVersion: "1.34"' in msg
    )
    with pytest.raises(ConfigError, match=r"'1\.34' is older than the cluster's '1\.35'.*cannot downgrade"):
        cluster_config({"cluster": {"mode": "eks", "kubernetesVersion": "1.34", "currentKubernetesVersion": "1.35"}})
    with pytest.raises(ConfigError, match=r"currentKubernetesVersion: 'latest' is not a Kubernetes minor version"):
        cluster_config({"cluster": {"mode": "eks", "currentKubernetesVersion": "latest"}})


def test_a_version_skip_is_refused_before_any_resource():
    import harness

    with pytest.raises(Exception, match="2 minor versions ahead"):
        harness.run_program(
            {
                "gpu": "h100",
                "cluster": {
                    "mode": "eks",
                    "region": "us-east-1",
                    "kubernetesVersion": "1.36",
                    "currentKubernetesVersion": "1.34",
                },
            },
            {"hfToken": "hf_x"},
            stack="t",
        )
    assert harness.LAST_RUN.resources == []


def test_addons_carry_the_pinned_versions_of_the_cluster_version():
    from stacks.registry.versions import versions

    pins = versions()["eks"]["addons"]
    p = plan(kubernetes_version="1.35")
    assert p.addon_versions == {a: v for a, v in pins["1.35"].items() if a in p.addons} and p.addon_versions
    assert plan(kubernetes_version="1.34").addon_versions["kube-proxy"].startswith("v1.34.")
    # kube-proxy follows the control plane's minor version (EKS user guide, managing-kube-proxy)
    for k8s, addons in pins.items():
        assert addons["kube-proxy"].startswith(f"v{k8s}."), (k8s, addons)


# ------------------------------------------------------------------ who may use the cluster, Secrets encryption, control-plane logs

DEPLOY = "arn:aws:iam::123456789012:role/dynamo-deploy"
OPS = "arn:aws:iam::210987654321:role/platform/ops"


def test_access_entries_name_principals_and_turn_the_creator_bootstrap_off():
    from stacks.cluster import ACCESS_POLICIES, access_plan

    cfg = EksConfig(
        region="us-east-1",
        admin_principal_arns=(OPS,),
        access_entries=(
            {"principal_arn": DEPLOY, "policy": "cluster-admin"},
            {"principal_arn": "arn:aws:iam::123456789012:user/alice", "policy": "edit", "namespaces": ("team-a", "team-b")},
        ),
    )
    a = access_plan(cfg)
    assert a["authentication_mode"] == "API" and a["bootstrap_creator_admin"] is False and a["warnings"] == []
    assert [(e["name"], e["principal_arn"], e["policy_arn"], e["access_scope"]) for e in a["entries"]] == [
        ("admin-0", OPS, ACCESS_POLICIES["cluster-admin"], {"type": "cluster"}),
        (
            "access-123456789012-role-dynamo-deploy",
            DEPLOY,
            "arn:aws:eks::aws:cluster-access-policy/AmazonEKSClusterAdminPolicy",
            {"type": "cluster"},
        ),
        (
            "access-123456789012-user-alice",
            "arn:aws:iam::123456789012:user/alice",
            "arn:aws:eks::aws:cluster-access-policy/AmazonEKSEditPolicy",
            {"type": "namespace", "namespaces": ["team-a", "team-b"]},
        ),
    ]
    # names follow the principal, not the position: reordering renames (and so recreates) nothing
    flipped = access_plan(cfg.model_copy(update={"access_entries": tuple(reversed(cfg.access_entries))}))
    assert sorted(e["name"] for e in flipped["entries"]) == sorted(e["name"] for e in a["entries"])
    assert (
        access_plan(
            EksConfig(
                region="us-east-1",
                access_entries=({"principal_arn": "arn:aws:iam::123456789012:role/ops/admin", "policy": "cluster-admin"},),
            )
        )["entries"][0]["name"]
        == "access-123456789012-role-ops-admin"
    )


def test_without_access_entries_the_creator_keeps_its_bootstrap_admin_with_a_warning():
    from stacks.cluster import access_plan

    a = access_plan(EksConfig(region="us-east-1", admin_principal_arns=(OPS,)))
    assert a["bootstrap_creator_admin"] is True and [e["name"] for e in a["entries"]] == ["admin-0"]
    assert len(a["warnings"]) == 1 and "dynamo:cluster.accessEntries is not set" in a["warnings"][0]


def test_cluster_plan_carries_access_encryption_and_logs():
    p = plan(access_entries=({"principal_arn": DEPLOY, "policy": "cluster-admin"},))
    assert p.access["bootstrap_creator_admin"] is False and [e["principal_arn"] for e in p.access["entries"]] == [DEPLOY]
    deny = {"Version": "2012-10-17", "Statement": [{"Effect": "Deny", "Action": ["logs:CreateLogGroup"], "Resource": "*"}]}
    import datetime

    from stacks.cluster.access import support_warnings

    def without_dated(cp: dict) -> dict:  # the end-of-support warnings depend on the day (tests/test_aws_rules.py covers them)
        assert cp["support_warnings"] == support_warnings(p.kubernetes_version, cp["upgrade_policy"], datetime.date.today())
        return {k: v for k, v in cp.items() if k != "support_warnings"}

    assert without_dated(p.control_plane) == {
        "secrets_encryption": True,
        "upgrade_policy": "STANDARD",
        "logs": {
            "types": ["api", "audit", "authenticator"],
            "log_group": "/aws/eks/dynamo-t/cluster",
            "retention_in_days": 90,
            "cluster_role_policy": deny,
        },
    }
    off = plan(secrets_encryption=False, control_plane_logs=())
    assert without_dated(off.control_plane) == {"secrets_encryption": False, "logs": None, "upgrade_policy": "STANDARD"}
    assert plan(control_plane_logs=("audit", "scheduler"), control_plane_log_retention_days=731).control_plane["logs"] == {
        "types": ["audit", "scheduler"],
        "log_group": "/aws/eks/dynamo-t/cluster",
        "retention_in_days": 731,
        "cluster_role_policy": deny,
    }


ACCESS_BAD = [
    ({"accessEntries": [{"principalArn": "alice", "policy": "view"}]}, "accessEntries[0].principalArn", "'alice'"),
    (
        {"accessEntries": [{"principalArn": "arn:aws:sts::123456789012:assumed-role/deploy/ci", "policy": "cluster-admin"}]},
        "accessEntries[0].principalArn",
        "assumed-role session",
    ),
    # a principal of another partition: IAM refuses it in the aws partition, the only one whose Regions are accepted
    (
        {"accessEntries": [{"principalArn": "arn:aws-us-gov:iam::123456789012:role/deploy", "policy": "cluster-admin"}]},
        "accessEntries[0].principalArn",
        "'arn:aws-us-gov:iam::123456789012:role/deploy'",
    ),
    (
        {"accessEntries": [{"principalArn": DEPLOY, "policy": "root"}]},
        "accessEntries.0.policy",
        "'cluster-admin', 'admin', 'edit' or 'view'",
    ),
    ({"accessEntries": [{"principalArn": DEPLOY}]}, "accessEntries.0.policy", "required"),
    ({"accessEntries": [{"principalArn": DEPLOY, "policy": "view"}]}, "accessEntries", "no entry has policy cluster-admin"),
    (
        {"accessEntries": [{"principalArn": DEPLOY, "policy": "cluster-admin"}, {"principalArn": DEPLOY, "policy": "view"}]},
        "accessEntries[1].principalArn",
        "one access entry per cluster",
    ),
    (
        {"adminPrincipalArns": [DEPLOY], "accessEntries": [{"principalArn": DEPLOY, "policy": "view"}]},
        "accessEntries[0].principalArn",
        "adminPrincipalArns",
    ),
    (
        {"accessEntries": [{"principalArn": DEPLOY, "policy": "cluster-admin", "namespaces": ["a"]}]},
        "accessEntries[0].namespaces",
        "admin, edit or view",
    ),
    (
        {
            "accessEntries": [
                {"principalArn": DEPLOY, "policy": "cluster-admin"},
                {"principalArn": OPS, "policy": "view", "namespaces": ["Team_A"]},
            ]
        },
        "accessEntries[1].namespaces",
        "'Team_A'",
    ),
    ({"controlPlaneLogs": ["audit", "kubelet"]}, "controlPlaneLogs.1", "'controllerManager'"),
    ({"controlPlaneLogs": ["audit", "audit"]}, "controlPlaneLogs", "more than once"),
    ({"controlPlaneLogRetentionDays": 10}, "controlPlaneLogRetentionDays", "3653"),
    ({"controlPlaneLogs": [], "controlPlaneLogRetentionDays": 30}, "controlPlaneLogRetentionDays", "only applies"),
    ({"secretsEncryption": "yes"}, "secretsEncryption", "true or false"),
]


@pytest.mark.parametrize("cluster, key, hint", ACCESS_BAD, ids=[b[1] + "-" + b[2][:20] for b in ACCESS_BAD])
def test_bad_access_encryption_and_log_settings_name_the_key(cluster, key, hint):
    with pytest.raises(ConfigError) as e:
        cluster_config({"cluster": {"mode": "eks", "region": "us-east-1", **cluster}})
    assert f"dynamo:cluster.{key}" in str(e.value) and hint in str(e.value), str(e.value)


def test_good_access_settings_pass():
    c = cluster_config(
        {
            "cluster": {
                "mode": "eks",
                "region": "us-east-1",
                "adminPrincipalArns": [OPS],
                "accessEntries": [{"principalArn": DEPLOY, "policy": "view", "namespaces": ["team-a"]}],
            }
        }
    )
    assert c.access_entries[0].namespaces == ("team-a",)  # adminPrincipalArns are cluster-admins
