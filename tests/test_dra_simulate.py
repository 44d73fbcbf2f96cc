"""The NVIDIA DRA driver's controller Deployment and kubelet-plugin DaemonSet on a simulated GB200 EKS cluster.

KWOK nodes shaped like the GB200 cluster plan (``stacks.cli.simulate.eks_groups``: the system group, and the GB200
group with its ``nvidia.com/gpu`` taint and ``nvidia.com/gpu.present`` label) in the local control plane
(``tools/kube-local.sh``: kube-apiserver, kube-controller-manager, kube-scheduler, kwok). The two workloads are built
as the chart's templates render them (kubernetes-sigs/dra-driver-nvidia-gpu deployments/helm/dra-driver-nvidia-gpu
templates/controller.yaml @c1b1452 and templates/kubeletplugin.yaml @6fade97: names ``<name>-controller`` and
``<name>-kubelet-plugin``, ``priorityClassName``, ``serviceAccountName``, ``nodeSelector``/``affinity``/``tolerations``
from the values) with the chart's defaults merged with the release's values (``dra_pod_specs`` in tests/aws_rules/dra.py).
The real DaemonSet and Deployment controllers create the pods, and the real scheduler binds them or says why not.

With the values the program installs (``stacks.cluster.dra_driver_values``, from the EKS UltraServer guide), the
controller runs on a system node and one kubelet plugin runs on every GB200 node. With the values it installed before
(the 25.x chart's defaults), the controller stays Pending (its required affinity names control-plane nodes, which EKS
does not have) and the DaemonSet schedules no plugin (the GB200 nodes' taint is not tolerated): the Helm release would
wait out its timeout while the UltraServer block bills.
"""

from __future__ import annotations

import copy
import time

import pytest

from conftest import need_tool
from local_cluster import control_plane

pytestmark = pytest.mark.engine

CB = {"market_type": "capacity-block", "capacity_reservation_id": "cr-0123456789abcdef0"}
GB200_DISAGG = "ultra-vllm-disagg-gb200-agentic-1m-1p1d"
# The DRA release's values before they followed the EKS guide (chart nvidia-dra-driver-gpu 25.12.0).
OLD_VALUES = {"nvidiaDriverRoot": "/", "resources": {"gpus": {"enabled": False}}}
RUN = "dra"


@pytest.fixture(scope="module")
def sim(tmp_path_factory):
    """A local control plane of this module's own (no CRDs needed), with the simulation client."""
    from stacks.cli.simulate import Simulator

    need_tool("kubectl")
    state = tmp_path_factory.mktemp("kube-dra")
    with control_plane(state, crds=False):
        s = Simulator(state / "kubeconfig", namespace="nvidia-dra-driver-gpu")
        try:
            s.ensure_namespace()
            yield s
        finally:
            s.close()


def gb200_nodes(run: str) -> tuple[list[dict], dict[str, str]]:
    """KWOK nodes of the GB200 cluster plan (two GB200 nodes for the disaggregated 1P1D target), and node -> group."""
    from stacks import catalog
    from stacks.cli.simulate import GROUP_LABEL, eks_groups, node_objects
    from stacks.cluster import EksConfig, build_cluster_plan

    cfg = EksConfig(**CB, gpu_availability_zone="us-east-1-dfw-2a", cache_storage="fsx-lustre")
    plan = build_cluster_plan("sim", cfg, catalog.targets()[GB200_DISAGG])
    nodes = node_objects(eks_groups(plan), run, prefix="dra")
    return nodes, {n["metadata"]["name"]: n["metadata"]["labels"][GROUP_LABEL] for n in nodes}


def workloads(values: dict, chart: str, namespace: str, run: str) -> list[dict]:
    """ServiceAccounts, the controller Deployment and the kubelet-plugin DaemonSet as the chart renders them (the
    scheduling-relevant fields; containers without their env and mounts, which the scheduler does not read)."""
    from aws_rules import dra_pod_specs
    from stacks.cli.simulate import RUN_LABEL

    eff, controller, plugin = dra_pod_specs(values, chart)
    name = eff.get("nameOverride") or chart
    image = "registry.k8s.io/dra-driver-nvidia/dra-driver-nvidia-gpu:v0.4.1"
    out = [
        {"apiVersion": "v1", "kind": "ServiceAccount", "metadata": {"name": f"{name}-{sa}", "namespace": namespace}}
        for sa in ("controller", "kubeletplugin")
    ]

    def template(component: str, sched: dict, part: dict, sa: str, containers: list[str]) -> dict:
        labels = {"app.kubernetes.io/name": name, f"{chart}-component": component, RUN_LABEL: run}
        spec = {
            "priorityClassName": part["priorityClassName"],
            "serviceAccountName": f"{name}-{sa}",
            "automountServiceAccountToken": False,
            "containers": [{"name": c, "image": image} for c in containers],
            **copy.deepcopy(sched),
        }
        return {"metadata": {"labels": labels}, "spec": spec}

    if eff["resources"]["computeDomains"]["enabled"]:
        t = template("controller", controller, eff["controller"], "controller", ["compute-domain"])
        out.append(
            {
                "apiVersion": "apps/v1",
                "kind": "Deployment",
                "metadata": {"name": f"{name}-controller", "namespace": namespace},
                "spec": {"replicas": 1, "selector": {"matchLabels": {f"{chart}-component": "controller"}}, "template": t},
            }
        )
    containers = [
        c
        for c, on in (
            ("compute-domains", eff["resources"]["computeDomains"]["enabled"]),
            ("gpus", eff["resources"]["gpus"]["enabled"]),
        )
        if on
    ]
    t = template("kubelet-plugin", plugin, eff["kubeletPlugin"], "kubeletplugin", containers)
    out.append(
        {
            "apiVersion": "apps/v1",
            "kind": "DaemonSet",
            "metadata": {"name": f"{name}-kubelet-plugin", "namespace": namespace},
            "spec": {"selector": {"matchLabels": {f"{chart}-component": "kubelet-plugin"}}, "template": t},
        }
    )
    return out


PATHS = {
    "ServiceAccount": "/api/v1/namespaces/{ns}/serviceaccounts",
    "Deployment": "/apis/apps/v1/namespaces/{ns}/deployments",
    "DaemonSet": "/apis/apps/v1/namespaces/{ns}/daemonsets",
}


def deploy(sim, values: dict, chart: str) -> dict:
    """Nodes, then the driver's objects; returns the DaemonSet and Deployment status and the pods, once the DaemonSet
    controller has counted the nodes and every pod is bound or marked unschedulable by the scheduler."""
    from stacks.cli.simulate import RUN_LABEL

    nodes, groups = gb200_nodes(RUN)
    sim.cleanup(RUN)
    objs = workloads(values, chart, sim.namespace, RUN)
    sim.create_nodes(nodes, RUN)
    total = len(sim.request("GET", "/api/v1/nodes").get("items", []))
    for o in objs:
        sim.request("POST", PATHS[o["kind"]].format(ns=sim.namespace), o)
    ds = next(o for o in objs if o["kind"] == "DaemonSet")["metadata"]["name"]
    deadline = time.monotonic() + 60
    while True:
        status = sim.request("GET", f"/apis/apps/v1/namespaces/{sim.namespace}/daemonsets/{ds}").get("status") or {}
        pods = sim.request("GET", f"/api/v1/namespaces/{sim.namespace}/pods?labelSelector={RUN_LABEL}%3D{RUN}").get("items", [])
        decided = all(
            (p.get("spec") or {}).get("nodeName")
            or any(
                c.get("type") == "PodScheduled" and c.get("status") == "False" and f"0/{total} nodes" in (c.get("message") or "")
                for c in (p.get("status") or {}).get("conditions") or []
            )
            for p in pods
        )
        counted = status.get("observedGeneration") == 1 and status.get("desiredNumberScheduled", -1) == len(
            [p for p in pods if p["metadata"]["labels"].get(f"{chart}-component") == "kubelet-plugin"]
        )
        want_controller = any(o["kind"] == "Deployment" for o in objs)
        has_controller = any(p["metadata"]["labels"].get(f"{chart}-component") == "controller" for p in pods)
        if (counted and decided and has_controller == want_controller) or time.monotonic() > deadline:
            break
        time.sleep(0.2)
    return {"groups": groups, "pods": pods, "daemonset": status}


def teardown(sim, chart: str, values: dict) -> None:
    from stacks.cli.simulate import RUN_LABEL  # noqa: F401 (cleanup below deletes the run's pods and nodes)

    for o in workloads(values, chart, sim.namespace, RUN):
        sim.request("DELETE", PATHS[o["kind"]].format(ns=sim.namespace) + f"/{o['metadata']['name']}", ok_missing=True)
    sim.cleanup(RUN)


def _component(pods: list[dict], chart: str, component: str) -> list[dict]:
    return [p for p in pods if p["metadata"]["labels"].get(f"{chart}-component") == component]


def _why(p: dict) -> str:
    return next(
        (c.get("message") or "" for c in (p.get("status") or {}).get("conditions") or [] if c.get("type") == "PodScheduled"), ""
    )


def test_dra_controller_and_plugins_schedule_with_the_eks_guide_values(sim):
    from stacks.cluster import dra_driver_spec

    spec = dra_driver_spec()
    try:
        got = deploy(sim, spec.values, spec.chart)
        groups = got["groups"]
        controller = _component(got["pods"], spec.chart, "controller")
        plugins = _component(got["pods"], spec.chart, "kubelet-plugin")
        assert len(controller) == 1 and controller[0]["spec"].get("nodeName"), _why(controller[0]) if controller else got
        assert groups[controller[0]["spec"]["nodeName"]] == "system"
        gpu_nodes = sorted(n for n, g in groups.items() if g == "gpu")
        assert len(gpu_nodes) == 2
        assert sorted(p["spec"].get("nodeName") or "" for p in plugins) == gpu_nodes, [
            (_why(p), p["spec"].get("nodeName")) for p in plugins
        ]
        assert got["daemonset"]["desiredNumberScheduled"] == 2
    finally:
        teardown(sim, spec.chart, spec.values)


def test_old_dra_values_leave_the_controller_pending_and_no_plugin(sim):
    chart = "nvidia-dra-driver-gpu"
    try:
        got = deploy(sim, OLD_VALUES, chart)
        controller = _component(got["pods"], chart, "controller")
        assert len(controller) == 1 and not controller[0]["spec"].get("nodeName")
        assert "didn't match Pod's node affinity/selector" in _why(controller[0])
        # The DaemonSet controller runs a plugin only where the pod would fit: the GB200 nodes' taint is not tolerated.
        assert got["daemonset"].get("desiredNumberScheduled") == 0 and _component(got["pods"], chart, "kubelet-plugin") == []
    finally:
        teardown(sim, chart, OLD_VALUES)
