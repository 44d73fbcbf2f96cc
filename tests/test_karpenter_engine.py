"""The real Karpenter launches and removes the GPU nodes of a serving stack on the simulated cluster.

Karpenter v1.13.0 (sigs.k8s.io/karpenter, its KWOK cloud provider: ``tools/karpenter.sh``) runs against this module's
own local control plane (``tools/kube-local.sh``: etcd, kube-apiserver, kube-controller-manager, kube-scheduler, kwok),
with the instance types of stacks/registry/gpus.py priced from stacks/registry/prices.yaml (``stacks.cluster.karpenter_sim.kwok_instance_types``)
and the GPU pool's NodePool pointed at a KWOKNodeClass (``stacks.cli.karpenter_sim``).

The stack is the committed example ``h100-karpenter`` (Lightning H100 disaggregated, its GPU pool on Karpenter, decode
workers autoscaled 1-8), built by the same ``build_program`` as ``pulumi up``, with the pool's ``consolidateAfter``
set short for the test. Its NodePool is the one stacks/cluster/karpenter.py plans. The cluster starts with the system node
group only (KWOK nodes of the EKS plan's system group) and no GPU node. The pods are the Dynamo operator's pods of the
stack's DGD (``stacks.cli.simulate.operator_pod_intents``):

- at the autoscaler's minimum, the workers stay Pending until Karpenter launches the nodes ``stacks cost`` counts for
  the minimum (instance type and capacity type as planned), and the real scheduler binds every pod;
- at its maximum (the replica count the DGD scaling adapter would be driven to), Karpenter adds the nodes ``stacks
  cost`` counts for the maximum;
- paused (the program's own pause: ``paused: true``, every worker component at 0 replicas, whose pods the operator
  deletes), Karpenter's emptiness consolidation removes every node within consolidateAfter plus its disruption
  polling and validation (stacks/registry/durations.yaml ``karpenter``);
- resumed, the nodes of the minimum come back.

Node counts and timings are printed (``-s``).
"""
from __future__ import annotations

import copy
import re
import shutil
import threading
import time

import pytest

from conftest import missing, need_tool
from local_cluster import control_plane

STACK = "h100-karpenter"
TARGET = "lightning-vllm-agg-h100-mtp"  # the unit tests' target (no stack needed)
RUN = "karpenter"
NODE_CLASS = "gpu"
# The pool's dynamo:cluster consolidateAfter for the test (the stack's own is 10m).
CONSOLIDATE_AFTER = "2s"
MAX_NODES = 4
LAUNCH_BOUND_S = 60
SLACK_S = 30  # node drain and termination, and this 2-core machine under `make test`'s parallel groups


def _target_dgd():
    from stacks import catalog

    t = catalog.targets()[TARGET]
    return t, next(o for o in catalog.recipe_objects(t) if o["kind"] == "DynamoGraphDeployment")


def karpenter_plan(dgd: dict | None = None):
    """The EKS plan of the Lightning H100 agg target with its GPU pool on Karpenter (``capacity: karpenter``), and
    that pool (stacks/cluster/karpenter.py: NodePool, offerings, nodes needed)."""
    from stacks.cluster import EksConfig, build_cluster_plan

    t, recipe = _target_dgd()
    cfg = EksConfig(capacity="karpenter", max_nodes=MAX_NODES, consolidate_after=CONSOLIDATE_AFTER)
    plan = build_cluster_plan("sim", cfg, t, dgd=dgd or recipe)
    assert plan.karpenter is not None and len(plan.karpenter.pools) == 1
    return plan, plan.karpenter.pools[0]


def stack_programs(consolidate_after: str = CONSOLIDATE_AFTER):
    """The example stack's program and its paused program (as `stacks cost` builds them), the pool's consolidateAfter
    set to ``consolidate_after``."""
    from stacks.cli.cost import paused_raw
    from stacks.program import build_program
    from stacks.program.render import split_secrets, stack_aws_region, stack_raw_config

    plain, secret = split_secrets(stack_raw_config(STACK))
    plain = copy.deepcopy(plain)
    pools = [p for p in plain["cluster"]["gpuPools"] if p.get("capacity") == "karpenter"]
    assert len(pools) == 1, plain["cluster"]
    pools[0]["consolidateAfter"] = consolidate_after
    region = stack_aws_region(STACK)
    return (build_program(plain, STACK, secret, aws_region=region),
            build_program(paused_raw(plain), STACK, secret, aws_region=region))


@pytest.fixture(scope="module")
def karpenter(tmp_path_factory):
    """Own control plane + node lifecycle controller + Karpenter with the KWOK provider; the system nodes created."""
    from stacks.cli.karpenter_sim import KarpenterSim, karpenter_paths, region_prices
    from stacks.cli.simulate import Simulator, eks_groups, node_objects

    need_tool("kubectl")
    if not shutil.which("go"):
        missing("go not on PATH", "install Go; tools/karpenter.sh builds Karpenter from the Go module proxy")
    t0 = time.monotonic()
    built: dict = {}  # Karpenter is built (or found in the cache) while the control plane starts
    th = threading.Thread(target=lambda: built.update(paths=karpenter_paths()))
    th.start()
    state = tmp_path_factory.mktemp("kube-karpenter")
    with control_plane(state, crds=False):
        th.join()
        if "paths" not in built:
            pytest.fail("tools/karpenter.sh build failed (see the thread's exception above)")
        binary, crds = built["paths"]
        program, paused = stack_programs()
        cplan = program.cluster_plan
        pool = cplan.karpenter.pools[0]
        k = KarpenterSim(state / "kubeconfig", state / "karpenter", zones=tuple(sorted({o["zone"] for o in pool.offerings()})),
                         prices=region_prices(cplan.region))
        sim = Simulator(state / "kubeconfig")
        try:
            k.install_crds(crds)
            k.start_node_lifecycle()
            ready_s = k.start(binary)
            sim.ensure_namespace()
            system = [g for g in eks_groups(cplan) if g.name == "system"]
            sim.create_nodes(node_objects(system, RUN), RUN)
            print(f"\n[karpenter] control plane + Karpenter ready in {time.monotonic() - t0:.1f}s (Karpenter /readyz after {ready_s:.1f}s)")
            yield {"k": k, "sim": sim, "program": program, "paused": paused, "pool": pool, "logs": state / "karpenter"}
        finally:
            sim.close()
            k.stop()


def set_pods(sim, dgd: dict) -> list[str]:
    """Make the run's pods those the operator runs for ``dgd``: create the missing ones, delete (at once) the ones it
    no longer has, as the operator does when a component's replicas change."""
    from stacks.cli.simulate import operator_pod_intents

    intents = operator_pod_intents(dgd)
    want = {i.pod["metadata"]["name"] for i in intents}
    have = set()
    for p in sim.pods(RUN):
        name = p["metadata"]["name"]
        if name in want:
            have.add(name)
        else:
            sim.request("DELETE", f"/api/v1/namespaces/{sim.namespace}/pods/{name}?gracePeriodSeconds=0", ok_missing=True)
    refused = sim.submit([i for i in intents if i.pod["metadata"]["name"] not in have], RUN)
    assert not refused, refused
    return sorted(want)


def _gpu_pods(pods: list[dict]) -> list[dict]:
    return [p for p in pods if any("nvidia.com/gpu" in (c.get("resources") or {}).get("requests", {}) for c in p["spec"]["containers"])]


@pytest.mark.engine
def test_karpenter_follows_the_stack_from_zero_to_its_planned_nodes_and_back_when_paused(karpenter):
    from stacks.serving.autoscaling import at_max, at_min_dgd
    from stacks.cli.cost import load_prices, pool_costs
    from stacks.cli.timeline import duration_seconds, pause_seconds
    from stacks.registry.gpus import INSTANCES
    from stacks.cluster.karpenter_sim import kwok_node_pool

    k, sim, program, pool = karpenter["k"], karpenter["sim"], karpenter["program"], karpenter["pool"]
    entry = program.entries[0]
    # The node counts `python -m stacks cost` prices: at minReplicas, at maxReplicas, paused.
    cost = next(c for c in pool_costs(program, karpenter["paused"], load_prices()) if c.pool == pool.name)
    assert (cost.nodes_min, cost.nodes_paused) == (pool.nodes_needed, 0) and cost.nodes_max > cost.nodes_min
    node_pool = kwok_node_pool(pool.nodepool, NODE_CLASS)
    assert node_pool["spec"]["disruption"]["consolidateAfter"] == CONSOLIDATE_AFTER
    name = node_pool["metadata"]["name"]
    pause_bound = pause_seconds(duration_seconds(CONSOLIDATE_AFTER)) + SLACK_S
    timeline: list[tuple[float, str, int]] = []
    t0 = time.monotonic()

    def mark(what: str, nodes: list[dict]):
        timeline.append((round(time.monotonic() - t0, 1), what, len(nodes)))
        print(f"[karpenter] t={timeline[-1][0]:5.1f}s {what}: {len(nodes)} node(s) in NodePool {name}")

    def bound_on_karpenter(names: list[str], nodes: list[dict]):
        pods = [p for p in sim.pods(RUN) if p["metadata"]["name"] in set(names)]
        assert len(pods) == len(names) and all(p["spec"].get("nodeName") for p in pods)
        gpu = _gpu_pods(pods)
        assert gpu and {p["spec"]["nodeName"] for p in gpu} <= {n["metadata"]["name"] for n in nodes}
        assert all(n["metadata"]["labels"]["node.kubernetes.io/instance-type"] == pool.instance_type for n in nodes)
        assert all(n["metadata"]["labels"]["karpenter.sh/capacity-type"] == pool.capacity_type for n in nodes)

    k.apply_node_class(NODE_CLASS)
    k.apply_node_pool(node_pool)
    mark("NodePool applied, no GPU node", k.nodes(name))
    assert k.nodes(name) == [] and k.node_claims(name) == []

    # 1. The stack applied, workers at minReplicas.
    names = set_pods(sim, at_min_dgd(entry.plan))
    nodes = k.wait_nodes(name, cost.nodes_min, LAUNCH_BOUND_S, pods=lambda: [p for p in sim.pods(RUN) if p["metadata"]["name"] in set(names)])
    mark("stack applied at minReplicas, every pod bound", nodes)
    bound_on_karpenter(names, nodes)
    n0 = nodes[0]
    assert n0["status"]["allocatable"]["nvidia.com/gpu"] == str(pool.gpus_per_node)
    assert n0["metadata"]["labels"]["nvidia.com/gpu.product"] == INSTANCES[pool.instance_type].product  # the pool's labels
    # The offering's price (stacks/registry/prices.yaml via the instance-types file) is on the node (the KWOK provider's
    # eks-node-viewer/instance-price label).
    assert float(n0["metadata"]["labels"]["eks-node-viewer/instance-price"]) == pytest.approx(cost.price["usd_per_hour"])

    # 2. Scaled out to maxReplicas (the replicas the scaling adapter is driven to): the nodes `stacks cost` counts.
    names = set_pods(sim, at_max(entry.plan.dgd, entry.plan.notes.get("autoscaling") or {}))
    nodes = k.wait_nodes(name, cost.nodes_max, LAUNCH_BOUND_S, pods=lambda: [p for p in sim.pods(RUN) if p["metadata"]["name"] in set(names)])
    mark("scaled to maxReplicas, every pod bound", nodes)
    bound_on_karpenter(names, nodes)

    # 3. Paused (the program's paused DGD): the GPU pods go, the nodes are consolidated away.
    names = set_pods(sim, karpenter["paused"].entries[0].plan.dgd)
    assert not _gpu_pods(sim.pods(RUN))
    t_pause = time.monotonic()
    nodes = k.wait_nodes(name, cost.nodes_paused, pause_bound)
    took = time.monotonic() - t_pause
    mark(f"paused, nodes consolidated ({took:.1f}s after the last GPU pod; bound {pause_bound:.0f}s)", nodes)
    assert k.node_claims(name) == []
    assert len(sim.pods(RUN)) == len(names) and all(p["spec"].get("nodeName") for p in sim.pods(RUN))  # the frontend stays

    # 4. Resumed at minReplicas: the nodes come back.
    names = set_pods(sim, at_min_dgd(entry.plan))
    nodes = k.wait_nodes(name, cost.nodes_min, LAUNCH_BOUND_S, pods=lambda: [p for p in sim.pods(RUN) if p["metadata"]["name"] in set(names)])
    mark("resumed at minReplicas", nodes)

    counts = [c for _, _, c in timeline]
    print("[karpenter] node counts:", " -> ".join(map(str, counts)), "| timeline:", timeline)
    assert counts == [0, cost.nodes_min, cost.nodes_max, 0, cost.nodes_min]
    # The launches created exactly these NodeClaims: none failed or left over.
    assert len(k.node_claims(name)) == cost.nodes_min


# ---------------------------------------------------------------------------------------------- without a cluster
def test_instance_types_file_carries_the_gpu_catalog_in_the_kwok_provider_format():
    from stacks.registry.gpus import HOSTS, INSTANCES
    from stacks.cluster.karpenter_sim import kwok_instance_types

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
    assert "ephemeral-storage" not in gb200["resources"]  # its instance store is not counted in stacks/registry/gpus.py HOSTS
    # Every figure comes from stacks/registry/gpus.py: a change there changes the file.
    for name, t in types.items():
        assert t["resources"]["nvidia.com/gpu"] == str(INSTANCES[name].gpus_per_node)
        assert t["resources"]["memory"] == f"{HOSTS[name].memory_gib}Gi"


@pytest.mark.parametrize("kwargs, message", [
    ({"zones": []}, "zones"),
    ({"zones": ["us-east-1a"], "capacity_types": ["preemptible"]}, "capacity_types"),
    ({"zones": ["us-east-1a"], "instance_types": ["m7i.2xlarge"]}, "not in the GPU catalog"),
])
def test_instance_types_file_refuses_bad_input(kwargs, message):
    from stacks.cluster.karpenter_sim import kwok_instance_types

    with pytest.raises(ValueError, match=message):
        kwok_instance_types(**kwargs)


def test_kwok_node_pool_swaps_only_the_node_class():
    from stacks.cluster.karpenter_sim import kwok_node_pool

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
    pins = yaml.safe_load((root / "stacks" / "registry" / "versions.yaml").read_text())
    gomod = (root / "tools" / "karpenter" / "go.mod").read_text()
    assert re.search(rf"^\s*(require\s+)?sigs\.k8s\.io/karpenter {re.escape(pins['toolchain']['karpenter'])}( //.*)?$", gomod, re.M)
    core = (pins.get("charts", {}).get("karpenter") or {}).get("core")
    if core is not None:  # the EKS chart's core is the one the simulated cluster runs
        assert core == pins["toolchain"]["karpenter"]
