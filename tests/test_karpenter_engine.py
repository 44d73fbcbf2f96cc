"""The real Karpenter launches and removes the GPU nodes of a serving stack on the simulated cluster.

Karpenter v1.13.0 (sigs.k8s.io/karpenter, its KWOK cloud provider: ``tools/karpenter.sh``) runs against this module's
own local control plane (``tools/kube-local.sh``: etcd, kube-apiserver, kube-controller-manager, kube-scheduler, kwok),
with the instance types of stacks/gpus.py (``stacks.karpenter_sim.kwok_instance_types``) and the GPU pool's NodePool
pointed at a KWOKNodeClass (``stacks.cli.karpenter_sim``). The cluster starts with the system node group only (KWOK
nodes of the EKS plan's system group) and no GPU node. The pods are the Dynamo operator's pods of the Lightning H100
target's DGD (``stacks.cli.simulate.operator_pod_intents``): the GPU worker pods stay Pending until Karpenter has
launched nodes of the planned type and count, and the real scheduler binds every pod. Pausing the entry (its GPU
components at ``replicas: 0``, whose pods the operator deletes) leaves the nodes empty, and Karpenter's emptiness
consolidation removes them. More worker replicas add nodes. Node counts and timings are printed (``-s``).
"""
from __future__ import annotations

import copy
import re
import os
import shutil
import subprocess
import threading
import time

import pytest

from conftest import missing, need_tool

TARGET = "lightning-vllm-agg-h100-mtp"
RUN = "karpenter"
NODE_CLASS = "gpu"
# Fast settings for the test (the NodePool's planned values are checked separately): Karpenter waits consolidateAfter
# after a node became empty, then validates an emptiness command for 15 s (pkg/controllers/disruption/consolidation.go
# commandValidationDelay) inside a 10 s polling loop (controller.go pollingPeriod) before it deletes the node.
CONSOLIDATE_AFTER = "2s"  # the pool's dynamo:cluster consolidateAfter
MAX_NODES = 4
CONSOLIDATION_BOUND_S = 2 + 10 + 15 + 20  # consolidateAfter + polling + validation + drain/termination slack
LAUNCH_BOUND_S = 60


def _target_dgd():
    from stacks import catalog

    t = catalog.targets()[TARGET]
    return t, next(o for o in catalog.recipe_objects(t) if o["kind"] == "DynamoGraphDeployment")


def with_gpu_replicas(dgd: dict, replicas: int) -> dict:
    """The DGD with every GPU component at ``replicas`` (0 = the entry paused)."""
    from stacks.cluster import pod_requests

    out = copy.deepcopy(dgd)
    for c in out["spec"]["components"]:
        if pod_requests(c["podTemplate"]["spec"]).get("nvidia.com/gpu"):
            c["replicas"] = replicas
    return out


def karpenter_plan(dgd: dict | None = None):
    """The EKS plan of the Lightning H100 target with its GPU pool on Karpenter (``capacity: karpenter``,
    ``consolidateAfter`` short for the test), and that pool (stacks/karpenter.py: NodePool, offerings, nodes needed)."""
    from stacks.cluster import EksConfig, build_cluster_plan

    t, recipe = _target_dgd()
    cfg = EksConfig(capacity="karpenter", max_nodes=MAX_NODES, consolidate_after=CONSOLIDATE_AFTER)
    plan = build_cluster_plan("sim", cfg, t, dgd=dgd or recipe)
    assert plan.karpenter is not None and len(plan.karpenter.pools) == 1
    return plan, plan.karpenter.pools[0]


@pytest.fixture(scope="module")
def karpenter(tmp_path_factory):
    """Own control plane + node lifecycle controller + Karpenter with the KWOK provider; the system nodes created."""
    from stacks.cli.karpenter_sim import KarpenterSim, karpenter_paths
    from stacks.cli.simulate import KUBE_LOCAL, Simulator, eks_groups, node_objects

    need_tool("kubectl")
    if not shutil.which("go") and not os.environ.get("DYNAMO_KARPENTER_PREBUILT"):
        missing("go not on PATH", "install Go; tools/karpenter.sh builds Karpenter from the Go module proxy")
    t0 = time.monotonic()
    built: dict = {}  # Karpenter is built (or found in the cache) while the control plane starts
    th = threading.Thread(target=lambda: built.update(paths=karpenter_paths()))
    th.start()
    state = tmp_path_factory.mktemp("kube-karpenter")
    env = {**os.environ, "KUBE_LOCAL_DIR": str(state), "KUBE_LOCAL_SKIP_CRDS": "1"}
    subprocess.run([str(KUBE_LOCAL), "start"], check=True, env=env, timeout=900, stdout=subprocess.DEVNULL)
    th.join()
    if "paths" not in built:
        pytest.fail("tools/karpenter.sh build failed (see the thread's exception above)")
    binary, crds = built["paths"]
    t, dgd = _target_dgd()
    plan, pool = karpenter_plan(dgd)
    k = KarpenterSim(state / "kubeconfig", state / "karpenter", zones=tuple(sorted({o["zone"] for o in pool.offerings()})))
    sim = Simulator(state / "kubeconfig")
    try:
        k.install_crds(crds)
        k.start_node_lifecycle()
        ready_s = k.start(binary)
        sim.ensure_namespace()
        system = [g for g in eks_groups(plan) if g.name == "system"]
        sim.create_nodes(node_objects(system, RUN), RUN)
        print(f"\n[karpenter] control plane + Karpenter ready in {time.monotonic() - t0:.1f}s (Karpenter /readyz after {ready_s:.1f}s)")
        yield {"k": k, "sim": sim, "target": t, "dgd": dgd, "plan": plan, "pool": pool}
    finally:
        sim.close()
        k.stop()
        subprocess.run([str(KUBE_LOCAL), "stop"], env=env, timeout=120, stdout=subprocess.DEVNULL)


def _submit(sim, dgd: dict) -> list[str]:
    from stacks.cli.simulate import operator_pod_intents

    intents = operator_pod_intents(dgd)
    refused = sim.submit(intents, RUN)
    assert not refused, refused
    return [i.pod["metadata"]["name"] for i in intents]


def _delete_missing(sim, keep: set[str]) -> list[str]:
    """Delete the run's pods that the DGD no longer has (what the operator does when replicas drop)."""
    gone = []
    for p in sim.pods(RUN):
        name = p["metadata"]["name"]
        if name not in keep:
            sim.request("DELETE", f"/api/v1/namespaces/{sim.namespace}/pods/{name}?gracePeriodSeconds=0", ok_missing=True)
            gone.append(name)
    return gone


@pytest.mark.engine
def test_karpenter_launches_the_planned_gpu_nodes_and_removes_them_when_the_entry_is_paused(karpenter):
    from stacks.karpenter_sim import kwok_node_pool

    k, sim, plan, dgd = karpenter["k"], karpenter["sim"], karpenter["plan"], karpenter["dgd"]
    planned = karpenter["pool"].nodes_needed
    pool = kwok_node_pool(karpenter["pool"].nodepool, NODE_CLASS)
    assert pool["spec"]["disruption"]["consolidateAfter"] == CONSOLIDATE_AFTER
    name = pool["metadata"]["name"]
    timeline = []
    t0 = time.monotonic()

    def mark(what: str, nodes: list[dict]):
        timeline.append((round(time.monotonic() - t0, 1), what, len(nodes)))
        print(f"[karpenter] t={timeline[-1][0]:5.1f}s {what}: {len(nodes)} node(s) in NodePool {name}")

    k.apply_node_class(NODE_CLASS)
    k.apply_node_pool(pool)
    mark("NodePool applied", k.nodes(name))
    assert k.nodes(name) == []

    names = _submit(sim, dgd)
    pods = lambda: [p for p in sim.pods(RUN) if p["metadata"]["name"] in set(names)]  # noqa: E731
    nodes = k.wait_nodes(name, planned, LAUNCH_BOUND_S, pods=pods)
    mark("serving pods bound", nodes)
    assert {n["metadata"]["labels"]["node.kubernetes.io/instance-type"] for n in nodes} == {karpenter["pool"].instance_type}
    assert all(n["metadata"]["labels"]["karpenter.sh/capacity-type"] == "on-demand" for n in nodes)
    # Every pod bound by the real scheduler: GPU pods on the Karpenter nodes, the frontend on a system node.
    placed = {p["metadata"]["name"]: p["spec"]["nodeName"] for p in pods()}
    gpu_nodes = {n["metadata"]["name"] for n in nodes}
    assert len(placed) == len(names) and all(placed.values())
    gpu_pods = [p for p in pods() if any("nvidia.com/gpu" in (c.get("resources") or {}).get("requests", {}) for c in p["spec"]["containers"])]
    assert gpu_pods and all(p["spec"]["nodeName"] in gpu_nodes for p in gpu_pods)
    # The nodes carry what the instance-types file and the NodePool give them.
    n0 = nodes[0]
    assert n0["status"]["allocatable"]["nvidia.com/gpu"] == str(plan.shape.gpus_per_node)
    assert n0["metadata"]["labels"]["nvidia.com/gpu.product"] == plan.shape.product

    # Paused: the GPU components at replicas 0; the operator deletes their pods.
    paused = _submit_keep(sim, with_gpu_replicas(dgd, 0))
    t_pause = time.monotonic()
    nodes = k.wait_nodes(name, 0, CONSOLIDATION_BOUND_S)
    mark("entry paused, nodes consolidated", nodes)
    took = time.monotonic() - t_pause
    assert took < CONSOLIDATION_BOUND_S
    assert k.node_claims(name) == []
    assert all(p["spec"].get("nodeName") for p in sim.pods(RUN)), "the frontend stays bound on a system node"
    assert len(sim.pods(RUN)) == len(paused)

    # Resumed with more worker replicas than one node holds: the plan's count for that DGD, launched on demand.
    more = with_gpu_replicas(dgd, plan.shape.gpus_per_node + 1)
    planned_more = karpenter_plan(more)[1].nodes_needed
    assert planned_more > planned
    names = _submit_keep(sim, more)
    nodes = k.wait_nodes(name, planned_more, LAUNCH_BOUND_S, pods=lambda: [p for p in sim.pods(RUN) if p["metadata"]["name"] in set(names)])
    mark(f"resumed at {plan.shape.gpus_per_node + 1} worker replicas", nodes)

    _submit_keep(sim, with_gpu_replicas(dgd, 0))
    nodes = k.wait_nodes(name, 0, CONSOLIDATION_BOUND_S)
    mark("paused again", nodes)
    counts = [c for _, _, c in timeline]
    print("[karpenter] node counts:", " -> ".join(map(str, counts)), "| timeline:", timeline)
    assert counts == [0, planned, 0, planned_more, 0]


def _submit_keep(sim, dgd: dict) -> list[str]:
    """Make the run's pods those of ``dgd``: create the missing ones, delete the ones it no longer has."""
    from stacks.cli.simulate import operator_pod_intents

    intents = operator_pod_intents(dgd)
    want = {i.pod["metadata"]["name"] for i in intents}
    _delete_missing(sim, want)
    have = {p["metadata"]["name"] for p in sim.pods(RUN)}
    refused = sim.submit([i for i in intents if i.pod["metadata"]["name"] not in have], RUN)
    assert not refused, refused
    return sorted(want)


# ---------------------------------------------------------------------------------------------- without a cluster
def test_instance_types_file_carries_the_gpu_catalog_in_the_kwok_provider_format():
    from stacks.gpus import HOSTS, INSTANCES
    from stacks.karpenter_sim import kwok_instance_types

    types = {t["name"]: t for t in kwok_instance_types(["us-east-1a", "us-east-1b"], prices={"p5.48xlarge": 55.04})}
    assert set(types) == set(INSTANCES)
    p5 = types["p5.48xlarge"]
    assert p5["resources"] == {"cpu": "192", "memory": "2048Gi", "pods": "110", "nvidia.com/gpu": "8",
                               "ephemeral-storage": f"{8 * 3840 * 10**9 // 2**30}Gi", "vpc.amazonaws.com/efa": "32"}
    assert p5["architecture"] == "amd64" and p5["operatingSystems"] == ["linux"]
    assert [(o["Price"], [r["values"] for r in o["Requirements"]]) for o in p5["offerings"]] == [
        (55.04, [["on-demand"], ["us-east-1a"]]), (55.04, [["on-demand"], ["us-east-1b"]])]
    gb200 = types["p6e-gb200.36xlarge"]
    assert gb200["architecture"] == "arm64" and gb200["resources"]["vpc.amazonaws.com/efa"] == "8"
    assert "ephemeral-storage" not in gb200["resources"]  # its instance store is not counted in stacks/gpus.py HOSTS
    # Every figure comes from stacks/gpus.py: a change there changes the file.
    for name, t in types.items():
        assert t["resources"]["nvidia.com/gpu"] == str(INSTANCES[name].gpus_per_node)
        assert t["resources"]["memory"] == f"{HOSTS[name].memory_gib}Gi"


@pytest.mark.parametrize("kwargs, message", [
    ({"zones": []}, "zones"),
    ({"zones": ["us-east-1a"], "capacity_types": ["preemptible"]}, "capacity_types"),
    ({"zones": ["us-east-1a"], "instance_types": ["m7i.2xlarge"]}, "not in the GPU catalog"),
])
def test_instance_types_file_refuses_bad_input(kwargs, message):
    from stacks.karpenter_sim import kwok_instance_types

    with pytest.raises(ValueError, match=message):
        kwok_instance_types(**kwargs)


def test_kwok_node_pool_swaps_only_the_node_class():
    from stacks.karpenter_sim import kwok_node_pool

    planned = karpenter_plan()[1].nodepool
    pool = kwok_node_pool(planned, "gpu", consolidate_after="2s")
    assert pool["spec"]["template"]["spec"]["nodeClassRef"] == {"group": "karpenter.kwok.sh", "kind": "KWOKNodeClass", "name": "gpu"}
    assert pool["spec"]["disruption"]["consolidateAfter"] == "2s"
    for part in ("limits", "template"):
        if part == "template":
            a = {k: v for k, v in pool["spec"]["template"]["spec"].items() if k != "nodeClassRef"}
            b = {k: v for k, v in planned["spec"]["template"]["spec"].items() if k != "nodeClassRef"}
            assert a == b
        else:
            assert pool["spec"][part] == planned["spec"][part]
    with pytest.raises(ValueError, match="NodePool"):
        kwok_node_pool({"kind": "EC2NodeClass"}, "gpu")


def test_karpenter_pin_agrees_with_its_go_module():
    from pathlib import Path

    import yaml

    root = Path(__file__).resolve().parent.parent
    pins = yaml.safe_load((root / "stacks" / "versions.yaml").read_text())
    gomod = (root / "tools" / "karpenter" / "go.mod").read_text()
    assert re.search(rf"^\s*(require\s+)?sigs\.k8s\.io/karpenter {re.escape(pins['toolchain']['karpenter'])}( //.*)?$", gomod, re.M)
    core = (pins.get("charts", {}).get("karpenter") or {}).get("core")
    if core is not None:  # the EKS chart's core is the one the simulated cluster runs
        assert core == pins["toolchain"]["karpenter"]
