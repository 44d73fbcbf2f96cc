"""AWS rules suite (tests/aws_rules/) on the resource graphs the real program registers under mocks:
every committed EKS stack and a GPU x capacity x cache-storage matrix pass every rule, and each rule fails
on a graph carrying the mistake it guards against (the shapes earlier versions of the cluster layer produced)."""

from __future__ import annotations

import copy
import json
import functools
from pathlib import Path

import pytest
import yaml

from harness import CAPACITY, CR, SECRETS, run_program
import aws_rules as R
from aws_rules import Graph, check
from stacks.registry import yaml_text

ROOT = Path(__file__).resolve().parent.parent


def _stack_config(path: Path) -> dict:
    cfg = (yaml_text.load(path.read_text()) or {}).get("config") or {}
    return {k.split(":", 1)[1]: v for k, v in cfg.items() if k.startswith("dynamo:")}


EKS_STACKS = sorted(p for p in ROOT.glob("Pulumi.*.yaml") if (_stack_config(p).get("cluster") or {}).get("mode") == "eks")


@functools.lru_cache(maxsize=None)
def _run(key: tuple) -> Graph:
    cfg = yaml_text.load(key[0])
    secrets = dict(SECRETS)
    if ((cfg.get("frontDoor") or {}).get("auth") or {}).get("mode") == "apiKeys":  # set with --secret --path on a real stack
        secrets["frontDoorApiKeys"] = '{"team-a": "' + "a" * 32 + '"}'
    return Graph(run_program(cfg, secrets, stack=key[1]).resources)


def graph(cfg: dict, stack: str = "rules") -> Graph:
    return _run((yaml.safe_dump(cfg), stack))


def matrix_config(gpu: str, capacity: str, cache: str) -> dict:
    cfg = {
        "gpu": gpu,
        "topology": "disagg",
        "imagePullSecrets": ["ngc-secret"],
        "cluster": {"mode": "eks", "cacheStorage": cache, **CAPACITY[capacity]},
    }
    if gpu != "h100":  # the h200/b200/gb200 disaggregated recipes carry InfiniBand or no fabric: EKS moves them onto EFA
        cfg["fabricProfile"] = "aws-efa"
    if gpu == "gb200":
        cfg["cluster"]["gpuAvailabilityZone"] = "us-east-1-dfw-2a"
    return cfg


# GB200 is sold only as UltraServer Capacity Blocks, in a Local Zone, where an EFS cache cannot be mounted.
MATRIX = [
    (g, c, s)
    for g in ("h100", "h200", "b200", "gb200")
    for c in CAPACITY
    for s in ("efs", "fsx-lustre")
    if g != "gb200" or (c == "capacity-block" and s == "fsx-lustre")
]


def test_every_aws_constraint_area_has_a_rule_with_a_cited_source():
    covered = {a for areas in R.RULES.values() for a in areas}
    assert covered == set(R.AREAS), set(R.AREAS) - covered
    for fn in R.RULES:
        assert fn.__doc__ and "Source" in fn.__doc__, fn.__name__
    # the update rules (a before/after pair of graphs) too: each guards a known area and cites where its constraint is
    assert R.UPDATE_RULES, "no update rule registered"
    for fn, areas in R.UPDATE_RULES.items():
        assert areas and set(areas) <= set(R.AREAS), (fn.__name__, areas)
        assert fn.__doc__ and "Source" in fn.__doc__, fn.__name__


def test_an_update_rule_names_a_known_constraint_area():
    with pytest.raises(ValueError, match="unknown AWS constraint area"):
        R.update_rule("not an area")
    with pytest.raises(ValueError, match="none named"):
        R.update_rule()


def test_a_rule_names_only_a_known_constraint_area():
    with pytest.raises(ValueError, match="unknown AWS constraint area"):
        R.rule("not an area")


def test_committed_eks_stacks_are_found():
    names = {p.name for p in EKS_STACKS}
    assert {"Pulumi.h100-disagg-prod.yaml", "Pulumi.gb200-agg.yaml", "Pulumi.gb200-disagg.yaml"} <= names


@pytest.mark.parametrize("path", EKS_STACKS, ids=lambda p: p.name)
def test_committed_eks_stack_passes_the_aws_rules(path):
    g = graph(_stack_config(path), path.name.split(".")[1])
    assert check(g) == []


@pytest.mark.parametrize("gpu, capacity, cache", MATRIX, ids=["-".join(m) for m in MATRIX])
def test_matrix_passes_the_aws_rules(gpu, capacity, cache):
    assert check(graph(matrix_config(gpu, capacity, cache))) == []


def test_gb200_on_demand_is_refused_before_any_resource():
    import harness

    with pytest.raises(Exception, match="dynamo:cluster.marketType"):
        run_program(matrix_config("gb200", "on-demand", "fsx-lustre"), SECRETS, stack="rules")
    assert harness.LAST_RUN.resources == []


# ---------------------------------------------------------------------------- each rule fails on a bad graph


# The GPU node groups' resource option before the desired size was the program's: EKS got the old desired size
# with every resize (the sizes themselves were the same: min = max = desired = count, min 0 on a Capacity Block).
OLD_IGNORE = ("scalingConfig.desiredSize",)


def mutate(g: Graph, fn) -> Graph:
    """A deep copy of ``g`` with ``fn(resources)`` applied (the mistake under test)."""
    res = copy.deepcopy(g.resources)
    fn(res)
    return Graph(res)


def one(res, typ, name_end=""):
    return next(r for r in res if r.type == typ and r.name.endswith(name_end))


@pytest.fixture(scope="module")
def block_fsx() -> Graph:
    return graph(matrix_config("h100", "capacity-block", "fsx-lustre"))


@pytest.fixture(scope="module")
def on_demand_efs() -> Graph:
    return graph(matrix_config("h100", "on-demand", "efs"))


def only(rule, g):
    return rule(g)


def test_capacity_block_rule_fails_on_the_old_node_group(block_fsx):
    assert only(R.capacity_block_launch_template, block_fsx) == []

    def old(res):  # an earlier cluster layer: instance type on the node group, none on the launch template
        one(res, R.NODEGROUP, "-gpu").inputs["instanceTypes"] = ["p5.48xlarge"]
        one(res, R.LAUNCH_TEMPLATE).inputs.pop("instanceType")

    v = only(R.capacity_block_launch_template, mutate(block_fsx, old))
    assert any("no instanceType" in x for x in v) and any("names instanceTypes" in x for x in v)
    assert only(
        R.instance_type_in_one_place,
        mutate(block_fsx, lambda res: one(res, R.NODEGROUP, "-gpu").inputs.update(instanceTypes=["p5.48xlarge"])),
    )


def test_placement_group_rule_fails_with_a_reservation(block_fsx, on_demand_efs):
    assert only(R.no_placement_group_with_reservation, block_fsx) == []
    bad = mutate(block_fsx, lambda res: one(res, R.LAUNCH_TEMPLATE).inputs.update(placement={"groupName": "cluster-gpu"}))
    assert only(R.no_placement_group_with_reservation, bad)
    assert only(R.on_demand_efa_in_cluster_placement_group, on_demand_efs) == []
    assert only(
        R.on_demand_efa_in_cluster_placement_group,
        mutate(on_demand_efs, lambda res: one(res, R.LAUNCH_TEMPLATE).inputs.pop("placement")),
    )


def test_ultraserver_rules_fail_on_the_old_gb200_stacks():
    g = graph(matrix_config("gb200", "capacity-block", "fsx-lustre"))
    assert only(R.ultraserver_only_as_capacity_block, g) == []

    def on_demand(res):
        ng = one(res, R.NODEGROUP, "-gpu")
        ng.inputs["capacityType"] = "ON_DEMAND"

    assert only(R.ultraserver_only_as_capacity_block, mutate(g, on_demand))
    # the Local Zone subnet passed to the EKS cluster
    bad = mutate(g, lambda res: one(res, R.EKS).inputs["vpcConfig"]["subnetIds"].append("cluster-gpu-local-zone-id"))
    assert any("not an Availability Zone subnet" in x for x in only(R.eks_cluster_subnets_in_two_availability_zones, bad))
    # a capacity-block node group spread over two zones
    bad = mutate(g, lambda res: one(res, R.NODEGROUP, "-gpu").inputs["subnetIds"].append("cluster-private-1-id"))
    assert only(R.capacity_block_in_one_zone, bad)


def test_compute_domain_rule_fails_without_the_driver_or_the_claim():
    g = graph(
        {
            "target": "ultra-vllm-disagg-gb200-agentic-1m-1p1d",
            "fabricProfile": "aws-efa",
            "cluster": {
                "mode": "eks",
                **CAPACITY["capacity-block"],
                "gpuAvailabilityZone": "us-east-1-dfw-2a",
                "cacheStorage": "fsx-lustre",
            },
        }
    )
    assert only(R.gb200_nvlink_domain_has_dra_and_compute_domain, g) == []
    no_driver = mutate(
        g, lambda res: res.remove(next(r for r in res if r.type == R.HELM and r.inputs.get("chart") in R.DRA_CHARTS))
    )
    assert only(R.gb200_nvlink_domain_has_dra_and_compute_domain, no_driver)

    def no_claim(res):
        for comp in one(res, R.DGD).inputs["spec"]["components"]:
            comp["podTemplate"]["spec"].pop("resourceClaims", None)

    assert only(R.gb200_nvlink_domain_has_dra_and_compute_domain, mutate(g, no_claim))


def test_fsx_rules_fail_on_the_old_fsx_path(block_fsx):
    assert only(R.argument_types_match_the_installed_sdk, block_fsx) == []
    assert only(R.fsx_cache_is_bound_statically, block_fsx) == []
    assert only(R.fsx_capacity_and_throughput, block_fsx) == []
    fs = one(block_fsx.resources, R.FSX)
    # an earlier cluster layer: subnet_ids as a list, a StorageClass with a fileSystemId parameter and no PersistentVolume
    listed = mutate(block_fsx, lambda res: one(res, R.FSX).inputs.update(subnetIds=[fs.inputs["subnetIds"]]))
    assert any("subnetIds is a list" in x for x in only(R.argument_types_match_the_installed_sdk, listed))

    def storage_class(res):
        res.remove(one(res, R.PV))
        res.append(
            R.Res(R.STORAGE_CLASS, "model-cache", {"provisioner": "fsx.csi.aws.com", "parameters": {"fileSystemId": fs.id}})
        )

    v = only(R.fsx_cache_is_bound_statically, mutate(block_fsx, storage_class))
    assert any("fileSystemId" in x for x in v) and any("no PersistentVolume" in x for x in v)
    no_mount = mutate(block_fsx, lambda res: one(res, R.PV).inputs["spec"]["csi"]["volumeAttributes"].pop("mountname"))
    assert only(R.fsx_cache_is_bound_statically, no_mount)
    old_size = mutate(block_fsx, lambda res: one(res, R.FSX).inputs.update(storageCapacity=1200, perUnitStorageThroughput=250))
    assert any("slower than one EFS client" in x for x in only(R.fsx_capacity_and_throughput, old_size))
    assert only(R.fsx_capacity_and_throughput, mutate(block_fsx, lambda res: one(res, R.FSX).inputs.update(storageCapacity=3600)))


def test_efa_per_gpu_rule_fails_with_four_per_gpu_on_b200():
    g = graph(matrix_config("b200", "on-demand", "efs"))
    assert only(R.efa_requests_follow_the_instance, g) == []

    def four_per_gpu(res):  # an earlier fabric profile: 4 EFA per GPU on every instance
        for comp in one(res, R.DGD).inputs["spec"]["components"]:
            for c in comp["podTemplate"]["spec"]["containers"]:
                for part in ("limits", "requests"):
                    sec = (c.get("resources") or {}).get(part) or {}
                    if "vpc.amazonaws.com/efa" in sec:
                        sec["vpc.amazonaws.com/efa"] = str(4 * int(sec["nvidia.com/gpu"]))

    assert only(R.efa_requests_follow_the_instance, mutate(g, four_per_gpu))
    primary_efa_only = mutate(
        g, lambda res: one(res, R.LAUNCH_TEMPLATE).inputs["networkInterfaces"][0].update(interfaceType="efa-only")
    )
    assert only(R.efa_only_is_never_the_primary_interface, primary_efa_only)


def test_node_count_rule_fails_when_replicas_outgrow_the_group():
    g = graph({"gpu": "h100", "topology": "disagg", "replicas": {"VllmDecodeWorker": 9}, "cluster": {"mode": "eks"}})
    assert only(R.gpu_node_group_holds_the_dgd, g) == []
    assert one(g.resources, R.NODEGROUP, "-gpu").inputs["scalingConfig"]["desiredSize"] == 2

    def one_node(res):  # an earlier cluster layer: the node count ignored the replicas override
        one(res, R.NODEGROUP, "-gpu").inputs["scalingConfig"].update(desiredSize=1, minSize=1, maxSize=1)

    assert any("desiredSize 1 < 2" in x for x in only(R.gpu_node_group_holds_the_dgd, mutate(g, one_node)))


def test_desired_size_rule_fails_when_the_desired_size_is_ignored(block_fsx):
    assert only(R.desired_size_sent_on_every_update, block_fsx) == []
    assert only(R.scaling_config_in_order, block_fsx) == []
    bad = mutate(block_fsx, lambda res: setattr(one(res, R.NODEGROUP, "-gpu"), "ignore_changes", OLD_IGNORE))
    assert only(R.desired_size_sent_on_every_update, bad) == [
        "cluster-gpu: scalingConfig.desiredSize is in ignoreChanges: a resize sends the old desired size with the new bounds"
    ]
    upside_down = mutate(block_fsx, lambda res: one(res, R.NODEGROUP, "-gpu").inputs["scalingConfig"].update(minSize=3))
    assert only(R.scaling_config_in_order, upside_down) == [
        "cluster-gpu: scalingConfig min 3, desired 1, max 1 is not min <= desired <= max"
    ]


def test_retention_rules_fail_on_the_old_retention(block_fsx):
    assert only(R.cache_file_system_follows_the_claim, block_fsx) == []
    assert only(R.retained_resources_keep_their_network, block_fsx) == []
    unprotected = graph({**matrix_config("h100", "capacity-block", "fsx-lustre"), "storage": {"protect": False}})
    assert only(R.cache_file_system_follows_the_claim, unprotected) == []
    # an earlier cluster layer: the file system always retained, whatever storage.protect said
    bad = mutate(unprotected, lambda res: setattr(one(res, R.FSX), "retain_on_delete", True))
    assert only(R.cache_file_system_follows_the_claim, bad)
    # a retained FSx whose subnet and security group are deleted: destroy stops on DependencyViolation
    v = only(R.retained_resources_keep_their_network, bad)
    assert any("subnetIds" in x for x in v) and any("securityGroupIds" in x for x in v)


def test_kubernetes_version_rule_fails_on_1_33(on_demand_efs):
    assert only(R.kubernetes_version_in_standard_support, on_demand_efs) == []
    assert only(
        R.kubernetes_version_in_standard_support, mutate(on_demand_efs, lambda res: one(res, R.EKS).inputs.update(version="1.33"))
    )


def test_secrets_rule_fails_when_the_stack_does_not_create_them(block_fsx):
    assert only(R.secrets_exist_on_a_new_cluster, block_fsx) == []
    no_pull = mutate(
        block_fsx,
        lambda res: res.remove(next(r for r in res if r.type == R.SECRET and r.inputs["metadata"]["name"] == "ngc-secret")),
    )
    assert any("imagePullSecret ngc-secret" in x for x in only(R.secrets_exist_on_a_new_cluster, no_pull))
    unordered = mutate(block_fsx, lambda res: setattr(one(res, R.DGD), "dependencies", ()))
    assert any("does not wait for imagePullSecret ngc-secret" in x for x in only(R.secrets_exist_on_a_new_cluster, unordered))
    no_token = mutate(
        block_fsx,
        lambda res: res.remove(next(r for r in res if r.type == R.SECRET and r.inputs["metadata"]["name"] != "ngc-secret")),
    )
    assert any("is not created by the stack" in x for x in only(R.secrets_exist_on_a_new_cluster, no_token))


def test_efs_provisioned_rule_fails_without_the_value(on_demand_efs):
    g = graph(
        {"gpu": "h100", "cluster": {"mode": "eks", "efsThroughputMode": "provisioned", "efsProvisionedThroughputMibps": 1024}}
    )
    assert only(R.efs_provisioned_throughput_has_its_value, g) == []
    bad = mutate(g, lambda res: one(res, R.EFS).inputs.pop("provisionedThroughputInMibps"))
    assert only(R.efs_provisioned_throughput_has_its_value, bad)


# ---------------------------------------------------------------------------- several GPU node groups (gpuPools): every rule on each

TWO_GPUS = {
    "cluster": {"mode": "eks", "region": "us-east-1", "cacheStorage": "efs", "gpuPools": [{"gpu": "h100"}, {"gpu": "b200"}]},
    "imagePullSecrets": ["ngc-secret"],
    "serve": [
        {"target": "lightning-vllm-disagg-h100-dspark", "namespace": "a", "replicas": {"VllmDecodeWorker": 9}},
        {"model": "motif-3", "topology": "disagg", "fabricProfile": "aws-efa", "namespace": "m"},
        {"model": "motif-3", "topology": "agg", "namespace": "m2", "replicas": {"Worker": 3}},
    ],
}


@pytest.mark.parametrize("capacity", sorted(CAPACITY))
def test_two_gpu_groups_pass_the_aws_rules(capacity):
    pools = [{"gpu": "h100", **CAPACITY[capacity]}, {"gpu": "b200"}]
    g = graph({**TWO_GPUS, "cluster": {**TWO_GPUS["cluster"], "gpuPools": pools}}, "two")
    assert len(R._gpu_nodegroups(g)) == 2
    assert check(g) == []


def test_rules_fail_on_the_second_gpu_group():
    g = graph(TWO_GPUS, "two")
    assert check(g) == []

    def unpinned(res):  # a b200 worker without its GPU selector could land on the h100 nodes
        for r in res:
            if r.type == R.DGD and r.inputs["metadata"]["namespace"] == "m2":
                for comp in r.inputs["spec"]["components"]:
                    comp["podTemplate"]["spec"].pop("nodeSelector", None)

    assert any("may land on any of" in x for x in only(R.gpu_node_group_holds_the_dgd, mutate(g, unpinned)))

    def small(res):  # the b200 group sized for one entry, not the sum
        one(res, R.NODEGROUP, "-gpu-b200").inputs["scalingConfig"].update(desiredSize=1, maxSize=1)

    assert any("cluster-gpu-b200: desiredSize 1 < 2" in x for x in only(R.gpu_node_group_holds_the_dgd, mutate(g, small)))

    def four_per_gpu_on_b200(res):
        for r in res:
            if r.type == R.DGD and r.inputs["metadata"]["namespace"] == "m":
                for comp in r.inputs["spec"]["components"]:
                    for c in comp["podTemplate"]["spec"]["containers"]:
                        lim = (c.get("resources") or {}).get("limits") or {}
                        if "vpc.amazonaws.com/efa" in lim:
                            lim["vpc.amazonaws.com/efa"] = str(4 * int(lim["nvidia.com/gpu"]))

    v = only(R.efa_requests_follow_the_instance, mutate(g, four_per_gpu_on_b200))
    assert v and all("p6-b200" in x for x in v)
    bad = mutate(g, lambda res: setattr(one(res, R.NODEGROUP, "-gpu-b200"), "ignore_changes", OLD_IGNORE))
    assert only(R.desired_size_sent_on_every_update, bad) == [
        "cluster-gpu-b200: scalingConfig.desiredSize is in ignoreChanges: a resize sends the old desired size with the new bounds"
    ]


# ---------------------------------------------------------------------------- update rules: resizing on every capacity type


def sized(capacity: str, nodes: int) -> Graph:
    """An h100 disaggregated stack whose GPU group has ``nodes`` nodes (dynamo:cluster.gpuNodes), on ``capacity``."""
    cfg = matrix_config("h100", capacity, "efs")
    cfg["cluster"]["gpuNodes"] = nodes
    return graph(cfg)


def old_sizing(g: Graph) -> Graph:
    """``g`` as the program registered it before the desired size was its own: same sizes, desired size ignored."""
    return mutate(
        g, lambda res: [setattr(r, "ignore_changes", OLD_IGNORE) for r in res if r.type == R.NODEGROUP and "-gpu" in r.name]
    )


RESIZES = [(c, a, b) for c in sorted(CAPACITY) for a, b in ((1, 2), (2, 1), (1, 3))]


@pytest.mark.parametrize("capacity, before, after", RESIZES, ids=[f"{c}-{a}to{b}" for c, a, b in RESIZES])
def test_resize_passes_the_update_rules(capacity, before, after):
    old, new = sized(capacity, before), sized(capacity, after)
    assert R.sent_scaling(one(old.resources, R.NODEGROUP, "-gpu"), one(new.resources, R.NODEGROUP, "-gpu")) == (
        0 if capacity == "capacity-block" else after,
        after,
        after,
    )
    assert R.check_update(old, new) == []
    assert check(new) == []


@pytest.mark.parametrize("capacity, before, after", RESIZES, ids=[f"{c}-{a}to{b}" for c, a, b in RESIZES])
def test_resize_fails_the_update_rules_with_the_desired_size_ignored(capacity, before, after):
    old, new = sized(capacity, before), old_sizing(sized(capacity, after))
    v = R.check_update(old, new)
    block = capacity == "capacity-block"
    if after > before and not block:  # the new minimum meets the old desired size
        assert (
            f"node_group_update_keeps_min_desired_max: cluster-gpu: InvalidParameterException: Minimum capacity {after} "
            f"can't be greater than desired size {before}" in v
        )
    if after < before:  # the new maximum meets the old desired size
        assert (
            f"node_group_update_keeps_min_desired_max: cluster-gpu: InvalidParameterException: desiredSize {before} "
            f"can't be greater than maxSize {after}" in v
        )
    if after > before and block:  # min 0: EKS accepts the request and keeps the old node count
        assert R.check_update(old, new, [R.node_group_update_keeps_min_desired_max]) == []
    assert (
        f"node_group_update_runs_the_size_asked_for: cluster-gpu: runs {before} node(s) after the update, the stack asks for {after}"
        in v
    )


def test_replicas_that_need_more_nodes_resize_the_group():
    """Raising replicas (not gpuNodes) grows the group: 9 decode workers of the h100 target need 2 nodes."""
    base = matrix_config("h100", "on-demand", "efs")
    old, new = graph(base), graph({**base, "replicas": {"VllmDecodeWorker": 9}})
    assert R._scaling(one(new.resources, R.NODEGROUP, "-gpu")) == (2, 2, 2)
    assert R.check_update(old, new) == []
    assert R.check_update(old, old_sizing(new)) == [
        "node_group_update_keeps_min_desired_max: cluster-gpu: InvalidParameterException: Minimum capacity 2 can't be greater than desired size 1",
        "node_group_update_runs_the_size_asked_for: cluster-gpu: runs 1 node(s) after the update, the stack asks for 2",
        "node_group_update_reaches_the_nodes_the_dgds_need: cluster-gpu: keeps 1 node(s) after the update, the DGDs need 2 p5.48xlarge",
    ]
    # on a Capacity Block (min 0) EKS takes the request and the new decode workers stay Pending on one node
    block = matrix_config("h100", "capacity-block", "efs")
    old, new = graph(block), old_sizing(graph({**block, "replicas": {"VllmDecodeWorker": 9}}))
    assert R.check_update(old, new) == [
        "node_group_update_runs_the_size_asked_for: cluster-gpu: runs 1 node(s) after the update, the stack asks for 2",
        "node_group_update_reaches_the_nodes_the_dgds_need: cluster-gpu: keeps 1 node(s) after the update, the DGDs need 2 p5.48xlarge",
    ]


def test_update_rules_ignore_unchanged_groups_and_new_groups():
    g = sized("on-demand", 2)
    assert R.sent_scaling(one(g.resources, R.NODEGROUP, "-gpu"), one(g.resources, R.NODEGROUP, "-gpu")) is None
    assert R.check_update(g, old_sizing(g)) == []  # nothing to resize: no request, 2 nodes stay
    assert R.check_update(Graph([]), g) == []  # a group the update creates is a create (scaling_config_in_order)


# ---------------------------------------------------------------------------- EFA on one node, EFS throughput range


def test_single_node_aggregated_group_gets_no_efa_or_placement_group():
    g = graph({"gpu": "h100", "topology": "agg", "cluster": {"mode": "eks"}})
    lt = one(g.resources, R.LAUNCH_TEMPLATE)
    assert R._efa_devices(lt) == 0 and not g.of(R.PLACEMENT_GROUP) and "placement" not in lt.inputs
    assert only(R.single_node_without_efa_workers_gets_no_efa, g) == []

    def old(res):  # before: every EFA interface of p5.48xlarge and a cluster placement group on the one node
        t = one(res, R.LAUNCH_TEMPLATE)
        t.inputs["networkInterfaces"] = [
            {"networkCardIndex": i, "deviceIndex": 0 if i == 0 else 1, "interfaceType": "efa" if i == 0 else "efa-only"}
            for i in range(32)
        ]
        t.inputs["placement"] = {"groupName": "cluster-gpu"}

    assert only(R.single_node_without_efa_workers_gets_no_efa, mutate(g, old)) == [
        "cluster-gpu: one node, no worker requests vpc.amazonaws.com/efa, yet 32 EFA interfaces",
        "cluster-gpu: one node in placement group cluster-gpu",
    ]
    # a disaggregated target on one node keeps its EFA (its workers request it): the rule leaves it alone
    assert only(R.single_node_without_efa_workers_gets_no_efa, graph(matrix_config("h100", "on-demand", "efs"))) == []


def test_efs_throughput_rule_fails_outside_the_api_range():
    g = graph(
        {"gpu": "h100", "cluster": {"mode": "eks", "efsThroughputMode": "provisioned", "efsProvisionedThroughputMibps": 3414}}
    )
    assert only(R.efs_provisioned_throughput_in_the_api_range, g) == []
    bad = mutate(g, lambda res: one(res, R.EFS).inputs.update(provisionedThroughputInMibps=10240))
    assert only(R.efs_provisioned_throughput_in_the_api_range, bad) == [
        "cluster-cache: provisionedThroughputInMibps 10240 is outside 1-3414"
    ]


# ---------------------------------------------------------------------------- GB200 DRA driver, Local Zone cache, network, defaults

GB200_CB = {
    "target": "ultra-vllm-disagg-gb200-agentic-1m-1p1d",
    "fabricProfile": "aws-efa",
    "cluster": {
        "mode": "eks",
        **CAPACITY["capacity-block"],
        "gpuAvailabilityZone": "us-east-1-dfw-2a",
        "cacheStorage": "fsx-lustre",
    },
}
# The DRA release as the program registered it before it followed the EKS guide: the old chart, its values.
OLD_DRA = {
    "chart": "nvidia-dra-driver-gpu",
    "version": "25.12.0",
    "values": {"nvidiaDriverRoot": "/", "resources": {"gpus": {"enabled": False}}},
}


@pytest.fixture(scope="module")
def gb200() -> Graph:
    return graph(GB200_CB)


def _dra(res):
    return next(r for r in res if r.type == R.HELM and r.inputs.get("chart") in R.DRA_CHARTS)


@pytest.mark.parametrize("path", [p for p in EKS_STACKS if "gb200" in p.name], ids=lambda p: p.name)
def test_gb200_stacks_dra_values_pass_the_eks_guide_rule(path):
    g = graph(_stack_config(path), path.name.split(".")[1])
    assert [r for r in g.of(R.HELM) if r.inputs.get("chart") in R.DRA_CHARTS]
    assert only(R.dra_driver_values_follow_the_eks_guide, g) == []


def test_dra_rule_fails_on_the_old_release(gb200):
    assert only(R.dra_driver_values_follow_the_eks_guide, gb200) == []
    old = mutate(gb200, lambda res: _dra(res).inputs.update(copy.deepcopy(OLD_DRA)))
    msgs = only(R.dra_driver_values_follow_the_eks_guide, old)
    assert any("controller schedules on no node group" in m for m in msgs), msgs
    assert any("kubelet plugin is not admitted by GB200 node group" in m for m in msgs), msgs
    # the new chart with the old values: its controller only prefers control-plane nodes, so it schedules; the rule
    # still needs ComputeDomains on and GPU allocation off
    gpus_on = mutate(gb200, lambda res: _dra(res).inputs["values"]["resources"]["gpus"].update(enabled=True))
    assert any("resources.gpus.enabled is true" in m for m in only(R.dra_driver_values_follow_the_eks_guide, gpus_on))


def test_dra_values_are_the_eks_guides():
    """The EKS guide's dra-values.yaml, key by key, as the chart renders them (defaults merged with our values)."""
    from stacks.cluster import dra_driver_spec

    spec = dra_driver_spec()
    assert (spec.chart, spec.version, spec.repo) == ("dra-driver-nvidia-gpu", "0.4.1", "https://helm.ngc.nvidia.com/nvidia")
    for chart in R.DRA_CHARTS:
        eff, controller, plugin = R.dra_pod_specs(spec.values, chart)
        assert eff["resources"] == {"gpus": {"enabled": False}, "computeDomains": {"enabled": True}}
        assert not any("control-plane" in str(t) for t in controller.get("tolerations", []))
        assert "control-plane" not in str(
            controller.get("affinity", {}).get("nodeAffinity", {}).get("requiredDuringSchedulingIgnoredDuringExecution")
        )
        assert {"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"} in plugin["tolerations"]
        assert plugin["affinity"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]["nodeSelectorTerms"] == [
            {"matchExpressions": [{"key": "nvidia.com/gpu.present", "operator": "In", "values": ["true"]}]}
        ]


def _dra_default_variants() -> dict[str, dict]:
    """The dra-driver-nvidia-gpu values.yaml shapes read (none is confirmed as 0.4.1's, see aws_rules.DRA_CHART_DEFAULTS):
    kubernetes-sigs @3fe94879 (the table), @6fade973 / @9457bc47 (two more NFD terms in the kubelet plugin's affinity), and
    NVIDIA/k8s-dra-driver-gpu @a0b61536 (controller required on control-plane nodes, plugin tolerating nothing)."""
    base = R.DRA_CHART_DEFAULTS["dra-driver-nvidia-gpu"]
    five = copy.deepcopy(base)
    terms = five["kubeletPlugin"]["affinity"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"][
        "nodeSelectorTerms"
    ]
    terms[1:1] = [
        {"matchExpressions": [{"key": f"feature.node.kubernetes.io/pci-{c}_10de.present", "operator": "In", "values": ["true"]}]}
        for c in ("0302", "0300")
    ]
    required = copy.deepcopy(base)
    required["controller"]["tolerations"] = required["controller"]["tolerations"][:2]
    required["controller"]["affinity"] = {
        "nodeAffinity": {
            "requiredDuringSchedulingIgnoredDuringExecution": {
                "nodeSelectorTerms": [
                    {"matchExpressions": [{"key": "node-role.kubernetes.io/control-plane", "operator": "Exists"}]}
                ]
            }
        }
    }
    required["kubeletPlugin"]["tolerations"] = []
    return {"3fe94879": base, "6fade973": five, "a0b61536": required}


def test_dra_rule_verdict_does_not_depend_on_the_unverified_defaults(gb200, monkeypatch):
    """The 0.4.1 values.yaml was not found; under each shape read, the release's values render the same required
    placement, and the GB200 graph passes the rule."""
    from stacks.cluster import dra_driver_spec

    values = dra_driver_spec().values
    rendered = []
    for name, defaults in _dra_default_variants().items():
        monkeypatch.setitem(R.DRA_CHART_DEFAULTS, "dra-driver-nvidia-gpu", defaults)
        _, controller, plugin = R.dra_pod_specs(values, "dra-driver-nvidia-gpu")
        rendered.append(
            (
                controller.get("nodeSelector"),
                controller["tolerations"],
                controller["affinity"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"],
                plugin,
            )
        )
        assert only(R.dra_driver_values_follow_the_eks_guide, gb200) == [], name
    assert all(r == rendered[0] for r in rendered), rendered


def test_local_zone_efs_rule_fails_on_the_old_gb200_graph(gb200):
    assert only(R.local_zone_nodes_do_not_mount_efs, gb200) == []
    fsx = one(gb200.resources, R.FSX)
    old = mutate(
        gb200, lambda res: res.append(R.Res(R.EFS, "cluster-cache", {"throughputMode": "elastic"}, fsx.retain_on_delete))
    )
    assert any("Local Zone us-east-1-dfw-2a with an EFS model cache" in m for m in only(R.local_zone_nodes_do_not_mount_efs, old))


@pytest.mark.parametrize(
    "cluster",
    [
        {"gpuAvailabilityZone": "us-east-1-dfw-2a"},
        {
            "gpuPools": [
                {
                    "gpu": "gb200",
                    "marketType": "capacity-block",
                    "capacityReservationId": CR,
                    "availabilityZone": "us-east-1-dfw-2a",
                }
            ]
        },
    ],
)
def test_efs_in_a_local_zone_is_refused_before_any_resource(cluster):
    import harness

    cfg = {
        "target": "ultra-vllm-disagg-gb200-agentic-1m-1p1d",
        "fabricProfile": "aws-efa",
        "cluster": {"mode": "eks", **({} if "gpuPools" in cluster else CAPACITY["capacity-block"]), **cluster},
    }
    with pytest.raises(
        Exception, match=r"is a Local Zone, where the EFS model cache cannot be mounted.*cacheStorage: fsx-lustre"
    ):
        run_program(cfg, SECRETS, stack="rules")
    assert harness.LAST_RUN.resources == []


def test_gb200_pool_in_a_local_zone_gets_the_local_zone_subnet():
    g = graph(
        {
            "target": "lightning-vllm-agg-gb200-dspark-bf16",
            "imagePullSecrets": ["ngc-secret"],
            "cluster": {
                "mode": "eks",
                "cacheStorage": "fsx-lustre",
                "gpuPools": [
                    {
                        "gpu": "gb200",
                        "marketType": "capacity-block",
                        "capacityReservationId": CR,
                        "availabilityZone": "us-east-1-dfw-2a",
                    },
                    {"gpu": "h100", "nodes": 1},
                ],
            },
        }
    )
    assert check(g) == []
    ngs = {ng.name: ng for ng in g.of(R.NODEGROUP)}
    assert ngs["cluster-gpu"].inputs["subnetIds"] == ["cluster-gpu-local-zone-id"]
    assert g.by_id("cluster-gpu-local-zone-id", R.SUBNET).inputs["availabilityZone"] == "us-east-1-dfw-2a"
    assert g.by_id(ngs["cluster-gpu-h100"].inputs["subnetIds"][0], R.SUBNET).inputs["availabilityZone"] == "us-east-1a"


def test_s3_endpoint_rule_fails_without_the_endpoint(on_demand_efs):
    assert only(R.private_route_tables_reach_s3_through_a_gateway_endpoint, on_demand_efs) == []
    old = mutate(on_demand_efs, lambda res: res.remove(one(res, R.VPC_ENDPOINT, "-s3")))
    assert only(R.private_route_tables_reach_s3_through_a_gateway_endpoint, old)
    off = graph(
        {
            "gpu": "h100",
            "topology": "disagg",
            "imagePullSecrets": ["ngc-secret"],
            "cluster": {"mode": "eks", "s3GatewayEndpoint": False},
        }
    )
    assert only(R.private_route_tables_reach_s3_through_a_gateway_endpoint, off)


def test_per_zone_nat_and_ecr_endpoints():
    g = graph(
        {
            "gpu": "h100",
            "topology": "disagg",
            "imagePullSecrets": ["ngc-secret"],
            "cluster": {"mode": "eks", "natGateways": "per-zone", "ecrEndpoints": True},
        }
    )
    assert check(g) == []
    assert len(g.of(R.NAT)) == 3 and len(g.of(R.ROUTE_TABLE)) == 4  # three private, one public
    services = sorted(e.inputs["serviceName"] for e in g.of(R.VPC_ENDPOINT))
    assert services == ["com.amazonaws.us-east-1.ecr.api", "com.amazonaws.us-east-1.ecr.dkr", "com.amazonaws.us-east-1.s3"]
    s3 = next(e for e in g.of(R.VPC_ENDPOINT) if e.inputs["serviceName"].endswith(".s3"))
    assert sorted(s3.inputs["routeTableIds"]) == sorted(rt.id for rt in R._nat_route_tables(g))

    # every private subnet on one NAT in the first zone (the single-NAT route table): the other zones' subnets cross zones
    def one_route_table(res):
        for a in res:
            if a.type == R.RTA and a.name.startswith("cluster-private-"):
                a.inputs["routeTableId"] = "cluster-private-id"

    assert len(only(R.private_subnet_uses_its_zones_nat, mutate(g, one_route_table))) == 2
    no_dkr = mutate(g, lambda res: res.remove(one(res, R.VPC_ENDPOINT, "-ecr-dkr")))
    assert any("without ['ecr.dkr']" in m for m in only(R.ecr_interface_endpoints_are_complete, no_dkr))


def test_default_network_keeps_one_nat():
    g = graph({"gpu": "h100", "topology": "disagg", "imagePullSecrets": ["ngc-secret"], "cluster": {"mode": "eks"}})
    assert len(g.of(R.NAT)) == 1 and [e.inputs["serviceName"] for e in g.of(R.VPC_ENDPOINT)] == ["com.amazonaws.us-east-1.s3"]


@pytest.mark.parametrize(
    "cluster, must",
    [
        ({"natGateways": "each"}, r"natGateways"),
        ({"ecrEndpoints": "maybe"}, r"ecrEndpoints"),
        ({"publicAccessCidrs": ["10.0.0.1/8"]}, r"publicAccessCidrs: '10\.0\.0\.1/8' is not an IPv4 network"),
        ({"publicAccessCidrs": []}, r"publicAccessCidrs: empty"),
        ({"endpointAccess": "internal"}, r"endpointAccess"),
        ({"endpointAccess": "private"}, r"privateAccessCidrs: required with endpointAccess: private"),
        (
            {"endpointAccess": "private", "privateAccessCidrs": ["10.0.0.0/16"], "publicAccessCidrs": ["203.0.113.0/24"]},
            r"publicAccessCidrs: only applies with endpointAccess: public",
        ),
        ({"privateAccessCidrs": ["10.0.0.0/16"]}, r"privateAccessCidrs: only applies with endpointAccess: private"),
        (
            {"endpointAccess": "private", "privateAccessCidrs": ["10.0.0.1/16"]},
            r"privateAccessCidrs: '10\.0\.0\.1/16' is not an IPv4 network",
        ),
    ],
)
def test_bad_network_keys_name_the_key(cluster, must):
    from stacks.config.keys import ConfigError
    from stacks.config import cluster_config

    with pytest.raises(ConfigError, match=must):
        cluster_config({"cluster": {"mode": "eks", **cluster}})


def test_public_endpoint_rule_fails_without_cidrs(on_demand_efs):
    c = one(on_demand_efs.resources, R.EKS)
    assert (
        c.inputs["vpcConfig"]["publicAccessCidrs"] == ["0.0.0.0/0"]
        and only(R.eks_public_endpoint_cidrs_are_explicit, on_demand_efs) == []
    )
    old = mutate(on_demand_efs, lambda res: one(res, R.EKS).inputs["vpcConfig"].pop("publicAccessCidrs"))
    assert only(R.eks_public_endpoint_cidrs_are_explicit, old)
    mine = graph(
        {
            "gpu": "h100",
            "topology": "disagg",
            "imagePullSecrets": ["ngc-secret"],
            "cluster": {"mode": "eks", "publicAccessCidrs": ["203.0.113.0/24"]},
        }
    )
    assert one(mine.resources, R.EKS).inputs["vpcConfig"]["publicAccessCidrs"] == ["203.0.113.0/24"]


def test_private_endpoint_is_reached_from_the_networks_listed():
    """A private-only API endpoint: no public endpoint and no public CIDRs sent, a 443 rule on the cluster security group
    per network in privateAccessCidrs, and a warning that `up` must run from there; the rule fails without those rules
    and on a cluster with neither endpoint (EKS refuses it)."""
    g = graph(
        {
            "gpu": "h100",
            "topology": "disagg",
            "imagePullSecrets": ["ngc-secret"],
            "cluster": {"mode": "eks", "endpointAccess": "private", "privateAccessCidrs": ["10.0.0.0/16", "192.168.8.0/24"]},
        }
    )
    vc = one(g.resources, R.EKS).inputs["vpcConfig"]
    assert vc["endpointPublicAccess"] is False and vc["endpointPrivateAccess"] is True and "publicAccessCidrs" not in vc
    rules = g.of(R.SG_INGRESS_RULE)
    assert sorted(r.inputs["cidrIpv4"] for r in rules) == ["10.0.0.0/16", "192.168.8.0/24"]
    assert all((r.inputs["ipProtocol"], r.inputs["fromPort"], r.inputs["toPort"]) == ("tcp", 443, 443) for r in rules)
    assert R.eks_endpoint_is_reachable(g) == [] and R.eks_public_endpoint_cidrs_are_explicit(g) == [] and check(g) == []
    cut = mutate(g, lambda res: [res.remove(r) for r in [r for r in res if r.type == R.SG_INGRESS_RULE]])
    assert [m for m in R.eks_endpoint_is_reachable(cut) if "no rule admits any network" in m]
    none = mutate(g, lambda res: one(res, R.EKS).inputs["vpcConfig"].update(endpointPrivateAccess=False))
    assert [m for m in R.eks_endpoint_is_reachable(none) if "EKS refuses it" in m]
    # the public default: both endpoints, no 443 rule of ours
    from stacks.cluster import EksConfig, network_plan

    assert R.eks_endpoint_is_reachable(graph(matrix_config("h100", "on-demand", "efs"))) == []
    assert any(
        "endpointAccess is private" in w and "10.0.0.0/16" in w
        for w in network_plan(EksConfig(endpoint_access="private", private_access_cidrs=("10.0.0.0/16",)))["warnings"]
    )


def test_open_public_endpoint_is_warned_about():
    from stacks.cluster import EksConfig, network_plan

    assert any("publicAccessCidrs includes 0.0.0.0/0" in w for w in network_plan(EksConfig())["warnings"])
    assert network_plan(EksConfig(public_access_cidrs=("203.0.113.0/24",)))["warnings"] == []


def test_gpu_operator_rule_fails_when_the_toolkit_is_left_on():
    g = graph(
        {
            "gpu": "h100",
            "topology": "disagg",
            "imagePullSecrets": ["ngc-secret"],
            "cluster": {"mode": "eks", "nvidiaStack": "gpu-operator"},
        }
    )
    op = next(r for r in g.of(R.HELM) if r.inputs.get("chart") == "gpu-operator")
    assert (
        op.inputs["values"]["toolkit"] == {"enabled": False}
        and only(R.gpu_operator_leaves_driver_and_toolkit_to_the_ami, g) == []
    )
    old = mutate(
        g,
        lambda res: (
            next(r for r in res if r.type == R.HELM and r.inputs.get("chart") == "gpu-operator").inputs["values"].pop("toolkit")
        ),
    )
    assert only(R.gpu_operator_leaves_driver_and_toolkit_to_the_ami, old) == [
        f"{op.name}: toolkit.enabled is not false on the AL2023 NVIDIA AMI, which ships the toolkit"
    ]


def test_runtime_class_rule_fails_without_a_node_selector(on_demand_efs):
    rc = one(on_demand_efs.resources, R.RUNTIME_CLASS)
    assert rc.inputs["scheduling"] == {"nodeSelector": {"nvidia.com/gpu.present": "true"}}
    assert only(R.nvidia_runtime_class_selects_gpu_nodes, on_demand_efs) == []
    old = mutate(on_demand_efs, lambda res: one(res, R.RUNTIME_CLASS).inputs.pop("scheduling"))
    assert only(R.nvidia_runtime_class_selects_gpu_nodes, old)
    system = mutate(
        on_demand_efs,
        lambda res: one(res, R.RUNTIME_CLASS).inputs.update(scheduling={"nodeSelector": {"kubernetes.io/os": "linux"}}),
    )
    assert only(R.nvidia_runtime_class_selects_gpu_nodes, system)


def test_runtime_class_rule_on_the_gpu_operator_path_checks_the_pods():
    """The GPU Operator creates RuntimeClass nvidia itself, with no node selector: the stack registers none, and the rule
    fails a pod that names the class without requesting a GPU or selecting GPU nodes (it could land on a system node)."""
    g = graph(
        {
            "target": "ultra-vllm-disagg-b200-agentic-1M",
            "fabricProfile": "aws-efa",
            "cluster": {"mode": "eks", "nvidiaStack": "gpu-operator"},
        }
    )
    assert g.of(R.RUNTIME_CLASS) == [] and [r for r in g.of(R.HELM) if r.inputs.get("chart") == "gpu-operator"]
    assert {n.split("/")[-1] for n, _ in R._pods_naming(g, "nvidia")} == {"prefill", "decode"}
    assert only(R.nvidia_runtime_class_selects_gpu_nodes, g) == []

    def frontend_names_it(res):
        dgd = next(r for r in res if r.type == R.DGD)
        next(c for c in dgd.inputs["spec"]["components"] if c["name"] == "Frontend")["podTemplate"]["spec"][
            "runtimeClassName"
        ] = "nvidia"

    op = next(r for r in g.of(R.HELM) if r.inputs.get("chart") == "gpu-operator")
    msgs = only(R.nvidia_runtime_class_selects_gpu_nodes, mutate(g, frontend_names_it))
    assert len(msgs) == 1 and msgs[0].endswith(
        f"/Frontend: names RuntimeClass nvidia, which the GPU Operator ({op.name}) creates "
        "without scheduling.nodeSelector, requests no nvidia.com/gpu and may land on non-GPU "
        "node group(s) ['cluster-system']"
    ), msgs


def test_guide_states_the_network_costs_and_the_unverified_gb200_efa_layout():
    """docs/deploy-aws.md: the NAT processing of each model's download is the recipe's cache claim x the NAT per-GB
    rate the program cites; the Local Zone opt-in command; the GB200 EFA layout marked unverified while stacks/registry/gpus.py
    says so."""
    import re

    from stacks.catalog import lightning_base, motif, ultra
    from stacks.cluster import NAT_USD_PER_GB, _gib
    from stacks.registry.gpus import INSTANCES

    guide = (ROOT / "docs" / "deploy-aws.md").read_text()
    for name, cache in (
        ("Nemotron-3.5-Lightning", lightning_base.CACHE),
        ("Nemotron-3-Ultra", ultra.CACHE),
        ("Motif-3", motif.CACHE),
    ):
        gb = _gib(cache.size) * 2**30 / 1e9
        row = re.search(rf"\| {re.escape(name)} \({cache.size[:-2]} GiB\) \| ([\d,]+) GB \| \$([\d.]+) \|", guide)
        assert row, name
        assert int(row[1].replace(",", "")) == round(gb) and float(row[2]) == round(gb * NAT_USD_PER_GB, 2), (name, row.groups())
    assert (
        "aws ec2 modify-availability-zone-group --region us-east-1 --group-name us-east-1-dfw-2 --opt-in-status opted-in" in guide
    )
    if not INSTANCES["p6e-gb200.36xlarge"].verified:
        assert "The EFA layout of p6e-gb200 is unverified" in guide


# ---------------------------------------------------------------------------- cluster access, Secrets encryption, control-plane logs

DEPLOY = "arn:aws:iam::123456789012:role/dynamo-deploy"
ALICE = "arn:aws:iam::123456789012:user/alice"
ACCESS = [
    {"principalArn": DEPLOY, "policy": "cluster-admin"},
    {"principalArn": ALICE, "policy": "view", "namespaces": ["dynamo-rules"]},
]
BOOTSTRAP = "accessConfig.bootstrapClusterCreatorAdminPermissions"


def h100_eks(**cluster) -> dict:
    return {"gpu": "h100", "topology": "disagg", "imagePullSecrets": ["ngc-secret"], "cluster": {"mode": "eks", **cluster}}


@pytest.fixture(scope="module")
def named() -> Graph:
    return graph(h100_eks(accessEntries=ACCESS))


def as_before_this_change(g: Graph) -> Graph:
    """``g`` as the program registered it before access entries, Secrets encryption and logs were its own: the creator's
    bootstrap admin, no encryptionConfig, no control-plane logs, no KMS key or log group, nothing ignored."""

    def old(res):
        c = one(res, R.EKS)
        c.inputs["accessConfig"] = {"authenticationMode": "API", "bootstrapClusterCreatorAdminPermissions": True}
        c.inputs.pop("encryptionConfig", None)
        c.inputs.pop("enabledClusterLogTypes", None)
        c.ignore_changes = ()
        gone = {r.urn for r in res if r.type in (R.KMS_KEY, R.LOG_GROUP, R.IAM_ROLE_POLICY)}  # the key's and the logs' policies
        c.dependencies = tuple(d for d in c.dependencies if d not in gone)
        res[:] = [r for r in res if r.urn not in gone and r.type not in (R.ACCESS_ENTRY, R.ACCESS_POLICY_ASSOCIATION)]

    return mutate(g, old)


def test_default_cluster_encrypts_secrets_and_logs_its_control_plane(on_demand_efs):
    c = one(on_demand_efs.resources, R.EKS)
    assert c.inputs["encryptionConfig"]["resources"] == ["secrets"]
    key = one(on_demand_efs.resources, R.KMS_KEY)
    assert key.inputs["enableKeyRotation"] is True and key.urn in c.dependencies
    assert c.inputs["enabledClusterLogTypes"] == ["api", "audit", "authenticator"]
    lg = one(on_demand_efs.resources, R.LOG_GROUP)
    assert (
        lg.inputs["name"] == "/aws/eks/dynamo-rules/cluster" and lg.inputs["retentionInDays"] == 90 and lg.urn in c.dependencies
    )
    policy = one(on_demand_efs.resources, R.IAM_ROLE_POLICY, "-cluster-secrets-key")
    assert (
        policy.inputs["role"] == "cluster-cluster-id"
        and "kms:Decrypt" in policy.inputs["policy"]
        and policy.urn in c.dependencies
    )
    # no accessEntries: the creator's bootstrap admin, as before; the flag is create-only, so it is always ignored on update
    assert c.inputs["accessConfig"] == {"authenticationMode": "API", "bootstrapClusterCreatorAdminPermissions": True}
    assert BOOTSTRAP in c.ignore_changes
    assert check(on_demand_efs) == []


def test_named_principals_replace_the_creators_admin(named):
    c = one(named.resources, R.EKS)
    assert c.inputs["accessConfig"] == {"authenticationMode": "API", "bootstrapClusterCreatorAdminPermissions": False}
    entries = {e.inputs["principalArn"]: e for e in named.of(R.ACCESS_ENTRY)}
    assoc = {a.inputs["principalArn"]: a for a in named.of(R.ACCESS_POLICY_ASSOCIATION)}
    assert set(entries) == set(assoc) == {DEPLOY, ALICE}
    assert assoc[DEPLOY].inputs["policyArn"] == "arn:aws:eks::aws:cluster-access-policy/AmazonEKSClusterAdminPolicy"
    assert assoc[DEPLOY].inputs["accessScope"] == {"type": "cluster"}
    assert assoc[ALICE].inputs["policyArn"] == "arn:aws:eks::aws:cluster-access-policy/AmazonEKSViewPolicy"
    assert assoc[ALICE].inputs["accessScope"] == {"type": "namespace", "namespaces": ["dynamo-rules"]}
    assert entries[DEPLOY].name == "cluster-access-123456789012-role-dynamo-deploy"
    # the Kubernetes provider (the platform, the DGD) waits for the cluster-admin's association
    assert all(assoc[DEPLOY].urn in p.dependencies for p in named.of("pulumi:providers:kubernetes"))
    assert check(named) == []


def test_access_rules_fail_on_incomplete_access(named):
    assert only(R.access_entries_are_complete, named) == [] and only(R.cluster_is_administered_without_the_creator, named) == []
    no_view = mutate(
        named,
        lambda res: res.remove(
            next(a for a in res if a.type == R.ACCESS_POLICY_ASSOCIATION and a.inputs["principalArn"] == ALICE)
        ),
    )
    assert any("without an access policy association" in m for m in only(R.access_entries_are_complete, no_view))
    twice = mutate(named, lambda res: res.append(copy.deepcopy(one(res, R.ACCESS_ENTRY, "-dynamo-deploy"))))
    assert any("a second access entry" in m for m in only(R.access_entries_are_complete, twice))
    unordered = mutate(named, lambda res: setattr(one(res, R.ACCESS_POLICY_ASSOCIATION, "-dynamo-deploy"), "dependencies", ()))
    assert any("without waiting for access entry" in m for m in only(R.access_entries_are_complete, unordered))
    no_admin = mutate(named, lambda res: res.remove(one(res, R.ACCESS_POLICY_ASSOCIATION, "-dynamo-deploy")))
    assert any("nobody can administer it" in m for m in only(R.cluster_is_administered_without_the_creator, no_admin))
    early = mutate(named, lambda res: [setattr(p, "dependencies", ()) for p in res if p.type == "pulumi:providers:kubernetes"])
    assert any(
        "does not wait for a cluster-admin access entry" in m for m in only(R.cluster_is_administered_without_the_creator, early)
    )
    config_map = mutate(named, lambda res: one(res, R.EKS).inputs["accessConfig"].update(authenticationMode="CONFIG_MAP"))
    assert any("CONFIG_MAP (EKS refuses it)" in m for m in only(R.cluster_is_administered_without_the_creator, config_map))


def test_encryption_and_log_rules_fail_on_a_broken_graph(on_demand_efs):
    assert only(R.secrets_are_envelope_encrypted_with_a_rotating_key, on_demand_efs) == []
    assert only(R.control_plane_logs_have_their_log_group_first, on_demand_efs) == []
    no_rotation = mutate(on_demand_efs, lambda res: one(res, R.KMS_KEY).inputs.update(enableKeyRotation=False))
    assert any("without enableKeyRotation" in m for m in only(R.secrets_are_envelope_encrypted_with_a_rotating_key, no_rotation))
    no_use = mutate(on_demand_efs, lambda res: res.remove(one(res, R.IAM_ROLE_POLICY, "-cluster-secrets-key")))
    assert any("no policy on KMS key" in m for m in only(R.secrets_are_envelope_encrypted_with_a_rotating_key, no_use))
    configmaps = mutate(on_demand_efs, lambda res: one(res, R.EKS).inputs["encryptionConfig"].update(resources=["configmaps"]))
    assert any("(EKS takes [secrets])" in m for m in only(R.secrets_are_envelope_encrypted_with_a_rotating_key, configmaps))
    no_group = mutate(on_demand_efs, lambda res: res.remove(one(res, R.LOG_GROUP)))
    assert any(
        "without the stack's log group /aws/eks/dynamo-rules/cluster" in m
        for m in only(R.control_plane_logs_have_their_log_group_first, no_group)
    )
    late = mutate(
        on_demand_efs,
        lambda res: setattr(
            one(res, R.EKS), "dependencies", tuple(d for d in one(res, R.EKS).dependencies if "logGroup" not in d)
        ),
    )
    assert any("does not wait for log group" in m for m in only(R.control_plane_logs_have_their_log_group_first, late))
    forever = mutate(on_demand_efs, lambda res: one(res, R.LOG_GROUP).inputs.update(retentionInDays=10))
    assert any("retentionInDays 10" in m for m in only(R.control_plane_logs_have_their_log_group_first, forever))
    may_create = mutate(on_demand_efs, lambda res: res.remove(one(res, R.IAM_ROLE_POLICY, "-cluster-no-log-group")))
    assert any("its role may create log groups" in m for m in only(R.control_plane_logs_have_their_log_group_first, may_create))


def test_encryption_and_logs_switch_off():
    g = graph(h100_eks(secretsEncryption=False, controlPlaneLogs=[]))
    c = one(g.resources, R.EKS)
    assert "encryptionConfig" not in c.inputs and not c.inputs.get("enabledClusterLogTypes")
    assert g.of(R.KMS_KEY) == [] and g.of(R.LOG_GROUP) == [] and g.of(R.IAM_ROLE_POLICY) == []
    assert check(g) == []
    audit_only = graph(h100_eks(controlPlaneLogs=["audit"], controlPlaneLogRetentionDays=365))
    assert one(audit_only.resources, R.EKS).inputs["enabledClusterLogTypes"] == ["audit"]
    assert one(audit_only.resources, R.LOG_GROUP).inputs["retentionInDays"] == 365


# ---------------------------------------------------------------------------- update rules: an existing cluster is never replaced


def test_existing_cluster_takes_access_entries_encryption_and_logs_in_place(on_demand_efs, named):
    """A cluster the program created before (creator bootstrap, no encryption, no logs) updated to this program's graph:
    the bootstrap flag keeps its value (ignoreChanges), encryption is associated in place, logs are an update."""
    existing = as_before_this_change(on_demand_efs)
    assert R.check_update(existing, on_demand_efs) == []
    assert R.check_update(existing, named) == []
    # without ignoreChanges the same update replaces the cluster
    replaced = mutate(named, lambda res: setattr(one(res, R.EKS), "ignore_changes", ()))
    assert R.check_update(existing, replaced) == [
        "eks_update_keeps_the_creator_bootstrap: cluster-eks: bootstrapClusterCreatorAdminPermissions True -> False replaces the cluster "
        "(create-only); keep it in ignoreChanges so an existing cluster keeps its value"
    ]
    # a cluster created with named principals keeps them when a stack drops accessEntries later
    assert R.check_update(named, graph(h100_eks())) == []


def test_turning_secrets_encryption_off_on_an_existing_cluster_is_refused(on_demand_efs):
    off = graph(h100_eks(secretsEncryption=False))
    assert R.check_update(on_demand_efs, off) == [
        "eks_update_never_removes_secrets_encryption: cluster-eks: Secrets envelope encryption (key cluster-secrets) removed from an "
        "existing cluster: EKS cannot disable it and the provider replaces the cluster; keep dynamo:cluster.secretsEncryption: true on this stack"
    ]
    assert R.check_update(off, on_demand_efs) == []  # turning it on is AssociateEncryptionConfig, in place

    def other_key(res):
        c = one(res, R.EKS)
        c.dependencies = tuple(d.replace("::cluster-secrets", "::cluster-secrets-2") for d in c.dependencies)

    assert any(
        "Secrets key cluster-secrets -> cluster-secrets-2" in m
        for m in R.check_update(on_demand_efs, mutate(on_demand_efs, other_key))
    )


def test_authentication_mode_never_moves_back(on_demand_efs):
    back = mutate(
        on_demand_efs, lambda res: one(res, R.EKS).inputs["accessConfig"].update(authenticationMode="API_AND_CONFIG_MAP")
    )
    assert R.check_update(on_demand_efs, back) == [
        "eks_update_authentication_mode_only_moves_to_api: cluster-eks: authenticationMode API -> API_AND_CONFIG_MAP: "
        "EKS cannot move back from access entries"
    ]
    assert R.check_update(back, on_demand_efs) == []


def test_kubernetes_version_moves_one_minor_per_update(on_demand_efs):
    def at(version):
        return mutate(on_demand_efs, lambda res: one(res, R.EKS).inputs.update(version=version))

    assert R.check_update(at("1.34"), at("1.35")) == []
    assert R.check_update(at("1.35"), at("1.35")) == []
    assert R.check_update(at("1.33"), at("1.35")) == [
        "eks_update_moves_one_minor_version: cluster-eks: version 1.33 -> 1.35: EKS upgrades one minor version per UpdateClusterVersion"
    ]
    assert R.check_update(at("1.35"), at("1.34")) == [
        "eks_update_moves_one_minor_version: cluster-eks: version 1.35 -> 1.34: EKS cannot downgrade a cluster"
    ]


# ---------------------------------------------------------------------------- update rules: a Capacity Block group's version at 0 nodes

NEXT_BLOCK = "cr-0fedcba9876543210"
CB_RULE = R.capacity_block_group_updates_its_version_at_zero_nodes


def _block(paused: bool = False, reservation: str = CR, capacity: str = "capacity-block") -> Graph:
    cfg = matrix_config("h100", capacity, "fsx-lustre")
    if capacity != "on-demand":
        cfg["cluster"]["capacityReservationId"] = reservation
    return graph({**cfg, "paused": True} if paused else cfg)


def test_capacity_block_version_update_passes_at_desired_zero():
    """Moving a paused Capacity Block group to the next block (a new launch template version) is accepted: desired 0."""
    paused, moved = _block(paused=True), _block(paused=True, reservation=NEXT_BLOCK)
    assert R._scaling(one(paused.resources, R.NODEGROUP, "-gpu")) == (0, 0, 1)
    assert R._version_changes(
        paused, moved, one(paused.resources, R.NODEGROUP, "-gpu"), one(moved.resources, R.NODEGROUP, "-gpu")
    ) == ["launch template cluster-gpu changes (capacityReservationSpecification): a new launch template version"]
    assert R.check_update(paused, moved) == []
    # pause and resume change only the scaling: no version update, whatever the size
    assert R.check_update(_block(), paused) == [] and R.check_update(moved, _block(reservation=NEXT_BLOCK)) == []


def test_capacity_block_version_update_fails_with_running_nodes():
    running, moved = _block(), _block(reservation=NEXT_BLOCK)
    v = CB_RULE(running, moved)
    assert len(v) == 1 and v[0].startswith(
        "cluster-gpu: launch template cluster-gpu changes (capacityReservationSpecification): a new launch template version "
        "while the Capacity Block group runs 1 node(s): EKS updates a Capacity Block group's version only at desired size 0"
    )
    assert "dynamo:paused: true" in v[0] and "Capacity Block groups: pause, update, resume" in v[0]
    guide = (ROOT / "docs" / "deploy-aws.md").read_text()
    assert "### Capacity Block groups: pause, update, resume" in guide and CB_RULE.__name__ in guide
    # pausing in the same update does not help: the provider sends UpdateNodegroupVersion before the new scaling
    same_up = CB_RULE(running, _block(paused=True, reservation=NEXT_BLOCK))
    assert len(same_up) == 1 and "this update also pauses it, but the version update goes out first" in same_up[0]
    # a move of the node group's own Kubernetes or AMI release version (both of which the program sets)
    for key, value in (("version", "1.35"), ("releaseVersion", "1.35.0-20261201")):
        newer = mutate(running, lambda res: one(res, R.NODEGROUP, "-gpu").inputs.update({key: value}))
        older = mutate(running, lambda res: one(res, R.NODEGROUP, "-gpu").inputs.update({key: "old"}))
        assert CB_RULE(older, newer), key
    # a launch template version the provider sends (its latest_version) counts too
    v2 = mutate(running, lambda res: one(res, R.NODEGROUP, "-gpu").inputs["launchTemplate"].update(version="2"))
    assert (
        [m for m in CB_RULE(running, v2) if m.startswith("cluster-gpu: launch template version 1 -> 2 while")]
        == CB_RULE(running, v2)
        != []
    )
    # the launch template's own tags make no new version
    tagged = mutate(running, lambda res: one(res, R.LAUNCH_TEMPLATE).inputs.update(tags={"team": "x"}))
    assert CB_RULE(running, tagged) == []


def test_on_demand_and_reserved_groups_update_their_launch_template_with_running_nodes():
    """Only Capacity Block groups need desired 0: an On-Demand Capacity Reservation moved to another reservation, or an
    on-demand group's launch template change, updates in place while the nodes run."""
    res_old, res_new = _block(capacity="reservation"), _block(capacity="reservation", reservation=NEXT_BLOCK)
    assert R._scaling(one(res_old.resources, R.NODEGROUP, "-gpu"))[1] == 1
    assert CB_RULE(res_old, res_new) == []
    od = _block(capacity="on-demand")
    changed = mutate(od, lambda res: one(res, R.LAUNCH_TEMPLATE).inputs["metadataOptions"].update(httpPutResponseHopLimit=3))
    assert one(od.resources, R.NODEGROUP, "-gpu").inputs["capacityType"] == "ON_DEMAND"
    assert CB_RULE(od, changed) == []
    assert R.check_update(od, changed) == []


# ---------------------------------------------------------------------------- what a pod can reach of AWS credentials
# The expected policies and hop limit come from the EKS Best Practices Guide (hop count 1) and the EKS user guide (the
# worker and ECR read-only policies on the node role; the CNI policy on the add-on's own role), not from the program.
KUBELET_POLICIES = {
    "arn:aws:iam::aws:policy/AmazonEKSWorkerNodePolicy",
    "arn:aws:iam::aws:policy/AmazonEC2ContainerRegistryReadOnly",
}
SSM = "arn:aws:iam::aws:policy/AmazonSSMManagedInstanceCore"
CNI = "arn:aws:iam::aws:policy/AmazonEKS_CNI_Policy"


def _karpenter_graph(**cluster) -> Graph:
    return graph(
        {
            "gpu": "h100",
            "topology": "disagg",
            "networkPolicy": {"enabled": True},
            "cluster": {"mode": "eks", "capacity": "karpenter", **cluster},
        }
    )


def _node_group_graph(**cluster) -> Graph:
    return graph({"gpu": "h100", "topology": "disagg", "networkPolicy": {"enabled": True}, "cluster": {"mode": "eks", **cluster}})


@pytest.mark.parametrize("path", EKS_STACKS, ids=lambda p: p.name)
def test_committed_eks_stack_keeps_node_credentials_from_pods(path):
    """Every committed EKS stack: IMDSv2 with hop limit 1 on every launch template and EC2NodeClass, node roles with
    the kubelet's two policies only (no SSM: no stack asks for it), the CNI policy on aws-node's own role."""
    g = graph(_stack_config(path), path.name.split(".")[1])
    for lt in g.of(R.LAUNCH_TEMPLATE):
        assert (
            lt.inputs["metadataOptions"]["httpPutResponseHopLimit"] == 1
            and lt.inputs["metadataOptions"]["httpTokens"] == "required"
        )
    for nc in g.of(R.EC2NODECLASS):
        assert nc.inputs["spec"]["metadataOptions"]["httpPutResponseHopLimit"] == 1
    # A group on EKS's own launch template (the system group) gets IMDSv2 and hop count 1 only on AL2023 (EKS user
    # guide, "Upgrade from Amazon Linux 2 to Amazon Linux 2023").
    default_template = [ng for ng in g.of(R.NODEGROUP) if not ng.inputs.get("launchTemplate")]
    assert default_template and all(ng.inputs["amiType"].startswith("AL2023_") for ng in default_template)
    roles = R._node_roles(g)
    assert roles
    for role in roles:
        assert set(R._attached(g, role)) == KUBELET_POLICIES, role.name
    cni = next(a for a in g.of(R.EKS_ADDON) if a.inputs["addonName"] == "vpc-cni")
    assert [a["serviceAccount"] for a in cni.inputs["podIdentityAssociations"]] == ["aws-node"]


def test_ssm_access_is_opt_in_on_both_node_roles():
    for g in (_node_group_graph(ssmAccess=True), _karpenter_graph(ssmAccess=True)):
        roles = R._node_roles(g)
        assert roles and all(set(R._attached(g, r)) == KUBELET_POLICIES | {SSM} for r in roles)
        assert R.pods_cannot_reach_the_node_role(g) == []
    with pytest.raises(Exception, match=r"ssmAccess"):
        run_program({"gpu": "h100", "cluster": {"mode": "eks", "ssmAccess": "yes please"}}, SECRETS, stack="rules")


@pytest.mark.parametrize("make", [_node_group_graph, _karpenter_graph], ids=["node-group", "karpenter"])
def test_a_hop_limit_of_two_or_imdsv1_lets_a_pod_take_the_node_role(make):
    g = make()
    assert R.pods_cannot_reach_the_node_role(g) == []

    def loosen(res, hop=2, tokens="required"):
        for r in res:
            if r.type == R.LAUNCH_TEMPLATE:
                r.inputs["metadataOptions"].update(httpPutResponseHopLimit=hop, httpTokens=tokens)
            if r.type == R.EC2NODECLASS:
                r.inputs["spec"]["metadataOptions"].update(httpPutResponseHopLimit=hop, httpTokens=tokens)

    for hop, tokens in ((2, "required"), (1, "optional")):
        v = R.pods_cannot_reach_the_node_role(mutate(g, lambda res: loosen(res, hop, tokens)))
        assert v and all("a pod can take the node role" in m for m in v)


def test_a_node_group_on_eks_default_launch_template_must_be_al2023():
    """EKS's own launch template requires IMDSv2 with hop count 1 for AL2023 AMI types (EKS user guide, "Upgrade from
    Amazon Linux 2 to Amazon Linux 2023"); the system group on an AL2 AMI type could hand the node role to a pod (the
    download Job runs there)."""
    g = _node_group_graph()
    system = next(ng for ng in g.of(R.NODEGROUP) if not ng.inputs.get("launchTemplate"))
    assert system.inputs["amiType"] == "AL2023_x86_64_STANDARD"
    for ami in ("AL2_x86_64", "BOTTLEROCKET_x86_64", None):
        v = R.pods_cannot_reach_the_node_role(mutate(g, lambda res: one(res, R.NODEGROUP, "-system").inputs.update(amiType=ami)))
        assert len(v) == 1 and system.name in v[0] and "a pod" in v[0], v


@pytest.mark.parametrize("make", [_node_group_graph, _karpenter_graph], ids=["node-group", "karpenter"])
def test_nodes_without_a_pinned_ami_release_are_refused(make):
    """What earlier versions registered (no releaseVersion, Karpenter's al2023@latest) fails; the plan passes."""
    g = make()
    assert R.nodes_run_a_pinned_ami_release(g) == []

    def unpin(res):
        for r in res:
            if r.type == R.NODEGROUP:
                r.inputs.pop("releaseVersion", None)
            if r.type == R.EC2NODECLASS:
                r.inputs["spec"]["amiSelectorTerms"] = [{"alias": "al2023@latest"}]

    v = R.nodes_run_a_pinned_ami_release(mutate(g, unpin))
    assert len(v) == len(g.of(R.NODEGROUP)) + len(g.of(R.EC2NODECLASS)) and v
    # a release of another Kubernetes version
    other = mutate(g, lambda res: one(res, R.NODEGROUP, "-system").inputs.update(releaseVersion="1.34.9-20260714"))
    assert any("an AMI release of Kubernetes 1.34, the group runs 1.35" in m for m in R.nodes_run_a_pinned_ami_release(other))


def test_role_names_carry_the_region_and_a_running_cluster_keeps_its_own():
    """Two stacks with one cluster name in two Regions claim one IAM role unless the Region is in its name; a role
    created under the old name keeps it (a renamed Karpenter node role would strand the nodes on the old one)."""
    east, west = _karpenter_graph(region="us-east-1"), _karpenter_graph(region="us-west-2")
    names = lambda g: {r.name: r.inputs["name"] for r in R._named_roles(g)}
    assert names(east) and set(names(east).values()).isdisjoint(names(west).values())
    assert R.named_iam_roles_carry_their_region(east) == [] and R.named_iam_roles_carry_their_region(west) == []

    # the names earlier versions wrote: dynamo-<stack>-karpenter(-node), the same in every Region
    def unregional(res):
        for r in res:
            if r.type == R.IAM_ROLE and r.inputs.get("name"):
                r.inputs["name"] = r.inputs["name"].replace("-us-east-1", "")

    old = mutate(east, unregional)
    v = R.named_iam_roles_carry_their_region(old)
    assert len(v) == len(names(east)) and all("does not carry the cluster's Region (us-east-1)" in m for m in v), v
    # a running stack created with those names: the update keeps them (ignoreChanges name), and would replace them without
    assert R.named_iam_roles_keep_their_names(old, east) == []
    renamed = mutate(east, lambda res: [setattr(r, "ignore_changes", ()) for r in res if r.type == R.IAM_ROLE])
    v = R.named_iam_roles_keep_their_names(old, renamed)
    assert len(v) == len(names(east)) and all("replaces the role" in m for m in v), v
    # the EC2NodeClass names the node role by the role's own (live) name
    nc = east.of(R.EC2NODECLASS)[0]
    node_role = next(r for r in R._named_roles(east) if r.name.endswith("-karpenter-node"))
    assert nc.inputs["spec"]["role"] == node_role.inputs["name"]


def test_a_long_role_name_fits_and_stays_regional():
    from stacks.cluster.identity import role_name

    a, b = (
        role_name("dynamo-" + "x" * 40, "us-east-1", "karpenter-node"),
        role_name("dynamo-" + "x" * 40, "us-west-2", "karpenter-node"),
    )
    c = role_name("dynamo-" + "x" * 40, "us-east-1", "karpenter")
    assert max(len(a), len(b), len(c)) <= 64 and len({a, b, c}) == 3  # IAM CreateRole: RoleName at most 64 characters


def test_an_ami_release_only_moves_forward():
    g = _node_group_graph()
    older = mutate(g, lambda res: [r.inputs.update(releaseVersion="1.35.5-20260601") for r in res if r.type == R.NODEGROUP])
    assert R.ami_release_never_moves_back(older, g) == []  # forward: an update EKS makes
    v = R.ami_release_never_moves_back(g, older)
    assert len(v) == len(g.of(R.NODEGROUP)) and all("1.35.6-20260714 -> 1.35.5-20260601 rolls the group back" in m for m in v), v


def test_a_system_group_on_the_default_disk_is_refused():
    g = _node_group_graph()
    assert R.system_nodes_hold_a_runtime_image(g) == []
    v = R.system_nodes_hold_a_runtime_image(mutate(g, lambda res: one(res, R.NODEGROUP, "-system").inputs.pop("diskSize")))
    assert len(v) == 1 and "unset (EKS default 20 GiB)" in v[0]
    v = R.system_nodes_hold_a_runtime_image(mutate(g, lambda res: one(res, R.NODEGROUP, "-system").inputs.update(diskSize=30)))
    assert len(v) == 1 and "diskSize 30" in v[0]


def test_the_cni_policy_on_a_node_role_is_refused_and_its_own_role_is_required():
    g = _node_group_graph()
    assert R.vpc_cni_has_its_own_identity_before_the_nodes(g) == [] and R.pods_cannot_reach_the_node_role(g) == []
    # the policy list earlier versions attached to the node role
    node = next(r for r in R._node_roles(g))
    old = mutate(
        g, lambda res: res.append(R.Res(R.RPA, f"{node.name}-AmazonEKS_CNI_Policy", {"role": node.name, "policyArn": CNI}))
    )
    assert [m for m in R.pods_cannot_reach_the_node_role(old) if "AmazonEKS_CNI_Policy" in m]
    # the add-on without its association, or with a role that lacks the policy
    bare = mutate(g, lambda res: one(res, R.EKS_ADDON, "-vpc-cni").inputs.pop("podIdentityAssociations"))
    assert [m for m in R.vpc_cni_has_its_own_identity_before_the_nodes(bare) if "no Pod Identity association for aws-node" in m]
    weak = mutate(
        g, lambda res: [r.inputs.update(policyArn=SSM) for r in res if r.type == R.RPA and r.inputs.get("policyArn") == CNI]
    )
    assert [m for m in R.vpc_cni_has_its_own_identity_before_the_nodes(weak) if "does not hold AmazonEKS_CNI_Policy" in m]


def test_node_groups_wait_for_the_cni_and_the_pod_identity_agent():
    g = _node_group_graph()
    cni = one(g.resources, R.EKS_ADDON, "-vpc-cni")
    for ng in g.of(R.NODEGROUP):
        assert cni.urn in ng.dependencies
    # the add-ons after the system nodes, as earlier versions created them
    after = mutate(
        g,
        lambda res: [
            r.__setattr__("dependencies", tuple(d for d in r.dependencies if ":Addon::" not in d))
            for r in res
            if r.type == R.NODEGROUP
        ],
    )
    v = R.vpc_cni_has_its_own_identity_before_the_nodes(after)
    assert any("without waiting for the vpc-cni add-on" in m for m in v)
    assert any("without waiting for the eks-pod-identity-agent add-on" in m for m in v)


def test_network_policies_on_eks_are_enforced_by_the_vpc_cni():
    g = _node_group_graph()
    assert g.of(R.NETWORK_POLICY), "networkPolicy: enabled renders NetworkPolicies"
    cni = one(g.resources, R.EKS_ADDON, "-vpc-cni")
    assert json.loads(cni.inputs["configurationValues"]) == {"enableNetworkPolicy": "true"}
    assert R.network_policies_are_enforced(g) == []
    # the add-on as earlier versions created it: policies rendered, nothing enforces them
    off = mutate(g, lambda res: one(res, R.EKS_ADDON, "-vpc-cni").inputs.pop("configurationValues"))
    v = R.network_policies_are_enforced(off)
    assert len(v) == 1 and "are not enforced" in v[0] and "enableNetworkPolicy" in v[0]
    # the front door's policy too, on the committed internet stack
    public = graph(_stack_config(ROOT / "Pulumi.h100-public.yaml"), "h100-public")
    assert any(str(p.inputs["metadata"]["name"]).endswith("front-door-ingress") for p in public.of(R.NETWORK_POLICY))
    assert R.network_policies_are_enforced(public) == []


def test_efs_cache_refuses_clients_without_tls(on_demand_efs):
    fs = one(on_demand_efs.resources, R.EFS)
    pol = next(p for p in on_demand_efs.of(R.EFS_POLICY) if p.inputs["fileSystemId"] == fs.id)
    doc = json.loads(pol.inputs["policy"])
    deny = [st for st in doc["Statement"] if st["Effect"] == "Deny"]
    assert deny and deny[0]["Condition"] == {"Bool": {"aws:SecureTransport": "false"}} and deny[0]["Action"] == "*"
    assert pol.retain_on_delete == fs.retain_on_delete  # kept with the file system, or the kept cache is open again
    assert R.efs_cache_refuses_clients_without_tls(on_demand_efs) == []
    # the cache as earlier versions created it: no policy
    bare = mutate(on_demand_efs, lambda res: res.remove(one(res, R.EFS_POLICY)))
    assert [m for m in R.efs_cache_refuses_clients_without_tls(bare) if "no file-system policy" in m]
    # a deny-only policy locks the nodes out (EFS's default grant is gone once a policy is set)
    deny_only = mutate(on_demand_efs, lambda res: one(res, R.EFS_POLICY).inputs.update(policy=json.dumps({"Statement": deny})))
    assert [m for m in R.efs_cache_refuses_clients_without_tls(deny_only) if "grants no ClientMount" in m]


def test_gpu_nodes_efa_group_admits_only_itself(on_demand_efs, block_fsx):
    for g in (on_demand_efs, block_fsx):
        sgs = R._node_security_groups(g)
        assert [sg.name for sg in sgs] == [next(r.name for r in g.of(R.SECURITY_GROUP) if r.name.endswith("-efa"))]
        assert R.gpu_node_security_group_admits_only_itself(g) == []
    efa = one(block_fsx.resources, R.SECURITY_GROUP, "-efa")
    cache_sg = one(block_fsx.resources, R.FSX).inputs["securityGroupIds"]
    # Lustre's client ports (FSx for Lustre user guide: TCP 988 and 1018-1023 from the file system's group), and on EFS none
    lustre = sorted((r["fromPort"], r["toPort"]) for r in efa.inputs["ingress"] if r.get("securityGroups") == cache_sg)
    assert lustre == [(988, 988), (1018, 1023)]
    assert all(r.get("self") is True for r in one(on_demand_efs.resources, R.SECURITY_GROUP, "-efa").inputs["ingress"])
    # the rules earlier versions wrote: all traffic from the VPC in, all traffic to anywhere out
    old = mutate(
        on_demand_efs,
        lambda res: (
            one(res, R.SECURITY_GROUP, "-efa")
            .inputs["ingress"]
            .append({"protocol": "-1", "fromPort": 0, "toPort": 0, "cidrBlocks": ["10.0.0.0/16"]}),
            one(res, R.SECURITY_GROUP, "-efa")
            .inputs["egress"]
            .append({"protocol": "-1", "fromPort": 0, "toPort": 0, "cidrBlocks": ["0.0.0.0/0"]}),
        ),
    )
    v = R.gpu_node_security_group_admits_only_itself(old)
    assert (
        len(v) == 2
        and any("ingress rule" in m and "10.0.0.0/16" in m for m in v)
        and any("egress rule" in m and "0.0.0.0/0" in m for m in v)
    )
    # Lustre's ports from the whole VPC instead of the cache's group
    wide = mutate(
        block_fsx,
        lambda res: [
            r.update(securityGroups=None, cidrBlocks=["10.0.0.0/16"])
            for r in one(res, R.SECURITY_GROUP, "-efa").inputs["ingress"]
            if r.get("fromPort") == 988
        ],
    )
    assert [m for m in R.gpu_node_security_group_admits_only_itself(wide) if "10.0.0.0/16" in m]


def test_karpenter_nodes_security_groups_are_held_to_the_same_rule():
    karpenter = [
        p
        for p in EKS_STACKS
        if any(
            (pool.get("capacity") == "karpenter")
            for pool in [_stack_config(p)["cluster"], *(_stack_config(p)["cluster"].get("gpuPools") or [])]
        )
    ]
    assert karpenter, "a committed stack runs its GPU pool on Karpenter"
    g = graph(_stack_config(karpenter[0]), karpenter[0].name.split(".")[1])
    efa = one(g.resources, R.SECURITY_GROUP, "-efa")
    assert efa in R._node_security_groups(g)  # the EC2NodeClass selects it by its discovery tag
    assert R.gpu_node_security_group_admits_only_itself(g) == []
    wide = mutate(
        g,
        lambda res: (
            one(res, R.SECURITY_GROUP, "-efa")
            .inputs["ingress"]
            .append({"protocol": "tcp", "fromPort": 22, "toPort": 22, "cidrBlocks": ["10.0.0.0/16"]})
        ),
    )
    assert len(R.gpu_node_security_group_admits_only_itself(wide)) == 1


# ---------------------------------------------------------------------------- updates in place
GB200_1M = "ultra-vllm-disagg-gb200-agentic-1M"


def _gb200(decode_replicas: int) -> Graph:
    return graph(
        {
            "target": GB200_1M,
            "fabricProfile": "aws-efa",
            "replicas": {"decode": decode_replicas},
            "cluster": {
                "mode": "eks",
                "marketType": "capacity-block",
                "capacityReservationId": CR,
                "gpuAvailabilityZone": "us-east-1-dfw-2a",
                "cacheStorage": "fsx-lustre",
            },
        }
    )


def test_gpu_node_groups_replace_nodes_without_spare_gpus():
    g = _block(capacity="on-demand")
    ng = one(g.resources, R.NODEGROUP, "-gpu")
    # the EKS API's own names (NodegroupUpdateConfig): updateStrategy MINIMAL, maxUnavailable
    assert ng.inputs["updateConfig"] == {"maxUnavailable": 1, "updateStrategy": "MINIMAL"}
    assert R.gpu_node_groups_update_without_spare_gpus(g) == []
    system = one(g.resources, R.NODEGROUP, "-system")
    assert "updateConfig" not in system.inputs  # the system group keeps EKS's default surge (no GPUs to find)
    # the update config earlier versions sent
    old = mutate(g, lambda res: one(res, R.NODEGROUP, "-gpu").inputs.update(updateConfig={"maxUnavailable": 1}))
    v = R.gpu_node_groups_update_without_spare_gpus(old)
    assert len(v) == 1 and v[0].startswith("cluster-gpu: updateConfig") and "MINIMAL" in v[0]


def test_a_launch_template_change_on_the_default_strategy_is_refused_as_an_update():
    """A reservation sized to the group (h100-disagg-staging's shape) gets a new user data: every node is replaced."""
    before = _block(capacity="reservation")
    user_data = mutate(before, lambda res: one(res, R.LAUNCH_TEMPLATE).inputs.update(userData="bmV3"))
    assert R.gpu_launch_template_change_needs_no_spare_gpus(before, user_data) == []
    default = lambda g: mutate(g, lambda res: one(res, R.NODEGROUP, "-gpu").inputs.update(updateConfig={"maxUnavailable": 1}))
    v = R.gpu_launch_template_change_needs_no_spare_gpus(default(before), default(user_data))
    assert len(v) == 1 and "launch template cluster-gpu changes (userData)" in v[0] and "replaces every node" in v[0]
    # a scaling-only change needs no strategy (no node is replaced)
    assert (
        R.gpu_launch_template_change_needs_no_spare_gpus(
            default(_block(capacity="reservation")), default(_block(capacity="reservation", paused=True))
        )
        == []
    )
    # the strategy set in the same update comes too late: the provider sends the version update first
    late = R.gpu_launch_template_change_needs_no_spare_gpus(default(before), user_data)
    assert len(late) == 1 and "provider sends the version update first" in late[0]


def test_a_decode_replica_change_leaves_the_compute_domain_spec_alone():
    one_decode, two_decodes = _gb200(1), _gb200(2)
    cds = [one(g.resources, R.COMPUTE_DOMAIN) for g in (one_decode, two_decodes)]
    assert cds[0].inputs["spec"] == cds[1].inputs["spec"]
    assert cds[0].inputs["spec"]["numNodes"] == 0  # the CRD's recommendation with IMEX daemons named by DNS
    assert R.immutable_specs_never_change_in_place(one_decode, two_decodes) == []
    assert R.check_update(one_decode, two_decodes) == []
    # the spec is never sent again (ignoreChanges): a ComputeDomain created with numNodes 2 keeps it after the upgrade
    assert "spec" in one(two_decodes.resources, R.COMPUTE_DOMAIN).ignore_changes
    counted = lambda g, n: mutate(g, lambda res: one(res, R.COMPUTE_DOMAIN).inputs["spec"].update(numNodes=n))
    assert R.immutable_specs_never_change_in_place(counted(one_decode, 2), two_decodes) == []
    # without it, the spec earlier versions wrote (numNodes followed the node count) is refused by `self == oldSelf`
    sent = lambda g: mutate(g, lambda res: setattr(one(res, R.COMPUTE_DOMAIN), "ignore_changes", ()))
    v = R.immutable_specs_never_change_in_place(counted(one_decode, 2), sent(counted(two_decodes, 3)))
    assert len(v) == 1 and "ComputeDomain.spec is immutable" in v[0]


def test_the_upgrade_policy_is_always_sent_and_names_its_choice():
    g = _node_group_graph()
    cluster = one(g.resources, R.EKS)
    assert cluster.inputs["upgradePolicy"] == {"supportType": "STANDARD"}
    assert R.upgrade_policy_is_sent(g) == []
    extended = _node_group_graph(upgradePolicy="EXTENDED")
    assert one(extended.resources, R.EKS).inputs["upgradePolicy"] == {"supportType": "EXTENDED"} and R.check(extended) == []
    # the cluster earlier versions created (no upgradePolicy: EKS's API default, EXTENDED); the update that adds it passes
    old = mutate(g, lambda res: one(res, R.EKS).inputs.pop("upgradePolicy"))
    v = R.upgrade_policy_is_sent(old)
    assert len(v) == 1 and "EKS takes EXTENDED" in v[0]
    assert R.check_update(old, g) == []
    with pytest.raises(Exception, match=r"upgradePolicy"):
        run_program({"gpu": "h100", "cluster": {"mode": "eks", "upgradePolicy": "NEVER"}}, SECRETS, stack="rules")


def test_the_end_of_standard_support_is_announced_before_it_comes():
    import datetime

    from stacks.cluster.access import standard_support_ends, support_warnings

    ends = standard_support_ends()
    # the dates versions.yaml records (endoflife.date/amazon-eks, read 2026-11-30)
    assert ends["1.34"] == datetime.date(2026, 12, 2) and ends["1.35"] == datetime.date(2027, 3, 27)
    assert support_warnings("1.35", "STANDARD", datetime.date(2026, 12, 2)) == []  # 115 days away
    (soon,) = support_warnings("1.35", "STANDARD", datetime.date(2027, 1, 1))
    assert (
        "dynamo:cluster.kubernetesVersion" in soon
        and "1.35 ends 2027-03-27 (in 85 days)" in soon
        and "upgrades the control plane by itself" in soon
    )
    (today,) = support_warnings("1.34", "EXTENDED", datetime.date(2026, 12, 2))
    assert "ends today" in today and "extended-support hourly price" in today
    (past,) = support_warnings("1.34", "STANDARD", datetime.date(2026, 12, 12))
    assert "ended 2026-12-02 (10 days ago)" in past


def test_adding_a_namespace_to_an_access_entry_replaces_its_association_delete_first():
    one_ns = graph(h100_eks(accessEntries=ACCESS))
    two_ns = graph(h100_eks(accessEntries=[ACCESS[0], {**ACCESS[1], "namespaces": ["dynamo-rules", "team-b"]}]))
    alice = [r for r in two_ns.of(R.ACCESS_POLICY_ASSOCIATION) if r.inputs["principalArn"] == ALICE]
    assert alice and all(r.delete_before_replace for r in alice)
    assert R.access_policy_association_is_replaced_delete_first(one_ns, two_ns) == []
    # the association as earlier versions registered it: replaced create-first
    create_first = mutate(
        two_ns, lambda res: [setattr(r, "delete_before_replace", False) for r in res if r.type == R.ACCESS_POLICY_ASSOCIATION]
    )
    v = R.access_policy_association_is_replaced_delete_first(one_ns, create_first)
    assert len(v) == 1 and "accessScope change" in v[0] and ALICE in v[0] and "deleteBeforeReplace" in v[0]


# ---------------------------------------------------------------------------- the front door's NLB and its controller
ENVOY_PROXY, LBC = R.ENVOY_PROXY, R.LBC_CHART


def _public() -> Graph:
    return graph(_stack_config(ROOT / "Pulumi.h100-public.yaml"), "h100-public")


def _ann(res) -> dict:
    return one(res, ENVOY_PROXY).inputs["spec"]["provider"]["kubernetes"]["envoyService"]["annotations"]


def test_the_public_front_door_nlb_is_built_by_a_controller_that_can():
    g = _public()
    assert R.front_door_nlb_is_built_by_a_controller_that_can(g) == []
    ann = _ann(g.resources)
    # the controller's own annotation names and values (AWS Load Balancer Controller docs, "Network Load Balancer")
    assert ann["service.beta.kubernetes.io/aws-load-balancer-type"] == "external"
    assert ann["service.beta.kubernetes.io/aws-load-balancer-nlb-target-type"] == "ip"
    assert ann["service.beta.kubernetes.io/aws-load-balancer-scheme"] == "internet-facing"
    rule = R.front_door_nlb_is_built_by_a_controller_that_can
    cases = {
        "no controller": lambda res: res.remove(next(r for r in res if r.type == R.HELM and r.inputs.get("chart") == LBC)),
        "no vpcId": lambda res: (
            next(r for r in res if r.type == R.HELM and r.inputs.get("chart") == LBC).inputs["values"].pop("vpcId")
        ),
        "no rights": lambda res: [
            r.inputs.update(policy=r.inputs["policy"].replace("elasticloadbalancing:CreateLoadBalancer", "x"))
            for r in res
            if r.type == R.IAM_POLICY
        ],
        "open to all": lambda res: (
            one(res, ENVOY_PROXY).inputs["spec"]["provider"]["kubernetes"]["envoyService"].pop("loadBalancerSourceRanges")
        ),
        "350 s idle": lambda res: _ann(res).update(
            {"service.beta.kubernetes.io/aws-load-balancer-listener-attributes.TCP-443": "tcp.idle_timeout.seconds=350"}
        ),
        "idle out of range": lambda res: _ann(res).update(
            {"service.beta.kubernetes.io/aws-load-balancer-listener-attributes.TCP-443": "tcp.idle_timeout.seconds=7000"}
        ),
        "instance targets": lambda res: _ann(res).update(
            {"service.beta.kubernetes.io/aws-load-balancer-nlb-target-type": "instance"}
        ),
        "untagged subnets": lambda res: [r.inputs["tags"].pop("kubernetes.io/role/elb", None) for r in res if r.type == R.SUBNET],
    }
    want = {
        "no controller": "does not install",
        "no vpcId": "values.vpcId not set",
        "no rights": "CreateLoadBalancer",
        "open to all": "admits every address",
        "350 s idle": "before the longest route timeout (600 s)",
        "idle out of range": "must be 60-6000",
        "instance targets": "IP targets",
        "untagged subnets": "kubernetes.io/role/elb=1",
    }
    for name, fn in cases.items():
        v = rule(mutate(g, fn))
        assert v and any(want[name] in m for m in v), (name, v)


def test_an_update_keeps_the_front_door_nlb_and_its_controller():
    before = _public()
    rotated = mutate(before, lambda res: _ann(res).update({"team": "x"}))
    assert R.front_door_update_keeps_its_load_balancer(before, rotated) == []
    # closing the door (no route left): the NLB goes as asked
    closed = mutate(
        before,
        lambda res: [
            res.remove(r)
            for r in list(res)
            if r.type in (ENVOY_PROXY, R.HTTP_ROUTE) or (r.type == R.HELM and r.inputs.get("chart") == LBC)
        ],
    )
    assert R.front_door_update_keeps_its_load_balancer(before, closed) == []
    # the gateway's EnvoyProxy renamed while the routes stay; the controller dropped while the NLB stays
    renamed = mutate(before, lambda res: setattr(one(res, ENVOY_PROXY), "name", "frontDoor-envoyproxy-other"))
    assert any("new DNS name" in m for m in R.front_door_update_keeps_its_load_balancer(before, renamed))
    no_lbc = mutate(before, lambda res: res.remove(next(r for r in res if r.type == R.HELM and r.inputs.get("chart") == LBC)))
    assert any("keeps its NLB" in m for m in R.front_door_update_keeps_its_load_balancer(before, no_lbc))
    # opening the door on a running EKS stack only adds: the rules accept the update
    closed_stack = {k: v for k, v in _stack_config(ROOT / "Pulumi.h100-public.yaml").items() if k != "frontDoor"}
    assert R.check_update(graph(closed_stack, "h100-public"), before) == []


@pytest.mark.parametrize("region, partition", [("us-gov-west-1", "aws-us-gov"), ("cn-north-1", "aws-cn")])
def test_a_region_of_another_partition_is_refused_before_any_resource(region, partition):
    """Every ARN the program writes is arn:aws:... (IAM user guide, "IAM identifiers": arn:partition:...)."""
    import harness

    with pytest.raises(Exception, match=rf"dynamo:cluster.region: '{region}' is in the {partition} partition") as e:
        run_program({"gpu": "h100", "cluster": {"mode": "eks", "region": region}}, SECRETS, stack="rules")
    assert "us-east-1" in str(e.value)  # the valid choices
    assert harness.LAST_RUN.resources == []
    g = graph({"gpu": "h100", "topology": "disagg", "cluster": {"mode": "eks"}})
    arns = [v for r in g.resources for v in (r.inputs.get("policyArn"), r.inputs.get("roleArn")) if isinstance(v, str)]
    assert arns and all(a.startswith("arn:aws:") for a in arns)  # what the refusal protects


# ---------------------------------------------------------------------------- node group versions, subnets, the FSx subnet
def test_every_node_group_names_the_control_plane_version(on_demand_efs):
    assert R.node_groups_follow_the_control_plane_version(on_demand_efs) == []
    # a group registered without version (as the program registered them before): it stays behind the control plane
    none = mutate(on_demand_efs, lambda res: [r.inputs.pop("version", None) for r in res if r.type == R.NODEGROUP])
    v = R.node_groups_follow_the_control_plane_version(none)
    assert len(v) == len(on_demand_efs.of(R.NODEGROUP)) and all("no version" in x for x in v)
    behind = mutate(on_demand_efs, lambda res: [r.inputs.update(version="1.20") for r in res if r.type == R.NODEGROUP][:1])
    assert any("version 1.20 is not the cluster's" in x for x in R.node_groups_follow_the_control_plane_version(behind))


def _zones(n: int) -> list[str]:
    return [f"us-east-1{c}" for c in "abcdef"[:n]]


def _count_layout(g: Graph, zones: list[str], local_zone: bool) -> Graph:
    """``g`` with its subnets cut as the program cut them before each zone had a fixed slot: private sizes follow the
    zone count (a quarter of the VPC's first half for up to 4 private subnets, an eighth for 5 to 8)."""
    import ipaddress

    n = len(zones) + (1 if local_zone else 0)
    first = next(next(ipaddress.ip_network(v.inputs["cidrBlock"]).subnets(prefixlen_diff=1)) for v in g.of(R.VPC))
    private = list(first.subnets(prefixlen_diff=2 if n <= 4 else 3))

    def old(res):
        for r in res:
            if r.type == R.SUBNET and "-private-" in r.name:
                r.inputs["cidrBlock"] = str(private[int(r.name.rsplit("-", 1)[1])])
            elif r.type == R.SUBNET and r.name.endswith("-gpu-local-zone"):
                r.inputs["cidrBlock"] = str(private[len(zones)])

    return mutate(g, old)


@pytest.mark.parametrize("before, after", [(3, 4), (4, 5), (5, 6), (2, 6)])
def test_adding_zones_moves_no_subnet(before, after):
    g0, g1 = graph(h100_eks(availabilityZones=_zones(before))), graph(h100_eks(availabilityZones=_zones(after)))
    assert len(g1.of(R.SUBNET)) == len(g0.of(R.SUBNET)) + 2 * (after - before)
    assert R.subnets_are_never_re_cut(g0, g1) == []
    old0, old1 = _count_layout(g0, _zones(before), False), _count_layout(g1, _zones(after), False)
    v = R.subnets_are_never_re_cut(old0, old1)
    # the count-sized layout re-cuts every private subnet once the private count passes a power of two
    assert bool(v) == (before <= 4 < after), v


def test_adding_a_local_zone_to_four_zones_moves_no_subnet():
    zones = _zones(4)
    g0 = graph(
        matrix_config("gb200", "capacity-block", "fsx-lustre")
        | {"cluster": {**matrix_config("gb200", "capacity-block", "fsx-lustre")["cluster"], "availabilityZones": zones}}
    )
    plain = graph(h100_eks(availabilityZones=zones))
    lz = one(g0.resources, R.SUBNET, "-gpu-local-zone")
    assert R.subnets_are_never_re_cut(plain, g0) == []
    # the layout by zone count put the Local Zone after the zones, and 5 private subnets re-cut all 4 zones' subnets
    v = R.subnets_are_never_re_cut(_count_layout(plain, zones, False), _count_layout(g0, zones, True))
    assert len([x for x in v if "-private-" in x.split(":")[0]]) == 4, v
    assert lz.inputs["cidrBlock"] not in {r.inputs["cidrBlock"] for r in plain.of(R.SUBNET)}


def test_the_fixed_slots_keep_the_three_zone_layout_and_the_old_layout_stays_available():
    # every committed EKS stack has three zones (and the GB200 ones a Local Zone): their blocks are those the layout
    # by zone count gave them, so their next `up` moves no subnet
    for path in EKS_STACKS:
        cfg = _stack_config(path)
        g = graph(cfg, path.stem.split(".", 1)[1])
        zones = cfg["cluster"].get("availabilityZones") or _zones(3)
        lz = any(r.name.endswith("-gpu-local-zone") for r in g.of(R.SUBNET))
        assert R.subnets_are_never_re_cut(_count_layout(g, zones, lz), g) == [], path.name
    # a cluster with four zones built before the slots keeps its subnets with subnetLayout: by-zone-count
    four = _count_layout(graph(h100_eks(availabilityZones=_zones(4))), _zones(4), False)
    assert R.subnets_are_never_re_cut(four, graph(h100_eks(availabilityZones=_zones(4)))) != []
    assert R.subnets_are_never_re_cut(four, graph(h100_eks(availabilityZones=_zones(4), subnetLayout="by-zone-count"))) == []


def test_moving_the_gpu_zone_keeps_the_fsx_subnet_only_when_the_cache_zone_is_kept():
    a = graph(h100_eks(cacheStorage="fsx-lustre", gpuAvailabilityZone="us-east-1a"))
    moved = graph(h100_eks(cacheStorage="fsx-lustre", gpuAvailabilityZone="us-east-1b"))
    kept = graph(h100_eks(cacheStorage="fsx-lustre", gpuAvailabilityZone="us-east-1b", cacheAvailabilityZone="us-east-1a"))
    v = R.fsx_cache_stays_in_its_subnet(a, moved)
    assert len(v) == 1 and "new, empty cache" in v[0]
    assert R.fsx_cache_stays_in_its_subnet(a, kept) == []
    assert R.subnets_are_never_re_cut(a, kept) == []


def test_every_arn_is_in_the_partition_of_the_providers_region(on_demand_efs):
    assert R.arns_are_in_the_regions_partition(on_demand_efs) == []
    # the same graph deployed to GovCloud (a Region the config refuses, since the program writes arn:aws:): every
    # resource that carries an ARN is named
    gov = mutate(
        on_demand_efs, lambda res: [r.inputs.update(region="us-gov-west-1") for r in res if r.type == "pulumi:providers:aws"]
    )
    v = R.arns_are_in_the_regions_partition(gov)
    assert v and all("partition aws, but the provider deploys to us-gov-west-1 (partition aws-us-gov)" in x for x in v)
    attachments = {
        r.name
        for r in gov.of("aws:iam/rolePolicyAttachment:RolePolicyAttachment")
        if str(r.inputs.get("policyArn", "")).startswith("arn:aws:")
    }
    assert attachments and attachments <= {x.split(":", 1)[0] for x in v}


def test_a_zone_removed_from_the_middle_moves_a_subnet_to_another_zone():
    g0, g1 = graph(h100_eks(availabilityZones=_zones(3))), graph(h100_eks(availabilityZones=["us-east-1a", "us-east-1c"]))
    v = R.subnets_are_never_re_cut(g0, g1)
    assert any("availabilityZone us-east-1b -> us-east-1c" in x for x in v), v
    # removed from the end: nothing moves (the removed zone's subnets are deleted)
    assert R.subnets_are_never_re_cut(g0, graph(h100_eks(availabilityZones=_zones(2)))) == []


def test_moving_the_gpu_zone_replaces_the_gpu_node_group_and_adding_a_zone_does_not():
    a = graph(h100_eks(gpuAvailabilityZone="us-east-1a"))
    v = R.gpu_node_groups_keep_their_subnets(a, graph(h100_eks(gpuAvailabilityZone="us-east-1b")))
    assert v and all("replaces the GPU node group, create-first" in x for x in v)
    assert R.gpu_node_groups_keep_their_subnets(a, graph(h100_eks(availabilityZones=_zones(4)))) == []


def _gb200_in(zones: list[str], **cluster) -> dict:
    cfg = matrix_config("gb200", "capacity-block", "fsx-lustre")
    return {**cfg, "cluster": {**cfg["cluster"], "availabilityZones": zones, **cluster}}


@pytest.mark.parametrize("n", [2, 3])
def test_clusters_cut_by_zone_count_keep_their_blocks_or_name_the_layout(n):
    """Two or three zones without a Local Zone, and three with one, keep the blocks the layout by zone count gave them;
    two zones with a Local Zone had it in the third quarter, which the fixed slots give the third zone: such a cluster
    keeps its blocks only with subnetLayout: by-zone-count."""
    plain = graph(h100_eks(availabilityZones=_zones(n)))
    assert R.subnets_are_never_re_cut(_count_layout(plain, _zones(n), False), plain) == []
    lz = graph(_gb200_in(_zones(n)))
    old = _count_layout(lz, _zones(n), True)
    assert (R.subnets_are_never_re_cut(old, lz) == []) == (n == 3)
    assert R.subnets_are_never_re_cut(old, graph(_gb200_in(_zones(n), subnetLayout="by-zone-count"))) == []
