"""AWS rules suite (stacks/aws_rules.py) on the resource graphs the real program registers under mocks:
every committed EKS stack and a GPU x capacity x cache-storage matrix pass every rule, and each rule fails
on a graph carrying the mistake it guards against (the shapes the cluster layer produced before issue 8)."""
from __future__ import annotations

import copy
import functools
from pathlib import Path

import pytest
import yaml

from harness import run_program
from stacks import aws_rules as R
from stacks.aws_rules import Graph, check

ROOT = Path(__file__).resolve().parent.parent
SECRETS = {"hfToken": "hf_mock", "ngcApiKey": "nvapi-mock"}
CR = "cr-0123456789abcdef0"
CAPACITY = {
    "on-demand": {},
    "reservation": {"capacityReservationId": CR},
    "capacity-block": {"marketType": "capacity-block", "capacityReservationId": CR},
}


def _stack_config(path: Path) -> dict:
    cfg = (yaml.safe_load(path.read_text()) or {}).get("config") or {}
    return {k.split(":", 1)[1]: v for k, v in cfg.items() if k.startswith("dynamo:")}


EKS_STACKS = sorted(p for p in ROOT.glob("Pulumi.*.yaml") if (_stack_config(p).get("cluster") or {}).get("mode") == "eks")


@functools.lru_cache(maxsize=None)
def _run(key: tuple) -> Graph:
    cfg = yaml.safe_load(key[0])
    return Graph(run_program(cfg, SECRETS, stack=key[1]).resources)


def graph(cfg: dict, stack: str = "rules") -> Graph:
    return _run((yaml.safe_dump(cfg), stack))


def matrix_config(gpu: str, capacity: str, cache: str) -> dict:
    cfg = {"gpu": gpu, "topology": "disagg", "imagePullSecrets": ["ngc-secret"],
           "cluster": {"mode": "eks", "cacheStorage": cache, **CAPACITY[capacity]}}
    if gpu != "h100":  # the h200/b200/gb200 disaggregated recipes carry InfiniBand or no fabric: EKS moves them onto EFA
        cfg["fabricProfile"] = "aws-efa"
    if gpu == "gb200":
        cfg["cluster"]["gpuAvailabilityZone"] = "us-east-1-dfw-2a"
    return cfg


MATRIX = [(g, c, s) for g in ("h100", "h200", "b200", "gb200") for c in CAPACITY for s in ("efs", "fsx-lustre")
          if g != "gb200" or c == "capacity-block"]  # GB200 is sold only as UltraServer Capacity Blocks


def test_every_finding_1_to_11_has_a_rule_with_a_cited_source():
    covered = {f for fs in R.RULES.values() for f in fs}
    assert covered >= set(range(1, 12))
    for fn in R.RULES:
        assert fn.__doc__ and "Source" in fn.__doc__, fn.__name__


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
        run_program(matrix_config("gb200", "on-demand", "efs"), SECRETS, stack="rules")
    assert harness.LAST_RUN.resources == []


# ---------------------------------------------------------------------------- each rule fails on a bad graph


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

    def old(res):  # before issue 8: instance type on the node group, none on the launch template
        one(res, R.NODEGROUP, "-gpu").inputs["instanceTypes"] = ["p5.48xlarge"]
        one(res, R.LAUNCH_TEMPLATE).inputs.pop("instanceType")
    v = only(R.capacity_block_launch_template, mutate(block_fsx, old))
    assert any("no instanceType" in x for x in v) and any("names instanceTypes" in x for x in v)
    assert only(R.instance_type_in_one_place, mutate(block_fsx, lambda res: one(res, R.NODEGROUP, "-gpu").inputs.update(instanceTypes=["p5.48xlarge"])))


def test_placement_group_rule_fails_with_a_reservation(block_fsx, on_demand_efs):
    assert only(R.no_placement_group_with_reservation, block_fsx) == []
    bad = mutate(block_fsx, lambda res: one(res, R.LAUNCH_TEMPLATE).inputs.update(placement={"groupName": "cluster-gpu"}))
    assert only(R.no_placement_group_with_reservation, bad)
    assert only(R.on_demand_efa_in_cluster_placement_group, on_demand_efs) == []
    assert only(R.on_demand_efa_in_cluster_placement_group, mutate(on_demand_efs, lambda res: one(res, R.LAUNCH_TEMPLATE).inputs.pop("placement")))


def test_ultraserver_rules_fail_on_the_old_gb200_stacks():
    g = graph(matrix_config("gb200", "capacity-block", "efs"))
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
    g = graph({"target": "ultra-vllm-disagg-gb200-agentic-1m-1p1d", "fabricProfile": "aws-efa",
               "cluster": {"mode": "eks", **CAPACITY["capacity-block"], "gpuAvailabilityZone": "us-east-1-dfw-2a"}})
    assert only(R.gb200_nvlink_domain_has_dra_and_compute_domain, g) == []
    no_driver = mutate(g, lambda res: res.remove(next(r for r in res if r.type == R.HELM and r.inputs.get("chart") == "nvidia-dra-driver-gpu")))
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
    # before issue 8: subnet_ids as a list, a StorageClass with a fileSystemId parameter and no PersistentVolume
    listed = mutate(block_fsx, lambda res: one(res, R.FSX).inputs.update(subnetIds=[fs.inputs["subnetIds"]]))
    assert any("subnetIds is a list" in x for x in only(R.argument_types_match_the_installed_sdk, listed))

    def storage_class(res):
        res.remove(one(res, R.PV))
        res.append(R.Res(R.STORAGE_CLASS, "model-cache", {"provisioner": "fsx.csi.aws.com", "parameters": {"fileSystemId": fs.id}}))
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

    def four_per_gpu(res):  # the fabric profile before issue 8: 4 EFA per GPU on every instance
        for comp in one(res, R.DGD).inputs["spec"]["components"]:
            for c in comp["podTemplate"]["spec"]["containers"]:
                for part in ("limits", "requests"):
                    sec = (c.get("resources") or {}).get(part) or {}
                    if "vpc.amazonaws.com/efa" in sec:
                        sec["vpc.amazonaws.com/efa"] = str(4 * int(sec["nvidia.com/gpu"]))
    assert only(R.efa_requests_follow_the_instance, mutate(g, four_per_gpu))
    primary_efa_only = mutate(g, lambda res: one(res, R.LAUNCH_TEMPLATE).inputs["networkInterfaces"][0].update(interfaceType="efa-only"))
    assert only(R.efa_only_is_never_the_primary_interface, primary_efa_only)


def test_node_count_rule_fails_when_replicas_outgrow_the_group():
    g = graph({"gpu": "h100", "topology": "disagg", "replicas": {"VllmDecodeWorker": 9}, "cluster": {"mode": "eks"}})
    assert only(R.gpu_node_group_holds_the_dgd, g) == []
    assert one(g.resources, R.NODEGROUP, "-gpu").inputs["scalingConfig"]["desiredSize"] == 2

    def one_node(res):  # before issue 8: the node count ignored the replicas override
        one(res, R.NODEGROUP, "-gpu").inputs["scalingConfig"].update(desiredSize=1, minSize=1, maxSize=1)
    assert any("desiredSize 1 < 2" in x for x in only(R.gpu_node_group_holds_the_dgd, mutate(g, one_node)))


def test_desired_size_rule_fails_when_pulumi_manages_it(block_fsx):
    assert only(R.desired_size_not_managed_after_create, block_fsx) == []
    bad = mutate(block_fsx, lambda res: setattr(one(res, R.NODEGROUP, "-gpu"), "ignore_changes", ()))
    assert only(R.desired_size_not_managed_after_create, bad)


def test_retention_rules_fail_on_the_old_retention(block_fsx):
    assert only(R.cache_file_system_follows_the_claim, block_fsx) == []
    assert only(R.retained_resources_keep_their_network, block_fsx) == []
    unprotected = graph({**matrix_config("h100", "capacity-block", "fsx-lustre"), "storage": {"protect": False}})
    assert only(R.cache_file_system_follows_the_claim, unprotected) == []
    # before issue 8: the file system always retained, whatever storage.protect said
    bad = mutate(unprotected, lambda res: setattr(one(res, R.FSX), "retain_on_delete", True))
    assert only(R.cache_file_system_follows_the_claim, bad)
    # a retained FSx whose subnet and security group are deleted: destroy stops on DependencyViolation
    v = only(R.retained_resources_keep_their_network, bad)
    assert any("subnetIds" in x for x in v) and any("securityGroupIds" in x for x in v)


def test_kubernetes_version_rule_fails_on_1_33(on_demand_efs):
    assert only(R.kubernetes_version_in_standard_support, on_demand_efs) == []
    assert only(R.kubernetes_version_in_standard_support, mutate(on_demand_efs, lambda res: one(res, R.EKS).inputs.update(version="1.33")))


def test_secrets_rule_fails_when_the_stack_does_not_create_them(block_fsx):
    assert only(R.secrets_exist_on_a_new_cluster, block_fsx) == []
    no_pull = mutate(block_fsx, lambda res: res.remove(next(r for r in res if r.type == R.SECRET and r.inputs["metadata"]["name"] == "ngc-secret")))
    assert any("imagePullSecret ngc-secret" in x for x in only(R.secrets_exist_on_a_new_cluster, no_pull))
    unordered = mutate(block_fsx, lambda res: setattr(one(res, R.DGD), "dependencies", ()))
    assert any("does not wait for imagePullSecret ngc-secret" in x for x in only(R.secrets_exist_on_a_new_cluster, unordered))
    no_token = mutate(block_fsx, lambda res: res.remove(next(r for r in res if r.type == R.SECRET and r.inputs["metadata"]["name"] != "ngc-secret")))
    assert any("is not created by the stack" in x for x in only(R.secrets_exist_on_a_new_cluster, no_token))


def test_efs_provisioned_rule_fails_without_the_value(on_demand_efs):
    g = graph({"gpu": "h100", "cluster": {"mode": "eks", "efsThroughputMode": "provisioned", "efsProvisionedThroughputMibps": 1024}})
    assert only(R.efs_provisioned_throughput_has_its_value, g) == []
    bad = mutate(g, lambda res: one(res, R.EFS).inputs.pop("provisionedThroughputInMibps"))
    assert only(R.efs_provisioned_throughput_has_its_value, bad)


# ---------------------------------------------------------------------------- issue 11: every rule on every GPU node group

TWO_GPUS = {"cluster": {"mode": "eks", "region": "us-east-1", "cacheStorage": "efs", "gpuPools": [{"gpu": "h100"}, {"gpu": "b200"}]}, "imagePullSecrets": ["ngc-secret"],
            "serve": [{"target": "lightning-vllm-disagg-h100-dspark", "namespace": "a", "replicas": {"VllmDecodeWorker": 9}},
                      {"model": "motif-3", "topology": "disagg", "fabricProfile": "aws-efa", "namespace": "m"},
                      {"model": "motif-3", "topology": "agg", "namespace": "m2", "replicas": {"Worker": 3}}]}


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
    bad = mutate(g, lambda res: setattr(one(res, R.NODEGROUP, "-gpu-b200"), "ignore_changes", ()))
    assert only(R.desired_size_not_managed_after_create, bad) == ["cluster-gpu-b200: scalingConfig.desiredSize is not in ignoreChanges"]
