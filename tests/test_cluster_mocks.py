"""Mock tests of the cluster layer wiring (pulumi.runtime.set_mocks): the resource graph per GPU,
ordering of platform, device plugins, download and DGD, and every committed stack under mocks."""
from pathlib import Path

import pytest
import yaml

from harness import run_program

ROOT = Path(__file__).resolve().parent.parent
TOKEN = {"hfToken": "hf_mock"}
DGD = "kubernetes:nvidia.com/v1beta1:DynamoGraphDeployment"


def eks(gpu, topology="agg", **cluster):
    return run_program({"gpu": gpu, "topology": topology, "cluster": {"mode": "eks", **cluster}}, TOKEN, stack=f"{gpu}-{topology}")


def stack_config(path: Path) -> dict:
    cfg = (yaml.safe_load(path.read_text()) or {}).get("config") or {}
    return {k.split(":", 1)[1]: v for k, v in cfg.items() if k.startswith("dynamo:")}


@pytest.fixture(scope="module")
def h100():
    return eks("h100", "disagg")


@pytest.mark.parametrize("gpu, instance, interfaces", [("h100", None, 32), ("h200", "p5en.48xlarge", 16), ("b200", None, 8)])
def test_launch_template_carries_every_efa_interface(gpu, instance, interfaces):
    run = eks(gpu, instanceType=instance) if instance else eks(gpu)
    lt = run.one("aws:ec2/launchTemplate:LaunchTemplate").inputs
    nis = lt["networkInterfaces"]
    assert len(nis) == interfaces
    assert nis[0]["interfaceType"] == "efa" and all(n["interfaceType"] == "efa-only" for n in nis[1:])
    ng = [r for r in run.by_type("aws:eks/nodeGroup:NodeGroup") if r.name.endswith("-gpu")][0].inputs
    assert ng["instanceTypes"] == [instance or {"h100": "p5.48xlarge", "b200": "p6-b200.48xlarge"}[gpu]]


def test_placement_group_and_capacity_options():
    run = eks("h100", capacityReservationId="cr-1", marketType="capacity-block")
    lt = run.one("aws:ec2/launchTemplate:LaunchTemplate").inputs
    assert run.one("aws:ec2/placementGroup:PlacementGroup").inputs["strategy"] == "cluster"
    assert lt["capacityReservationSpecification"]["capacityReservationTarget"]["capacityReservationId"] == "cr-1"
    assert lt["instanceMarketOptions"]["marketType"] == "capacity-block"
    assert eks("h100", placementGroup=False).by_type("aws:ec2/placementGroup:PlacementGroup") == []


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
    run = run_program(cfg, secrets, stack=path.name.split(".")[1])
    assert len(run.by_type(DGD)) == 1
    if (cfg.get("cluster") or {}).get("mode") == "eks":
        assert run.by_type("aws:eks/cluster:Cluster")
