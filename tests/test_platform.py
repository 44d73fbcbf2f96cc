"""The platform layer: pure builders (device plugins, NVIDIA stack, Dynamo chart), the
fabric/catalog contract, and mock tests of the two platform components."""

from __future__ import annotations

import json
from dataclasses import FrozenInstanceError

import pulumi
import pytest
from pulumi.runtime import mocks as pmocks

from harness import Mocks, RecordingMonitor, Run
from stacks import catalog
from stacks.cluster import platform as P
from stacks.catalog.model import AXES
from stacks.registry.versions import versions

BASE_RESOURCES = {"cpu", "memory", "nvidia.com/gpu", "ephemeral-storage"}


def tolerates(tolerations: list[dict], taint: dict) -> bool:
    """Kubernetes toleration matching for one taint."""
    for t in tolerations:
        if t.get("effect") and t["effect"] != taint["effect"]:
            continue
        op = t.get("operator", "Equal")
        if op == "Exists" and (not t.get("key") or t["key"] == taint["key"]):
            return True
        if op == "Equal" and t.get("key") == taint["key"] and t.get("value") == taint.get("value"):
            return True
    return False


def one(objs: list[dict], kind: str) -> dict:
    found = [o for o in objs if o["kind"] == kind]
    assert len(found) == 1, [o["kind"] for o in objs]
    return found[0]


# --------------------------------------------------------------------------- EFA


def test_efa_daemonset_selects_node_label_not_instance_types():
    ds = one(P.efa_device_plugin(), "DaemonSet")
    pod = ds["spec"]["template"]["spec"]
    assert ds["metadata"]["namespace"] == "kube-system"
    assert pod["nodeSelector"] == {P.EFA_NODE_LABEL: P.EFA_NODE_LABEL_VALUE}
    keys = [
        e["key"]
        for term in pod["affinity"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]["nodeSelectorTerms"]
        for e in term["matchExpressions"]
    ]
    assert "node.kubernetes.io/instance-type" not in keys
    assert "node.kubernetes.io/instance-type" not in json.dumps(ds)


def test_efa_daemonset_tolerates_gpu_taint():
    pod = one(P.efa_device_plugin(), "DaemonSet")["spec"]["template"]["spec"]
    assert tolerates(pod["tolerations"], P.GPU_TAINT)
    assert tolerates(pod["tolerations"], {"key": "nvidia.com/gpu", "value": "present", "effect": "NoSchedule"})


def test_efa_image_pinned_from_versions_and_upstream_mounts():
    ds = one(P.efa_device_plugin(), "DaemonSet")
    pod = ds["spec"]["template"]["spec"]
    (ctr,) = pod["containers"]
    assert ctr["image"] == versions()["plugins"]["aws-efa-k8s-device-plugin"]["image"]
    assert ctr["image"].endswith(":v0.5.20")
    assert {v["hostPath"]["path"] for v in pod["volumes"]} == {
        "/var/lib/kubelet/device-plugins",
        "/dev/infiniband/",
        "/opt/aws/neuron/",
    }
    assert {m["mountPath"] for m in ctr["volumeMounts"]} == {
        "/var/lib/kubelet/device-plugins",
        "/dev/infiniband/",
        "/opt/aws/neuron/",
    }
    assert pod["hostNetwork"] is True and ctr["securityContext"]["privileged"] is True
    assert ds["spec"]["selector"]["matchLabels"].items() <= ds["spec"]["template"]["metadata"]["labels"].items()


# --------------------------------------------------------------------------- RDMA


def test_rdma_plugin_exposes_rdma_ib_on_infiniband_devices():
    objs = P.rdma_shared_device_plugin()
    cm, ds = one(objs, "ConfigMap"), one(objs, "DaemonSet")
    assert cm["metadata"]["name"] == "rdma-devices" and cm["metadata"]["namespace"] == "kube-system"
    cfg = json.loads(cm["data"]["config.json"])
    (entry,) = cfg["configList"]
    assert f"{entry['resourcePrefix']}/{entry['resourceName']}" == "rdma/ib"
    assert entry["selectors"]["linkTypes"] == ["infiniband"] and entry["selectors"]["vendors"] == ["15b3"]
    pod = ds["spec"]["template"]["spec"]
    assert tolerates(pod["tolerations"], P.GPU_TAINT)
    assert pod["containers"][0]["image"] == versions()["plugins"]["k8s-rdma-shared-dev-plugin"]["image"]
    assert {
        "name": "config",
        "configMap": {"name": "rdma-devices", "items": [{"key": "config.json", "path": "config.json"}]},
    } in pod["volumes"]


def test_nscale_fabric_plugin_uses_its_own_resource_name():
    cm = one(P.fabric_objects("nscale"), "ConfigMap")
    (entry,) = json.loads(cm["data"]["config.json"])["configList"]
    assert f"rdma/{entry['resourceName']}" in P.exposed_resources("nscale")


# --------------------------------------------------------------------------- NVIDIA stack and Dynamo platform


def test_exactly_one_nvidia_stack_per_kind():
    dp, op = P.nvidia_gpu_stack("device-plugin"), P.nvidia_gpu_stack("gpu-operator")
    assert (dp.chart, dp.version) == ("nvidia-device-plugin", "0.20.0")
    assert (op.chart, op.version) == ("gpu-operator", "v26.7.0")
    assert op.values["devicePlugin"]["enabled"] is True  # the operator's own plugin is the only one installed
    assert tolerates(dp.values["tolerations"], P.GPU_TAINT)
    for bad in ("both", "", "device-plugin,gpu-operator", None):
        with pytest.raises(ValueError):
            P.nvidia_gpu_stack(bad)
    with pytest.raises(FrozenInstanceError):
        dp.version = "0.19.3"


def test_dynamo_platform_namespace_and_pinned_version():
    spec = P.dynamo_platform()
    pin = versions()["charts"]["dynamo-platform"]
    assert spec.namespace == "dynamo-system"
    assert (spec.chart, spec.version, spec.repo) == ("dynamo-platform", pin["version"], pin["repo"])
    assert spec.version == "1.6.0"
    assert spec.values["dynamo-operator"]["upgradeCRD"] is True
    assert spec.values["dynamo-operator"]["namespaceRestriction"]["enabled"] is False
    assert spec.archive_url == "https://helm.ngc.nvidia.com/nvidia/ai-dynamo/charts/dynamo-platform-1.6.0.tgz"
    assert P.dynamo_platform("1.4.0").version == "1.4.0"
    both = P.dynamo_platform(grove=True, kai_scheduler=True).values
    assert both["kai-scheduler"]["scheduler"]["args"]["default-staleness-grace-period"] == "-1s"


# --------------------------------------------------------------------------- fabric contract


def test_every_fabric_is_known_and_consistent():
    assert set(AXES["fabric"]) == set(P.FABRICS)
    for fabric in P.FABRICS:
        plugins = P.fabric_plugins(fabric)
        assert set(plugins) <= {"aws-efa-k8s-device-plugin", "k8s-rdma-shared-dev-plugin"}
        if fabric not in ("none", "gke-rdma"):
            assert plugins and P.exposed_resources(fabric), fabric
    assert P.exposed_resources("aws-efa") == {"vpc.amazonaws.com/efa"}
    assert P.exposed_resources("infiniband") == {"rdma/ib"}
    assert P.exposed_resources("none") == set() and P.fabric_plugins("none") == []
    with pytest.raises(ValueError):
        P.exposed_resources("roce")


def _fabric_requests(dgd: dict) -> set[str]:
    names: set[str] = set()
    for comp in dgd["spec"]["components"]:
        spec = comp["podTemplate"]["spec"]
        for ctr in spec.get("containers", []) + spec.get("initContainers", []):
            res = ctr.get("resources") or {}
            for section in ("requests", "limits"):
                names |= set(res.get(section) or {})
    return names - BASE_RESOURCES


@pytest.mark.parametrize("target_id", sorted(catalog.targets()))
def test_target_fabric_resources_are_exposed_by_its_fabric_plugin(target_id):
    t = catalog.targets()[target_id]
    dgd = one(catalog.recipe_objects(t), "DynamoGraphDeployment")
    exposed = P.exposed_resources(t.fabric)
    missing = sorted(_fabric_requests(dgd) - exposed)
    assert not missing, (
        f"target {target_id} (fabric {t.fabric}) requests {missing}, not exposed by its fabric plugin ({sorted(exposed)})"
    )


# --------------------------------------------------------------------------- components under mocks


def _run(program) -> Run:
    run = Run()
    monitor = RecordingMonitor(Mocks(), run)
    pmocks.set_mocks(Mocks(), project="dynamo", stack="test", preview=False, monitor=monitor)

    @pulumi.runtime.test
    def go():
        program()

    go()
    return run


def _assert_parented(run: Run, component_type: str):
    comp = run.one(component_type)
    children = [r for r in run.resources if r is not comp]
    assert children, "component registered no children"
    for r in children:
        assert r.parent == comp.urn, f"{r.type} {r.name} parent {r.parent}"


def _layer(plan, holder: dict) -> None:
    from components.layer import Layer

    holder["c"] = Layer(plan)


@pytest.mark.parametrize(
    "fabric,kind", [("aws-efa", "device-plugin"), ("infiniband", "gpu-operator"), ("nscale", "device-plugin")]
)
def test_device_plugins_parents_every_child(fabric, kind):
    from stacks.layers.platform import plan_device_plugins

    holder: dict = {}
    run = _run(lambda: _layer(plan_device_plugins([fabric], kind), holder))
    _assert_parented(run, "dynamo:platform:DevicePlugins")
    assert run.one("dynamo:platform:DevicePlugins").name == "device-plugins"
    (release,) = run.by_type("kubernetes:helm.sh/v3:Release")
    assert release.inputs["chart"] == P.nvidia_gpu_stack(kind).chart
    assert release.name == f"device-plugins-{P.nvidia_gpu_stack(kind).name}"
    assert len(run.by_type("kubernetes:apps/v1:DaemonSet")) == 1
    # The NVIDIA release, the fabric DaemonSet and (device plugin only; the GPU Operator has its own) RuntimeClass nvidia.
    assert len(holder["c"].ready) == (3 if kind == "device-plugin" else 2)
    if fabric != "aws-efa":
        ds, cm = run.one("kubernetes:apps/v1:DaemonSet"), run.one("kubernetes:core/v1:ConfigMap")
        assert cm.urn in ds.dependencies


def test_device_plugins_without_fabric_installs_only_nvidia():
    from stacks.layers.platform import plan_device_plugins

    run = _run(lambda: _layer(plan_device_plugins(["none"], "device-plugin"), {}))
    assert sorted(r.type for r in run.resources if r.type != "dynamo:platform:DevicePlugins") == [
        "kubernetes:helm.sh/v3:Release",
        "kubernetes:node.k8s.io/v1:RuntimeClass",
    ]
    rc = run.one("kubernetes:node.k8s.io/v1:RuntimeClass")
    assert rc.name == "device-plugins-nvidia-runtimeclass"
    assert rc.inputs["metadata"]["name"] == "nvidia" and rc.inputs["handler"] == "nvidia"  # what the Ultra recipes' pods name
    # The GPU Operator creates its own RuntimeClass nvidia: none of ours next to it.
    run = _run(lambda: _layer(plan_device_plugins(["none"], "gpu-operator"), {}))
    assert not run.by_type("kubernetes:node.k8s.io/v1:RuntimeClass")


def test_dynamo_platform_parents_namespace_and_release():
    from stacks.layers.platform import plan_dynamo_platform

    holder: dict = {}
    run = _run(lambda: _layer(plan_dynamo_platform(), holder))
    _assert_parented(run, "dynamo:platform:DynamoPlatform")
    ns, rel = run.one("kubernetes:core/v1:Namespace"), run.one("kubernetes:helm.sh/v3:Release")
    assert (ns.name, rel.name) == ("dynamo-platform-namespace", "dynamo-platform-release")
    assert ns.inputs["metadata"]["name"] == "dynamo-system"
    assert (
        rel.inputs["namespace"] == "dynamo-system" and rel.inputs["version"] == versions()["charts"]["dynamo-platform"]["version"]
    )
    assert rel.inputs["createNamespace"] is False  # the layer's Namespace is the one
    assert ns.urn in rel.dependencies
    assert holder["c"].ready == holder["c"].charts


def test_dynamo_platform_not_installed_registers_no_release_but_keeps_outputs():
    from stacks.layers.platform import plan_dynamo_platform

    holder: dict = {}
    run = _run(lambda: _layer(plan_dynamo_platform(install=False), holder))
    assert run.by_type("kubernetes:helm.sh/v3:Release") == []
    assert [r.type for r in run.resources] == ["dynamo:platform:DynamoPlatform"]
    assert holder["c"].ready == []
    outputs = {}
    for raw in run.raw_outputs:
        outputs.update(raw)
    assert outputs.get("namespace") == "dynamo-system" and outputs.get("version") == "1.6.0"


def test_efa_node_label_is_the_one_the_cluster_layer_sets():
    from stacks import cluster

    assert cluster.EFA_LABEL == P.EFA_NODE_LABEL and P.EFA_NODE_LABEL_VALUE == "true"
