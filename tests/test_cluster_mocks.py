"""Mock tests of the cluster layer wiring (pulumi.runtime.set_mocks): the resource graph per GPU,
ordering of platform, device plugins, download and DGD, and every committed stack under mocks."""

import json
from pathlib import Path

import pytest

from harness import run_program
from stacks.registry import yaml_text

ROOT = Path(__file__).resolve().parent.parent
TOKEN = {"hfToken": "hf_mock"}
DGD = "kubernetes:nvidia.com/v1beta1:DynamoGraphDeployment"


def eks(gpu, topology="agg", **cluster):
    return run_program(
        {"gpu": gpu, "topology": topology, "cluster": {"mode": "eks", **cluster}}, TOKEN, stack=f"{gpu}-{topology}"
    )


def stack_config(path: Path) -> dict:
    cfg = (yaml_text.load(path.read_text()) or {}).get("config") or {}
    return {k.split(":", 1)[1]: v for k, v in cfg.items() if k.startswith("dynamo:")}


@pytest.fixture(scope="module")
def h100():
    return eks("h100", "disagg")


@pytest.mark.parametrize("gpu, instance, interfaces", [("h100", None, 32), ("h200", "p5en.48xlarge", 16), ("b200", None, 8)])
def test_launch_template_carries_every_efa_interface(gpu, instance, interfaces):
    run = eks(gpu, instanceType=instance, efa=True) if instance else eks(gpu, efa=True)  # aggregated: EFA only when asked for
    lt = run.one("aws:ec2/launchTemplate:LaunchTemplate").inputs
    nis = lt["networkInterfaces"]
    assert len(nis) == interfaces
    assert nis[0]["interfaceType"] == "efa" and all(n["interfaceType"] == "efa-only" for n in nis[1:])
    ng = [r for r in run.by_type("aws:eks/nodeGroup:NodeGroup") if r.name.endswith("-gpu")][0].inputs
    assert ng["instanceTypes"] == [instance or {"h100": "p5.48xlarge", "b200": "p6-b200.48xlarge"}[gpu]]


def test_placement_group_and_capacity_options():
    run = eks("h100", capacityReservationId="cr-0123456789abcdef0", marketType="capacity-block")
    lt = run.one("aws:ec2/launchTemplate:LaunchTemplate").inputs
    assert run.by_type("aws:ec2/placementGroup:PlacementGroup") == [] and "placement" not in lt
    assert lt["capacityReservationSpecification"]["capacityReservationTarget"]["capacityReservationId"] == "cr-0123456789abcdef0"
    assert lt["instanceMarketOptions"]["marketType"] == "capacity-block" and lt["instanceType"] == "p5.48xlarge"
    ng = [r for r in run.by_type("aws:eks/nodeGroup:NodeGroup") if r.name.endswith("-gpu")][0]
    assert ng.inputs["capacityType"] == "CAPACITY_BLOCK" and "instanceTypes" not in ng.inputs
    assert ng.ignore_changes == []  # the desired size is the program's: a resize sends it with the new bounds
    on_demand = eks("h100", "disagg")
    assert on_demand.one("aws:ec2/placementGroup:PlacementGroup").inputs["strategy"] == "cluster"
    assert on_demand.one("aws:ec2/launchTemplate:LaunchTemplate").inputs["placement"]["groupName"] == "cluster-gpu"
    assert eks("h100", "disagg", placementGroup=False).by_type("aws:ec2/placementGroup:PlacementGroup") == []
    assert eks("h100").by_type("aws:ec2/placementGroup:PlacementGroup") == []  # one aggregated node: no EFA, no group


def test_fsx_cache_is_one_file_system_bound_by_a_static_volume():
    run = eks("h100", "disagg", cacheStorage="fsx-lustre")
    fs = run.one("aws:fsx/lustreFileSystem:LustreFileSystem")
    assert isinstance(fs.inputs["subnetIds"], str)  # pulumi-aws 7.x: one subnet id
    assert fs.retain_on_delete  # dynamo:storage.protect defaults on
    pv = run.one("kubernetes:core/v1:PersistentVolume").inputs["spec"]
    assert pv["csi"] == {
        "driver": "fsx.csi.aws.com",
        "volumeHandle": f"{fs.name}-id",
        "volumeAttributes": {"dnsname": f"{fs.name}.fsx.mock.amazonaws.com", "mountname": "abcdefgh"},
    }
    pvc = run.one("kubernetes:core/v1:PersistentVolumeClaim").inputs
    assert pv["claimRef"] == {"namespace": pvc["metadata"]["namespace"], "name": pvc["metadata"]["name"]}
    assert pvc["spec"]["storageClassName"] == pv["storageClassName"] == "fsx-model-cache"
    assert run.by_type("kubernetes:storage.k8s.io/v1:StorageClass") == []
    # the retained file system keeps its network so that destroy does not stop on DependencyViolation
    kept = {r.type for r in run.resources if r.retain_on_delete and r.type.startswith("aws:")}
    assert kept == {
        "aws:fsx/lustreFileSystem:LustreFileSystem",
        "aws:ec2/subnet:Subnet",
        "aws:ec2/securityGroup:SecurityGroup",
        "aws:ec2/vpc:Vpc",
    }


def test_unprotected_cache_leaves_nothing_behind():
    run = run_program(
        {
            "gpu": "h100",
            "topology": "disagg",
            "storage": {"protect": False},
            "cluster": {"mode": "eks", "cacheStorage": "fsx-lustre"},
        },
        TOKEN,
        stack="h100-disagg",
    )
    assert not [r.name for r in run.resources if r.retain_on_delete]


def test_pull_secret_from_the_ngc_key_stays_secret():
    from harness import SECRET_SIG

    run = run_program(
        {"gpu": "h100", "imagePullSecrets": ["ngc-secret"], "cluster": {"mode": "eks"}},
        {**TOKEN, "ngcApiKey": "nvapi-canary"},
        stack="h100-agg",
    )
    sec = [r for r in run.by_type("kubernetes:core/v1:Secret") if r.inputs["metadata"]["name"] == "ngc-secret"][0]
    assert sec.inputs["type"] == "kubernetes.io/dockerconfigjson"
    assert "nvapi-canary" in sec.inputs["stringData"][".dockerconfigjson"]
    assert SECRET_SIG in str(sec.raw_inputs["stringData"]) and "nvapi-canary" not in str(run.outputs)


def test_missing_ngc_key_refused_before_any_resource():
    import harness

    with pytest.raises(Exception, match="dynamo:ngcApiKey is not set"):
        run_program({"gpu": "h100", "imagePullSecrets": ["ngc-secret"], "cluster": {"mode": "eks"}}, TOKEN, stack="h100-agg")
    assert harness.LAST_RUN.resources == []


def test_gb200_local_zone_and_compute_domain():
    run = run_program(
        {
            "target": "ultra-vllm-disagg-gb200-agentic-1m-1p1d",
            "fabricProfile": "aws-efa",
            "cluster": {
                "mode": "eks",
                "marketType": "capacity-block",
                "capacityReservationId": "cr-0123456789abcdef0",
                "gpuAvailabilityZone": "us-east-1-dfw-2a",
                "cacheStorage": "fsx-lustre",
            },
        },
        TOKEN,
        stack="gb200",
    )
    subnets = {r.name: r.inputs["availabilityZone"] for r in run.by_type("aws:ec2/subnet:Subnet")}
    cluster_subnets = run.one("aws:eks/cluster:Cluster").inputs["vpcConfig"]["subnetIds"]
    assert "cluster-gpu-local-zone-id" not in cluster_subnets and subnets["cluster-gpu-local-zone"] == "us-east-1-dfw-2a"
    ng = [r for r in run.by_type("aws:eks/nodeGroup:NodeGroup") if r.name.endswith("-gpu")][0]
    assert ng.inputs["subnetIds"] == ["cluster-gpu-local-zone-id"]
    assert any(r.inputs.get("chart") == "dra-driver-nvidia-gpu" for r in run.by_type("kubernetes:helm.sh/v3:Release"))
    cd = run.one("kubernetes:resource.nvidia.com/v1beta1:ComputeDomain")
    assert cd.inputs["spec"]["numNodes"] == 0  # the CRD recommends 0 and makes the spec immutable


def test_gpu_nodegroup_taints_and_labels(h100):
    ng = [r for r in h100.by_type("aws:eks/nodeGroup:NodeGroup") if r.name.endswith("-gpu")][0].inputs
    assert ng["taints"] == [{"key": "nvidia.com/gpu", "value": "true", "effect": "NO_SCHEDULE"}]
    assert ng["labels"]["nvidia.com/gpu.product"] == "NVIDIA-H100-80GB-HBM3"
    assert ng["labels"]["vpc.amazonaws.com/efa.present"] == "true"
    assert ng["amiType"] == "AL2023_x86_64_NVIDIA"


def test_platform_and_device_plugins_come_before_the_dgd(h100):
    dgd = h100.one(DGD)
    release_urns = {r.urn for r in h100.by_type("kubernetes:helm.sh/v3:Release")}
    assert release_urns and release_urns <= set(dgd.dependencies)
    efa_ds = [r for r in h100.by_type("kubernetes:apps/v1:DaemonSet") if "efa" in r.name]
    assert efa_ds and efa_ds[0].urn in dgd.dependencies
    gpu_ng = [r for r in h100.by_type("aws:eks/nodeGroup:NodeGroup") if r.name.endswith("-gpu")][0]
    assert gpu_ng.urn in dgd.dependencies


def test_download_runs_on_system_nodes_in_parallel_with_gpu_nodes(h100):
    job = h100.one("kubernetes:batch/v1:Job")
    gpu_ng = [r for r in h100.by_type("aws:eks/nodeGroup:NodeGroup") if r.name.endswith("-gpu")][0]
    sys_ng = [r for r in h100.by_type("aws:eks/nodeGroup:NodeGroup") if r.name.endswith("-system")][0]
    sc = h100.one("kubernetes:storage.k8s.io/v1:StorageClass")
    assert gpu_ng.urn not in job.dependencies
    assert sys_ng.urn in job.dependencies and sc.urn in job.dependencies
    assert job.inputs["spec"]["template"]["spec"]["nodeSelector"] == {"dynamo.nvidia.com/pool": "system"}
    pvc = h100.one("kubernetes:core/v1:PersistentVolumeClaim")
    assert pvc.inputs["spec"]["storageClassName"] == "efs-model-cache"


def test_kubeconfig_output_is_secret(h100):
    from harness import SECRET_SIG

    exported = [raw for raw in h100.raw_outputs if "kubeconfig" in raw]
    for raw in exported:
        assert SECRET_SIG in str(raw["kubeconfig"])


@pytest.mark.parametrize("path", sorted(ROOT.glob("Pulumi.*.yaml")), ids=lambda p: p.name)
def test_every_committed_stack_runs_under_mocks(path, tmp_path, monkeypatch):
    kubeconfig = tmp_path / "kubeconfig"
    kubeconfig.write_text("apiVersion: v1\nkind: Config\nclusters: []\ncontexts: []\nusers: []\n")
    monkeypatch.setenv("KUBECONFIG", str(kubeconfig))
    cfg = stack_config(path)
    if (cfg.get("cluster") or {}).get("kubeconfigPath"):  # a path on the user's machine: point it at a test kubeconfig
        cfg["cluster"] = {**cfg["cluster"], "kubeconfigPath": str(kubeconfig)}
    secrets = {k: "mock-secret" for k, v in cfg.items() if isinstance(v, dict) and set(v) == {"secure"}}
    cfg = {k: v for k, v in cfg.items() if k not in secrets}
    if "hfTokenSecretName" not in cfg:
        secrets.update(TOKEN)
    if (cfg.get("cluster") or {}).get("mode") == "eks" and cfg.get("imagePullSecrets"):
        secrets.setdefault("ngcApiKey", "nvapi-mock")  # `pulumi config set --secret dynamo:ngcApiKey ...` on a real stack
    if ((cfg.get("frontDoor") or {}).get("auth") or {}).get("mode") == "apiKeys":  # one key per team, set with --secret --path
        secrets.setdefault("frontDoorApiKeys", json.dumps({"team-a": "a" * 32}))
    mode = (cfg.get("cluster") or {}).get("mode")
    if mode == "stack" and cfg.get("imagePullSecrets"):
        secrets.setdefault("ngcApiKey", "nvapi-mock")
    run = run_program(cfg, secrets, stack=path.name.split(".")[1])  # a StackReference reads the committed cluster stack
    assert len(run.by_type(DGD)) == (len(cfg["serve"]) if "serve" in cfg else 1)
    if mode == "eks":
        assert run.by_type("aws:eks/cluster:Cluster")
    if mode == "stack":
        assert run.by_type("aws:eks/cluster:Cluster") == [] and run.one("pulumi:providers:kubernetes")


def test_a_plan_that_cannot_fit_is_refused_before_any_resource():
    import harness

    with pytest.raises(Exception, match=r"dynamo:cluster\.gpuNodes: 1 .*use at least 2"):
        run_program(
            {"gpu": "h100", "topology": "disagg", "replicas": {"VllmDecodeWorker": 9}, "cluster": {"mode": "eks", "gpuNodes": 1}},
            TOKEN,
            stack="h100-disagg",
        )
    assert harness.LAST_RUN.resources == []


def test_h100_with_9_decode_replicas_gets_2_gpu_nodes():
    run = run_program(
        {"gpu": "h100", "topology": "disagg", "replicas": {"VllmDecodeWorker": 9}, "cluster": {"mode": "eks"}},
        TOKEN,
        stack="h100-disagg",
    )
    ng = [r for r in run.by_type("aws:eks/nodeGroup:NodeGroup") if r.name.endswith("-gpu")][0]
    assert ng.inputs["scalingConfig"]["desiredSize"] == 2


# ---------------------------------------------------------------------------- several GPU node groups, cluster and serving stacks

NODEGROUP = "aws:eks/nodeGroup:NodeGroup"
TWO_GPUS = {
    "cluster": {"mode": "eks", "region": "us-east-1", "gpuPools": [{"gpu": "h100"}, {"gpu": "b200"}]},
    "serve": [
        {"target": "lightning-vllm-disagg-h100-dspark", "namespace": "a", "replicas": {"VllmDecodeWorker": 9}},
        {"target": "lightning-vllm-agg-h100-dspark", "namespace": "a"},
        {"model": "motif-3", "topology": "disagg", "fabricProfile": "aws-efa", "namespace": "m"},
        {"model": "motif-3", "topology": "agg", "namespace": "m2", "replicas": {"Worker": 3}},
    ],
}


def test_two_gpu_types_get_two_gpu_node_groups_sized_from_the_sum():
    from stacks import catalog
    from aws_rules import Graph, check

    run = run_program(TWO_GPUS, TOKEN, stack="two-gpus")
    groups = {r.name: r.inputs for r in run.by_type(NODEGROUP) if r.name != "cluster-system"}
    assert set(groups) == {"cluster-gpu", "cluster-gpu-b200"}  # the first GPU keeps the single-target names
    assert groups["cluster-gpu"]["instanceTypes"] == ["p5.48xlarge"] and groups["cluster-gpu-b200"]["instanceTypes"] == [
        "p6-b200.48xlarge"
    ]
    assert {lt.name for lt in run.by_type("aws:ec2/launchTemplate:LaunchTemplate")} == {"cluster-gpu", "cluster-gpu-b200"}
    dgds = {r.inputs["metadata"]["namespace"] + "/" + r.inputs["metadata"]["name"]: r.inputs for r in run.by_type(DGD)}
    gpus = {
        "h100": sum(catalog.gpus_needed(d) for k, d in dgds.items() if k.startswith("a/")),
        "b200": sum(catalog.gpus_needed(d) for k, d in dgds.items() if k.startswith("m")),
    }
    # 9 decode replicas of the disaggregated h100 target need 2 nodes of 8 GPUs with 32 EFA; the b200 entries 2 nodes
    assert gpus["h100"] > 8 and gpus["b200"] > 8
    assert groups["cluster-gpu"]["scalingConfig"]["desiredSize"] == 2
    assert groups["cluster-gpu-b200"]["scalingConfig"]["desiredSize"] == 2
    # every b200 worker selects its GPU, so none lands on the h100 nodes; the AWS rules accept the graph
    for k, d in dgds.items():
        if k.startswith("m"):
            for c in d["spec"]["components"]:
                if "nvidia.com/gpu" in str(c["podTemplate"]["spec"].get("containers")):
                    assert c["podTemplate"]["spec"]["nodeSelector"]["nvidia.com/gpu.product"] == "NVIDIA-B200"
    assert check(Graph(run.resources)) == []
    # the DGDs wait for every GPU group
    ng_urns = {r.urn for r in run.by_type(NODEGROUP) if r.name != "cluster-system"}
    assert all(ng_urns <= set(d.dependencies) for d in run.by_type(DGD))


def test_a_gpu_pool_too_small_for_the_sum_is_refused_before_any_resource():
    import harness

    cfg = {**TWO_GPUS, "cluster": {**TWO_GPUS["cluster"], "gpuPools": [{"gpu": "h100"}, {"gpu": "b200", "nodes": 1}]}}
    with pytest.raises(
        Exception,
        match=r"dynamo:cluster\.gpuPools\[1\]\.nodes: 1 x p6-b200\.48xlarge cannot hold dynamo:serve\[2\], dynamo:serve\[3\] .*use at least 2",
    ):
        run_program(cfg, TOKEN, stack="two-gpus")
    assert harness.LAST_RUN.resources == []


def cluster_only(**cluster):
    return {"serve": [], "cluster": {"mode": "eks", "region": "us-east-1", **cluster}}


def test_cluster_stack_exports_what_serving_stacks_read():
    from harness import SECRET_SIG

    run = run_program(
        cluster_only(
            gpuPools=[{"gpu": "h100", "nodes": 2}, {"gpu": "b200", "nodes": 1, "capacityReservationId": "cr-0123456789abcdef0"}]
        ),
        {},
        stack="gpus",
    )
    assert run.by_type(DGD) == [] and run.by_type("kubernetes:core/v1:PersistentVolumeClaim") == []
    assert run.by_type("kubernetes:batch/v1:Job") == [] and run.by_type("kubernetes:core/v1:Namespace")  # the platform's only
    assert {r.inputs["chart"] for r in run.by_type("kubernetes:helm.sh/v3:Release")} >= {"dynamo-platform"}
    assert run.one("kubernetes:storage.k8s.io/v1:StorageClass").inputs["metadata"]["name"] == "efs-model-cache"
    out = run.outputs
    assert out["storageClassName"] == "efs-model-cache" and out["region"] == "us-east-1" and out["clusterName"] == "dynamo-gpus"
    pools = {p["gpu"]: p for p in out["nodePools"]}
    assert pools["h100"]["count"] == 2 and pools["h100"]["instanceType"] == "p5.48xlarge"
    assert pools["h100"]["allocatable"] == {"nvidia.com/gpu": 8, "vpc.amazonaws.com/efa": 32}
    assert pools["b200"]["count"] == 1 and pools["b200"]["allocatable"] == {"nvidia.com/gpu": 8, "vpc.amazonaws.com/efa": 8}
    assert all(SECRET_SIG in str(raw["kubeconfig"]) for raw in run.raw_outputs if "kubeconfig" in raw)
    groups = {r.name: r.inputs for r in run.by_type(NODEGROUP)}
    assert (
        groups["cluster-gpu"]["scalingConfig"]["desiredSize"] == 2
        and groups["cluster-gpu-b200"]["scalingConfig"]["desiredSize"] == 1
    )
    # the b200 pool targets a reservation: no placement group there, one for the on-demand h100 pool
    assert [pg.name for pg in run.by_type("aws:ec2/placementGroup:PlacementGroup")] == ["cluster-gpu"]


@pytest.mark.parametrize(
    "cfg, must",
    [
        (cluster_only(), r"dynamo:cluster\.gpuPools: not set"),
        (cluster_only(gpuPools=[{"gpu": "h100"}]), r"dynamo:cluster\.gpuPools\[0\]\.nodes: not set"),
        (
            cluster_only(gpuPools=[{"gpu": "a100", "nodes": 1}]),
            r"dynamo:cluster\.gpuPools\[0\]\.gpu: 'a100' is not a GPU with an EC2 instance type",
        ),
        (
            {**cluster_only(gpuPools=[{"gpu": "h100", "nodes": 1}]), "gpu": "h100"},
            r"dynamo:gpu: has no effect in a cluster-only stack",
        ),
        (
            {"serve": [], "cluster": {"mode": "render"}},
            r"dynamo:serve: \[\] is not a non-empty list .*cluster-only stack, which needs dynamo:cluster\.mode: eks",
        ),
    ],
)
def test_bad_cluster_only_stacks_are_refused_naming_the_key(cfg, must):
    from stacks.config.keys import ConfigError
    from stacks.program import build_program

    with pytest.raises(ConfigError, match=must):
        build_program(cfg, "c", frozenset())


REF = "org/dynamo/h100-cluster"
SERVING = {
    "cluster": {"mode": "stack", "stack": REF},
    "imagePullSecrets": ["ngc-secret"],
    "serve": [
        {"target": "lightning-vllm-agg-h100-dspark", "namespace": "llm"},
        {"target": "lightning-vllm-disagg-h100-dspark", "namespace": "llm"},
    ],
}
SERVING_SECRETS = {**TOKEN, "ngcApiKey": "nvapi-mock"}


def ref_outputs(storage_class="efs-model-cache", **pool):
    from harness import MOCK_KUBECONFIG

    base = {
        "name": "gpu",
        "gpu": "h100",
        "instanceType": "p5.48xlarge",
        "count": 2,
        "allocatable": {"nvidia.com/gpu": 8, "vpc.amazonaws.com/efa": 32},
        "labels": {},
        "taint": {"key": "nvidia.com/gpu", "value": "true", "effect": "NoSchedule"},
    }
    return {
        REF: {
            "kubeconfig": MOCK_KUBECONFIG.replace("mock.eks", "referenced.eks"),
            "storageClassName": storage_class,
            "nodePools": [{**base, **pool}],
            "clusterName": "dynamo-h100-cluster",
            "region": "us-east-1",
        }
    }


def test_serving_stack_on_a_cluster_stack_uses_the_referenced_cluster():
    from harness import SECRET_SIG

    run = run_program(
        {**SERVING, "storage": {"className": "fsx-model-cache"}},
        SERVING_SECRETS,
        stack="serving",
        stack_outputs=ref_outputs("fsx-model-cache"),
    )
    assert run.by_type("aws:eks/cluster:Cluster") == [] and run.by_type("kubernetes:helm.sh/v3:Release") == []
    provider = run.one("pulumi:providers:kubernetes")
    assert "referenced.eks" in provider.inputs["kubeconfig"] and SECRET_SIG in str(provider.raw_inputs["kubeconfig"])
    pvc = run.one("kubernetes:core/v1:PersistentVolumeClaim")  # the two entries share one cache and one download
    assert pvc.inputs["spec"]["storageClassName"] == "fsx-model-cache"
    job = run.one("kubernetes:batch/v1:Job")
    assert job.inputs["spec"]["template"]["spec"]["nodeSelector"] == {"dynamo.nvidia.com/pool": "system"}
    assert len(run.by_type(DGD)) == 2
    pull = [r for r in run.by_type("kubernetes:core/v1:Secret") if r.inputs["metadata"]["name"] == "ngc-secret"]
    assert len(pull) == 1 and pull[0].inputs["metadata"]["namespace"] == "llm"
    assert all(pull[0].urn in d.dependencies for d in run.by_type(DGD))


def test_serving_stack_whose_pools_are_too_small_fails_naming_the_pool_and_creates_no_dgd():
    import harness

    cfg = {**SERVING, "serve": [SERVING["serve"][0], {**SERVING["serve"][1], "replicas": {"VllmDecodeWorker": 9}}]}
    with pytest.raises(
        Exception,
        match=r"pool gpu \(1 x p5\.48xlarge\) cannot hold dynamo:serve\[0\], dynamo:serve\[1\]: they need 2 nodes .*1 more",
    ):
        run_program(cfg, SERVING_SECRETS, stack="serving", stack_outputs=ref_outputs(count=1))
    assert harness.LAST_RUN.by_type(DGD) == []
    with pytest.raises(Exception, match=r"has no h100 pool \(pools: b200\)"):
        run_program(
            SERVING, SERVING_SECRETS, stack="serving", stack_outputs=ref_outputs(gpu="b200", instanceType="p6-b200.48xlarge")
        )
    assert harness.LAST_RUN.by_type(DGD) == []


def test_serving_stack_claim_waits_for_the_storage_class_check():
    import harness

    with pytest.raises(
        Exception, match=r"dynamo:storage\.className: the cache claim asks for 'efs-model-cache', .*'fsx-model-cache'"
    ):
        run_program(SERVING, SERVING_SECRETS, stack="serving", stack_outputs=ref_outputs("fsx-model-cache"))
    assert harness.LAST_RUN.by_type("kubernetes:core/v1:PersistentVolumeClaim") == []


def test_two_gpu_types_without_gpu_pools_are_refused_before_any_resource():
    """Without gpuPools the entries' order would name the node groups: removing the first entry would replace another
    GPU's node group. The order must be stated."""
    raw = {**TWO_GPUS, "cluster": {k: v for k, v in TWO_GPUS["cluster"].items() if k != "gpuPools"}}
    with pytest.raises(Exception, match=r"dynamo:cluster.gpuPools: not set, but the entries run on h100, b200"):
        run_program(raw, TOKEN, stack="two-gpus")
    from harness import LAST_RUN

    assert LAST_RUN.resources == []


# ---- who may use the cluster, Secrets encryption, control-plane logs

ACCESS_STACKS = [p for p in sorted(ROOT.glob("Pulumi.*.yaml")) if ((stack_config(p).get("cluster") or {}).get("accessEntries"))]


def test_environment_stacks_name_their_cluster_admins():
    assert {p.name for p in ACCESS_STACKS} >= {
        "Pulumi.h100-disagg-staging.yaml",
        "Pulumi.h100-disagg-prod.yaml",
        "Pulumi.h100-cluster.yaml",
    }


@pytest.mark.parametrize("path", ACCESS_STACKS, ids=lambda p: p.name)
def test_committed_access_entries_become_entries_and_policies(path):
    cfg = stack_config(path)
    run = run_program(cfg, {**TOKEN, "ngcApiKey": "nvapi-mock"}, stack=path.name.split(".")[1])
    cluster = run.one("aws:eks/cluster:Cluster")
    assert cluster.inputs["accessConfig"]["bootstrapClusterCreatorAdminPermissions"] is False
    assert "accessConfig.bootstrapClusterCreatorAdminPermissions" in cluster.ignore_changes
    want = {e["principalArn"]: e["policy"] for e in cfg["cluster"]["accessEntries"]}
    entries = run.by_type("aws:eks/accessEntry:AccessEntry")
    assoc = run.by_type("aws:eks/accessPolicyAssociation:AccessPolicyAssociation")
    assert sorted(e.inputs["principalArn"] for e in entries) == sorted(want)
    policy_name = {
        "cluster-admin": "AmazonEKSClusterAdminPolicy",
        "view": "AmazonEKSViewPolicy",
        "admin": "AmazonEKSAdminPolicy",
        "edit": "AmazonEKSEditPolicy",
    }
    assert {a.inputs["principalArn"]: a.inputs["policyArn"].rsplit("/", 1)[1] for a in assoc} == {
        p: policy_name[v] for p, v in want.items()
    }


def test_secrets_key_and_log_group_come_before_the_cluster():
    run = eks("h100")
    cluster = run.one("aws:eks/cluster:Cluster")
    key, group = run.one("aws:kms/key:Key"), run.one("aws:cloudwatch/logGroup:LogGroup")
    use = next(p for p in run.by_type("aws:iam/rolePolicy:RolePolicy") if p.name.endswith("-cluster-secrets-key"))
    deny = next(p for p in run.by_type("aws:iam/rolePolicy:RolePolicy") if p.name.endswith("-cluster-no-log-group"))
    assert deny.inputs["role"] == use.inputs["role"] == "cluster-cluster-id"
    assert __import__("json").loads(deny.inputs["policy"])["Statement"] == [
        {"Effect": "Deny", "Action": ["logs:CreateLogGroup"], "Resource": "*"}
    ]
    assert {key.urn, group.urn, use.urn} <= set(cluster.dependencies)
    assert key.inputs["enableKeyRotation"] is True and cluster.inputs["encryptionConfig"]["resources"] == ["secrets"]
    assert group.inputs == {
        "name": "/aws/eks/dynamo-h100-agg/cluster",
        "retentionInDays": 90,
        "tags": {"dynamo.nvidia.com/cluster": "dynamo-h100-agg"},
    }
    assert cluster.inputs["enabledClusterLogTypes"] == ["api", "audit", "authenticator"]
    assert sorted(__import__("json").loads(use.inputs["policy"])["Statement"][0]["Action"]) == [
        "kms:Decrypt",
        "kms:DescribeKey",
        "kms:Encrypt",
        "kms:ListGrants",
    ]
    off = eks("h100", secretsEncryption=False, controlPlaneLogs=[])
    assert not off.by_type("aws:kms/key:Key") and not off.by_type("aws:cloudwatch/logGroup:LogGroup")
    assert "encryptionConfig" not in off.one("aws:eks/cluster:Cluster").inputs


# ------------------------------------------------------------------ the version the cluster runs, looked up before any resource


def _run_against(running, wanted, stack="upgrade", node_groups=None, **cluster):
    """An EKS stack whose cluster (dynamo-<stack>) runs ``running`` (None: no cluster yet) with ``node_groups`` (name ->
    (version, capacity type, desired size); default: the system and GPU groups at ``running``), and whose config asks
    for ``wanted``; the harness answers the program's aws.eks lookups as the provider does."""
    clusters = {} if running is None else {f"dynamo-{stack}": running}
    if node_groups is None and isinstance(running, str):
        node_groups = {"cluster-system-a1b2": (running, "ON_DEMAND", 2), "cluster-gpu-c3d4": (running, "ON_DEMAND", 1)}
    groups = {f"dynamo-{stack}": node_groups} if node_groups else {}
    # A running version whose standard support has ended by today is in extended support, which a STANDARD policy is
    # refused against (the upgrade policy tests below): these version-step tests then ask for EXTENDED, as the refusal
    # tells a user to, so that they test the step and not the calendar.
    if isinstance(running, str) and "upgradePolicy" not in cluster and _support_ended(running):
        cluster["upgradePolicy"] = "EXTENDED"
    return run_program(
        {"gpu": "h100", "cluster": {"mode": "eks", "kubernetesVersion": wanted, **cluster}},
        TOKEN,
        stack=stack,
        eks_clusters=clusters,
        eks_node_groups=groups,
    )


def _support_ended(version: str) -> bool:
    """Whether EKS standard support for ``version`` ended before today (the dates the program's own refusal reads)."""
    import datetime

    from stacks.cluster.access import standard_support_ends

    end = standard_support_ends().get(version)
    return end is not None and datetime.date.today() > end


def _registered_types():
    import harness

    return [r.type for r in harness.LAST_RUN.resources]


# ------------------------------------------------------------------ zones, subnets and the cache's zone on an existing cluster


def _existing(cluster: dict, subnets: list, cache_zone=None, stack="zones"):
    """An EKS stack at 1.35 whose cluster exists with ``subnets`` [(zone, CIDR)] (and its FSx cache in ``cache_zone``), as
    EC2 answers the program's lookups; the config asks for ``cluster``."""
    name = f"dynamo-{stack}"
    return run_program(
        {"gpu": "h100", "cluster": {"mode": "eks", "kubernetesVersion": "1.35", **cluster}},
        TOKEN,
        stack=stack,
        eks_clusters={name: "1.35"},
        eks_node_groups={name: {"cluster-system-a1b2": ("1.35", "ON_DEMAND", 2)}},
        ec2_subnets={name: subnets},
        cache_zones={name: cache_zone} if cache_zone else {},
    )


def _subnets_of(run) -> list:
    return sorted((r.inputs["availabilityZone"], r.inputs["cidrBlock"]) for r in run.by_type("aws:ec2/subnet:Subnet"))


def test_zones_are_added_in_fixed_slots_and_a_re_cut_is_refused_before_any_resource():
    three = ["us-east-1a", "us-east-1b", "us-east-1c"]
    live = _subnets_of(_existing({"availabilityZones": three}, []))
    assert len(live) == 6
    # the same zones: unchanged; a fourth, fifth and sixth zone each take their own slot: the live subnets are kept
    assert _subnets_of(_existing({"availabilityZones": three}, live)) == live
    six = _subnets_of(_existing({"availabilityZones": three + ["us-east-1d", "us-east-1e", "us-east-1f"]}, live))
    assert set(live) <= set(six) and len(six) == 12
    # a zone removed from the middle moves the next zone into its slot: refused, naming the zones and the blocks,
    # before any AWS resource
    with pytest.raises(Exception) as e:
        _existing({"availabilityZones": ["us-east-1a", "us-east-1c"]}, live)
    msg = str(e.value)
    assert (
        "re-cuts the subnets of EKS cluster 'dynamo-zones'" in msg
        and "us-east-1c: 10.0.32.0/19 (it has 10.0.144.0/21, 10.0.64.0/19)" in msg
    )
    assert "Keep the zones the cluster has" in msg
    assert _registered_types() == ["pulumi:providers:aws"]


def test_a_cluster_cut_by_zone_count_keeps_its_subnets_with_the_old_layout():
    four = ["us-east-1a", "us-east-1b", "us-east-1c", "us-east-1d"]
    old = {"availabilityZones": four, "subnetLayout": "by-zone-count"}
    live = _subnets_of(_existing(old, []))
    # planned with the fixed slots, its fourth zone would move: refused, naming the key that keeps the layout
    with pytest.raises(Exception) as e:
        _existing({"availabilityZones": four}, live)
    msg = str(e.value)
    assert "us-east-1d: 10.0.192.0/20 (it has 10.0.152.0/21, 10.0.96.0/19)" in msg and "subnetLayout: by-zone-count" in msg
    assert _registered_types() == ["pulumi:providers:aws"]
    assert _subnets_of(_existing(old, live)) == live
    # with that layout a fifth zone still halves every private subnet: refused
    with pytest.raises(Exception) as e:
        _existing({**old, "availabilityZones": four + ["us-east-1f"]}, live)
    msg = str(e.value)
    assert (
        "us-east-1a: 10.0.0.0/20 (it has 10.0.0.0/19)" in msg
        and "us-east-1f: 10.0.64.0/20 overlaps us-east-1c's 10.0.64.0/19" in msg
    )


def test_moving_the_gpu_zone_keeps_the_fsx_cache_or_says_so():
    live = _subnets_of(_existing({"cacheStorage": "fsx-lustre"}, []))
    # the GPU zone moves from us-east-1a to us-east-1b: the cache would follow it and be re-created empty
    with pytest.raises(Exception) as e:
        _existing({"cacheStorage": "fsx-lustre", "gpuAvailabilityZone": "us-east-1b"}, live, cache_zone="us-east-1a")
    msg = str(e.value)
    assert "dynamo:cluster.cacheAvailabilityZone: the FSx for Lustre cache of EKS cluster 'dynamo-zones' is in us-east-1a" in msg
    assert "Set dynamo:cluster.cacheAvailabilityZone: us-east-1a to keep the cache" in msg
    assert _registered_types() == ["pulumi:providers:aws"]
    # kept where it is: the file system stays in us-east-1a's subnet while the GPU nodes move
    kept = _existing(
        {"cacheStorage": "fsx-lustre", "gpuAvailabilityZone": "us-east-1b", "cacheAvailabilityZone": "us-east-1a"},
        live,
        cache_zone="us-east-1a",
    )
    fs = kept.one("aws:fsx/lustreFileSystem:LustreFileSystem")
    subnet = next(
        r
        for r in kept.by_type("aws:ec2/subnet:Subnet")
        if r.inputs["availabilityZone"] == "us-east-1a" and r.inputs["cidrBlock"].startswith("10.0.0.")
    )
    assert fs.inputs["subnetIds"] == f"{subnet.name}-id"
    # a new cache in the new zone, asked for by name
    new = _existing(
        {"cacheStorage": "fsx-lustre", "gpuAvailabilityZone": "us-east-1b", "cacheAvailabilityZone": "us-east-1b"},
        live,
        cache_zone="us-east-1a",
    )
    assert new.one("aws:fsx/lustreFileSystem:LustreFileSystem")
    # the same GPU zone: nothing to refuse
    assert _existing({"cacheStorage": "fsx-lustre"}, live, cache_zone="us-east-1a").one(
        "aws:fsx/lustreFileSystem:LustreFileSystem"
    )


@pytest.mark.parametrize(
    "cluster, must",
    [
        ({"cacheAvailabilityZone": "us-east-1a"}, r"cacheAvailabilityZone: only applies with cacheStorage: fsx-lustre"),
        (
            {"cacheStorage": "fsx-lustre", "cacheAvailabilityZone": "us-east-1-dfw-2a"},
            r"cacheAvailabilityZone: 'us-east-1-dfw-2a' is not one of",
        ),
    ],
)
def test_bad_cache_zone_names_the_key(cluster, must):
    from stacks.config.keys import ConfigError
    from stacks.config import cluster_config

    with pytest.raises(ConfigError, match=must):
        cluster_config({"cluster": {"mode": "eks", **cluster}})


def test_a_new_cluster_is_created_at_the_asked_version():
    run = _run_against(None, "1.35")
    assert run.one("aws:eks/cluster:Cluster").inputs["version"] == "1.35"


def test_one_minor_step_from_the_running_version_is_an_update():
    run = _run_against("1.34", "1.35")
    assert run.one("aws:eks/cluster:Cluster").inputs["version"] == "1.35"
    assert _run_against("1.35", "1.35").one("aws:eks/cluster:Cluster").inputs["version"] == "1.35"  # no change


def test_a_two_minor_jump_from_the_running_version_is_refused_before_any_resource():
    with pytest.raises(Exception) as e:
        _run_against("1.33", "1.35")
    msg = str(e.value)
    assert (
        "dynamo:cluster.kubernetesVersion: '1.35' is 2 minor versions ahead of '1.33', the version EKS cluster "
        "'dynamo-upgrade' runs"
    ) in msg
    assert (
        'set dynamo:cluster.kubernetesVersion: "1.34", run `pulumi up`; then set dynamo:cluster.kubernetesVersion: "1.35", '
        "run `pulumi up`"
    ) in msg
    # the AWS provider the lookup goes through is all that was registered: no cluster, node group or add-on
    assert _registered_types() == ["pulumi:providers:aws"]


def test_a_downgrade_of_the_running_version_is_refused_before_any_resource():
    with pytest.raises(Exception) as e:
        _run_against("1.35", "1.34")
    msg = str(e.value)
    assert "dynamo:cluster.kubernetesVersion: '1.34' is older than '1.35', the version EKS cluster 'dynamo-upgrade' runs" in msg
    assert "EKS cannot downgrade a cluster" in msg and 'set dynamo:cluster.kubernetesVersion: "1.35"' in msg
    assert _registered_types() == ["pulumi:providers:aws"]


def test_a_failed_lookup_is_not_taken_for_a_new_cluster():
    with pytest.raises(Exception) as e:
        _run_against(
            RuntimeError("reading EKS Cluster (dynamo-upgrade): operation error EKS: DescribeCluster, AccessDeniedException"),
            "1.35",
        )
    assert "could not read EKS cluster 'dynamo-upgrade' to check dynamo:cluster.kubernetesVersion" in str(e.value)
    assert "AccessDeniedException" in str(e.value)
    assert _registered_types() == ["pulumi:providers:aws"]


# The EKS AL2023 AMI release v20260714 per Kubernetes version, as awslabs/amazon-eks-ami CHANGELOG.md (81fec2e8, the
# nodeadm source the reference data holds) lists it under "AMI Details": Release version.
AMI_RELEASE_V20260714 = {"1.34": "1.34.9-20260714", "1.35": "1.35.6-20260714"}


def test_every_node_group_follows_the_control_plane_version_on_a_pinned_ami():
    run = _run_against("1.34", "1.35")
    groups = run.by_type("aws:eks/nodeGroup:NodeGroup")
    assert groups and {g.inputs["version"] for g in groups} == {"1.35"}
    assert {g.inputs["releaseVersion"] for g in groups} == {AMI_RELEASE_V20260714["1.35"]}
    run = _run_against(None, "1.34", upgradePolicy="EXTENDED")
    assert {g.inputs["releaseVersion"] for g in run.by_type("aws:eks/nodeGroup:NodeGroup")} == {AMI_RELEASE_V20260714["1.34"]}


def test_a_stack_pins_its_own_ami_release_of_its_kubernetes_version():
    run = _run_against(None, "1.35", amiReleaseVersion="1.35.5-20260601")
    assert {g.inputs["releaseVersion"] for g in run.by_type("aws:eks/nodeGroup:NodeGroup")} == {"1.35.5-20260601"}
    for bad, needles in (
        (
            "1.34.9-20260714",
            [
                "'1.34.9-20260714' is an AMI release for Kubernetes 1.34",
                "dynamo:cluster.kubernetesVersion is '1.35'",
                "'1.35.6-20260714'",
            ],
        ),
        ("v20260714", ["'v20260714' is not an EKS AMI release version like 1.35.6-20260714"]),
    ):
        with pytest.raises(Exception) as e:
            _run_against(None, "1.35", amiReleaseVersion=bad)
        assert "dynamo:cluster.amiReleaseVersion" in str(e.value) and all(n in str(e.value) for n in needles), str(e.value)
        assert _registered_types() == []


def test_an_ami_release_move_on_running_groups_is_said_before_it_replaces_their_nodes(caplog):
    import logging

    old = "1.35.5-20260601"
    groups = {
        "cluster-system-a1b2": ("1.35", "ON_DEMAND", 2, old, 20, {"dynamo.nvidia.com/pool": "system"}),
        "cluster-gpu-c3d4": ("1.35", "ON_DEMAND", 1, old, None, {"dynamo.nvidia.com/pool": "gpu"}),
    }
    with caplog.at_level(logging.WARNING):
        run = _run_against("1.35", "1.35", node_groups=groups)
    warned = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    new = AMI_RELEASE_V20260714["1.35"]
    for ng, how in (("cluster-system-a1b2", "new nodes first"), ("cluster-gpu-c3d4", "one node at a time (MINIMAL")):
        assert any(f"moves node group {ng} from AMI release {old} to {new}" in w and how in w for w in warned), warned
    system = next(r for r in run.by_type("aws:eks/nodeGroup:NodeGroup") if r.name.endswith("-system"))
    # the running system group keeps its 20 GiB disk (diskSize ignored), and the warning names the key that resizes it
    assert "diskSize" in system.ignore_changes
    assert any(
        "system node group cluster-system-a1b2 keeps its 20 GiB root disk" in w
        and f"dynamo:cluster.systemDiskGib: {int(system.inputs['diskSize'])}" in w
        for w in warned
    ), warned
    # groups already on the pin, with the planned disk: nothing to say
    caplog.clear()
    same = {n: (*g[:3], new, system.inputs["diskSize"], g[5]) for n, g in groups.items()}
    with caplog.at_level(logging.WARNING):
        _run_against("1.35", "1.35", node_groups=same)
    assert not [r for r in caplog.records if "node group" in r.getMessage()]


def test_a_pin_older_than_the_running_nodes_is_refused_before_any_resource():
    """A group created before the pin runs EKS's newest AMI then; EKS cannot roll it back (UpdateNodegroupVersion)."""
    with pytest.raises(Exception) as e:
        _run_against(
            "1.35",
            "1.35",
            node_groups={
                "cluster-system-a1b2": ("1.35", "ON_DEMAND", 2, "1.35.6-20260714"),
                "cluster-gpu-c3d4": ("1.35", "ON_DEMAND", 1, "1.35.7-20261020"),
            },
        )
    msg = str(e.value)
    assert (
        "dynamo:cluster.amiReleaseVersion: 1.35.6-20260714 is older than the AMI release node group(s) cluster-gpu-c3d4 "
        "(1.35.7-20261020)"
    ) in msg and "Set dynamo:cluster.amiReleaseVersion: 1.35.7-20261020" in msg
    assert _registered_types() == ["pulumi:providers:aws"]
    run = _run_against(
        "1.35",
        "1.35",
        amiReleaseVersion="1.35.7-20261020",
        node_groups={"cluster-gpu-c3d4": ("1.35", "ON_DEMAND", 1, "1.35.7-20261020")},
    )
    assert {g.inputs["releaseVersion"] for g in run.by_type("aws:eks/nodeGroup:NodeGroup")} == {"1.35.7-20261020"}


def test_an_ami_release_move_of_a_running_capacity_block_group_is_refused_before_any_resource():
    block = {"marketType": "capacity-block", "capacityReservationId": "cr-0123456789abcdef0"}
    with pytest.raises(Exception) as e:
        _run_against("1.35", "1.35", node_groups={"cluster-gpu-c3d4": ("1.35", "CAPACITY_BLOCK", 2, "1.35.5-20260601")}, **block)
    msg = str(e.value)
    assert (
        "dynamo:cluster.amiReleaseVersion: this `up` moves the Capacity Block group(s) cluster-gpu-c3d4 (1.35, AMI 1.35.5-20260601, 2 nodes)"
        in msg
    )
    assert f"to AMI release {AMI_RELEASE_V20260714['1.35']}" in msg and "version only at desired size 0" in msg
    assert _registered_types() == ["pulumi:providers:aws"]
    # paused, the move goes ahead
    _run_against("1.35", "1.35", node_groups={"cluster-gpu-c3d4": ("1.35", "CAPACITY_BLOCK", 0, "1.35.5-20260601")}, **block)


def test_the_system_nodes_disk_holds_the_runtime_images_they_pull():
    """EKS's default root disk for a group without a launch template is 20 GiB (CreateNodegroup diskSize), less than one
    Dynamo runtime image unpacked; the system group asks for more, and a set systemDiskGib is sent (a change replaces
    the group, so only then is diskSize not ignored)."""
    run = _run_against(None, "1.35")
    system = next(r for r in run.by_type("aws:eks/nodeGroup:NodeGroup") if r.name.endswith("-system"))
    assert system.inputs["diskSize"] > 20 + 2 * 12.2  # ai-dynamo/dynamo#1058: the vLLM runtime image alone was 12.2 GB
    run = _run_against(None, "1.35", systemDiskGib=300)
    system = next(r for r in run.by_type("aws:eks/nodeGroup:NodeGroup") if r.name.endswith("-system"))
    assert system.inputs["diskSize"] == 300 and "diskSize" not in system.ignore_changes


def test_a_control_plane_step_with_a_node_group_behind_is_refused_before_any_resource():
    with pytest.raises(Exception) as e:
        _run_against(
            "1.34",
            "1.35",
            node_groups={"cluster-system-a1b2": ("1.34", "ON_DEMAND", 2), "cluster-gpu-c3d4": ("1.33", "ON_DEMAND", 1)},
        )
    msg = str(e.value)
    assert (
        "dynamo:cluster.kubernetesVersion: '1.35' steps the control plane of EKS cluster 'dynamo-upgrade' from '1.34', but "
        "its node group(s) cluster-gpu-c3d4 (1.33) are not at '1.34'"
    ) in msg
    assert "aws eks update-nodegroup-version --cluster-name dynamo-upgrade" in msg
    assert _registered_types() == ["pulumi:providers:aws"]
    # the same groups without a step: nothing to refuse (the `up` brings the behind group to the control plane's version)
    run = _run_against("1.34", "1.34", node_groups={"cluster-gpu-c3d4": ("1.33", "ON_DEMAND", 1)})
    assert {g.inputs["version"] for g in run.by_type("aws:eks/nodeGroup:NodeGroup")} == {"1.34"}


def test_a_control_plane_step_with_a_running_capacity_block_group_is_refused_before_any_resource():
    block = {"marketType": "capacity-block", "capacityReservationId": "cr-0123456789abcdef0"}
    with pytest.raises(Exception) as e:
        _run_against(
            "1.34",
            "1.35",
            node_groups={"cluster-system-a1b2": ("1.34", "ON_DEMAND", 2), "cluster-gpu-c3d4": ("1.34", "CAPACITY_BLOCK", 1)},
            **block,
        )
    msg = str(e.value)
    assert "Capacity Block group(s) cluster-gpu-c3d4 (1 nodes)" in msg and "version only at desired size 0" in msg
    assert "dynamo:paused: true" in msg
    assert _registered_types() == ["pulumi:providers:aws"]
    # paused (EKS reports desired size 0): the step goes ahead
    run = _run_against(
        "1.34",
        "1.35",
        node_groups={"cluster-system-a1b2": ("1.34", "ON_DEMAND", 2), "cluster-gpu-c3d4": ("1.34", "CAPACITY_BLOCK", 0)},
        **block,
    )
    assert run.one("aws:eks/cluster:Cluster").inputs["version"] == "1.35"


def test_a_failed_node_group_lookup_stops_the_step():
    with pytest.raises(Exception) as e:
        _run_against("1.34", "1.35", node_groups=RuntimeError("operation error EKS: ListNodegroups, AccessDeniedException"))
    assert "could not read the node groups of EKS cluster 'dynamo-upgrade'" in str(e.value) and "AccessDeniedException" in str(
        e.value
    )


def test_a_running_capacity_block_group_behind_the_control_plane_is_refused_without_a_step():
    block = {"marketType": "capacity-block", "capacityReservationId": "cr-0123456789abcdef0"}
    with pytest.raises(Exception) as e:
        _run_against("1.35", "1.35", node_groups={"cluster-gpu-c3d4": ("1.34", "CAPACITY_BLOCK", 2)}, **block)
    assert "moves the Capacity Block group(s) cluster-gpu-c3d4 (1.34, 2 nodes)" in str(e.value)
    assert _registered_types() == ["pulumi:providers:aws"]
    _run_against("1.35", "1.35", node_groups={"cluster-gpu-c3d4": ("1.35", "CAPACITY_BLOCK", 2)}, **block)  # caught up: fine


def test_standard_support_policy_on_a_cluster_in_extended_support_is_refused(monkeypatch):
    import datetime

    from stacks.cluster import access

    assert access.standard_support_ends()["1.34"] == datetime.date(2026, 12, 2)
    later = datetime.date(2026, 12, 20)
    with pytest.raises(
        ValueError,
        match=r"upgradePolicy: 'STANDARD', but EKS cluster 'c' runs Kubernetes 1.34, whose standard support ended 2026-12-02",
    ):
        access.check_upgrade_policy("1.34", "STANDARD", later, "c")
    access.check_upgrade_policy("1.34", "EXTENDED", later, "c")
    access.check_upgrade_policy("1.34", "STANDARD", datetime.date(2026, 12, 2), "c")  # the last day of standard support
    access.check_upgrade_policy("1.35", "STANDARD", later, "c")


def test_gpu_node_group_updates_wait_for_one_node_at_a_time():
    """MINIMAL replaces one node at a time: the update's wait grows with the group (30 min a node, at least the
    provider's 60 min default), so `up` does not give up while EKS still rolls the nodes."""
    for nodes, minutes in ((1, 60), (4, 120)):
        run = _run_against(None, "1.35", gpuNodes=nodes)
        gpu = next(r for r in run.by_type("aws:eks/nodeGroup:NodeGroup") if r.name.endswith("-gpu"))
        assert gpu.inputs["updateConfig"]["updateStrategy"] == "MINIMAL"
        assert gpu.custom_timeouts.get("update") == f"{minutes}m", gpu.custom_timeouts


def test_kubernetes_providers_wait_for_the_access_entries_by_order_not_by_data():
    """A policy association replaced delete-first must not make a provider's kubeconfig unknown (the engine would then
    replace the provider and every object it manages): the providers depend on the associations, the kubeconfig not."""
    cfg = {
        "gpu": "h100",
        "cluster": {
            "mode": "eks",
            "accessEntries": [{"principalArn": "arn:aws:iam::123456789012:role/deploy", "policy": "cluster-admin"}],
        },
    }
    run = run_program(cfg, TOKEN, stack="order")
    assoc = [r.urn for r in run.by_type("aws:eks/accessPolicyAssociation:AccessPolicyAssociation")]
    provider = next(r for r in run.resources if r.type == "pulumi:providers:kubernetes" and r.name == "eks")
    assert assoc and set(assoc) <= set(provider.dependencies)


def test_a_launch_template_change_of_a_running_capacity_block_group_is_refused_before_any_resource(caplog):
    """The next block's reservation id is a new launch template version: EKS applies it as a version update, only at
    desired size 0. The live group's digest tag (what `up` last gave it) is compared with the plan's."""
    import logging

    from stacks.cluster.pools import LAUNCH_TEMPLATE_DIGEST_TAG

    block = {"marketType": "capacity-block", "capacityReservationId": "cr-0123456789abcdef0"}
    release = AMI_RELEASE_V20260714["1.35"]
    run = _run_against("1.35", "1.35", node_groups={}, **block)
    gpu = next(r for r in run.by_type("aws:eks/nodeGroup:NodeGroup") if "-gpu" in r.name)
    tag = gpu.inputs["tags"][LAUNCH_TEMPLATE_DIGEST_TAG]

    def live(desired: int, digest=tag) -> dict:
        tags = {LAUNCH_TEMPLATE_DIGEST_TAG: digest} if digest else {}
        return {"cluster-gpu-c3d4": ("1.35", "CAPACITY_BLOCK", desired, release, None, {"dynamo.nvidia.com/pool": "gpu"}, tags)}

    # the same plan: nothing to refuse, and the tag is stable from one run to the next
    assert (
        next(
            r
            for r in _run_against("1.35", "1.35", node_groups=live(2), **block).by_type("aws:eks/nodeGroup:NodeGroup")
            if "-gpu" in r.name
        ).inputs["tags"][LAUNCH_TEMPLATE_DIGEST_TAG]
        == tag
    )
    # the next block, while the group runs nodes: refused, naming the group and the pause
    nxt = {**block, "capacityReservationId": "cr-0fedcba9876543210"}
    with pytest.raises(Exception) as e:
        _run_against("1.35", "1.35", node_groups=live(2), **nxt)
    msg = str(e.value)
    assert "gives the running Capacity Block group(s) cluster-gpu-c3d4 (2 nodes)" in msg and "Pause them first" in msg
    assert _registered_types() == ["pulumi:providers:aws"]
    # paused (desired 0), the change goes ahead; a group without the tag yet gets a warning, not a refusal
    _run_against("1.35", "1.35", node_groups=live(0), **nxt)
    with caplog.at_level(logging.WARNING):
        _run_against("1.35", "1.35", node_groups=live(2, digest=None), **nxt)
    assert any("carries no launch template digest yet" in r.getMessage() for r in caplog.records)
