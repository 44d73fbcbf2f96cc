"""Selection through the real API server: for every catalog target, the pods and Services the Dynamo operator
makes of its DGD (stacks/serving/operator.py) are created on the simulation's kube-apiserver (``Simulator``,
tools/kube-local.sh), and the project's PodMonitors (``stacks.observe.observability.dynamo_pod_monitors``) and the
operator's Services LIST pods through the API server's own label selectors (``?labelSelector=``).

Each target gets its own namespace (``dyn000``...: as long as the default ``dynamo``, so label values are as
long as on a default stack; several Motif-3 targets share one DGD name). Nothing is scheduled (no nodes):
a LIST only needs the objects. The control plane is this module's own, etcd + kube-apiserver only
(no controller manager, scheduler, kwok or CRDs), so it starts in seconds and never sees another test's nodes.
"""

from __future__ import annotations

import shutil
import time
from collections import Counter, defaultdict
from urllib.parse import quote

import pytest

from local_cluster import control_plane
from stacks import catalog
from stacks.config.keys import parse
from stacks.observe.observability import dynamo_pod_monitors
from stacks.serving.operator import label_selector_string, operator_pods, operator_services
from stacks.serving import build_plan

SERVING_TYPES = ("frontend", "worker", "prefill", "decode")
RUN = "selection.dynamo.nvidia.com/target"

pytestmark = pytest.mark.engine


@pytest.fixture(scope="module")
def apiserver(tmp_path_factory):
    if not shutil.which("kubectl"):
        pytest.skip("kubectl not on PATH: run `make test` (it builds the pinned toolchain) or tools/toolchain.sh")
    from stacks.cli.simulate import Simulator

    state = tmp_path_factory.mktemp("kube-selection")
    t0 = time.perf_counter()
    with control_plane(state, apiserver_only=True, crds=False, timeout=300):
        print(f"\ncontrol plane (etcd + kube-apiserver) started in {time.perf_counter() - t0:.1f} s")
        sim = Simulator(state / "kubeconfig")
        try:
            yield sim
        finally:
            sim.close()


def _pod(op, namespace: str, tid: str) -> dict:
    """The operator's pod as the API server stores it: name, labels, the main container's named ports."""
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": op.name, "namespace": namespace, "labels": {**op.labels, RUN: tid}},
        "spec": {
            "automountServiceAccountToken": False,
            "restartPolicy": "Always",
            "containers": [
                {
                    "name": "main",
                    "image": "registry.invalid/none:0",
                    "ports": [{"name": n, "containerPort": p, "protocol": "TCP"} for n, p in op.ports.items()],
                }
            ],
        },
    }


def _list(sim, namespace: str, selector: str) -> list[dict]:
    return sim.request("GET", f"/api/v1/namespaces/{namespace}/pods?labelSelector={quote(selector)}").get("items", [])


def _monitor_namespaces(monitor: dict, created: list[str]) -> list[str]:
    ns_sel = monitor["spec"].get("namespaceSelector") or {}
    if ns_sel.get("any"):
        return created
    return ns_sel.get("matchNames") or [monitor["metadata"]["namespace"]]


def _pod_ports(pod: dict) -> set:
    out = set()
    for c in pod["spec"]["containers"]:
        for p in c.get("ports") or []:
            out |= {p.get("name"), p["containerPort"]}
    return out


def test_pod_monitors_and_services_select_every_serving_pod_of_every_target(apiserver):
    sim = apiserver
    targets = sorted(catalog.targets())
    t0 = time.perf_counter()
    plans = {}  # tid -> (namespace, dgd, pods, services)
    for i, tid in enumerate(targets):
        ns = f"dyn{i:03d}"
        dgd = build_plan(parse({"target": tid, "namespace": ns})).dgd
        plans[tid] = (ns, dgd, operator_pods(dgd), operator_services(dgd))

    # Create: namespace, its default ServiceAccount (no controller manager here), pods, Services.
    for tid, (ns, dgd, pods, services) in plans.items():
        sim.request("POST", "/api/v1/namespaces", {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": ns}})
        sim.request(
            "POST",
            f"/api/v1/namespaces/{ns}/serviceaccounts",
            {"apiVersion": "v1", "kind": "ServiceAccount", "metadata": {"name": "default"}},
        )
        for op in pods:
            sim.request("POST", f"/api/v1/namespaces/{ns}/pods", _pod(op, ns, tid))
        for svc in services:
            sim.request("POST", f"/api/v1/namespaces/{ns}/services", svc)
    n_pods = sum(len(p[2]) for p in plans.values())
    n_svcs = sum(len(p[3]) for p in plans.values())
    t_create = time.perf_counter() - t0

    # Select through the API server.
    created = [p[0] for p in plans.values()]
    total, selected = Counter(), Counter()
    missed, wrong_service, monitors_seen = [], [], 0
    for tid, (ns, dgd, pods, services) in plans.items():
        kinds = {op.name: op.component_type for op in pods}
        total.update(kinds.values())
        covered = set()
        for m in dynamo_pod_monitors(ns, dgd["metadata"]["name"], {}):
            monitors_seen += 1
            ports = {e.get("port") for e in m["spec"]["podMetricsEndpoints"]} | {
                e.get("targetPort") for e in m["spec"]["podMetricsEndpoints"] if e.get("targetPort") is not None
            }
            sel = label_selector_string(m["spec"]["selector"])
            for mns in _monitor_namespaces(m, created):
                for pod in _list(sim, mns, sel):
                    if pod["metadata"]["labels"].get(RUN) == tid and _pod_ports(pod) & ports:
                        covered.add(pod["metadata"]["name"])
        for name, ctype in kinds.items():
            if name in covered:
                selected[ctype] += 1
            elif ctype in SERVING_TYPES:
                missed.append(f"{tid}: {ctype} pod {name}")
        by_component = defaultdict(set)
        for op in pods:
            by_component[op.component].add(op.name)
        for svc in services:
            sel = svc["spec"]["selector"]
            got = {p["metadata"]["name"] for p in _list(sim, ns, ",".join(f"{k}={v}" for k, v in sorted(sel.items())))}
            want = by_component[sel["nvidia.com/dynamo-component"]]
            if got != want:
                wrong_service.append(f"{tid}: Service {svc['metadata']['name']} selects {sorted(got)}, want {sorted(want)}")
            if sel["nvidia.com/dynamo-component-type"] == "frontend":
                assert want == {op.name for op in pods if op.component_type == "frontend"}, tid
    t_total = time.perf_counter() - t0
    print(
        f"{len(plans)} targets, {n_pods} pods, {n_svcs} Services, {monitors_seen} PodMonitors: created in {t_create:.1f} s, "
        f"selected in {t_total - t_create:.1f} s"
    )
    print("selected / total: " + ", ".join(f"{t} {selected[t]}/{total[t]}" for t in SERVING_TYPES))
    assert all(total[t] for t in SERVING_TYPES), total  # the catalog has pods of every serving type
    assert missed == [], missed[:20]
    assert wrong_service == [], wrong_service[:20]
    assert {t: selected[t] for t in SERVING_TYPES} == {t: total[t] for t in SERVING_TYPES}


def test_a_worker_only_selector_misses_the_disaggregated_pods(apiserver):
    """The API server agrees that a ``component-type: worker`` selector (the platform's older PodMonitor) selects
    none of a v1beta1 disaggregated target's prefill and decode pods: the selection test above can fail."""
    sim = apiserver
    tid = "lightning-vllm-disagg-h100-dspark"
    ns = "dyn-worker-only"
    dgd = build_plan(parse({"target": tid, "namespace": ns})).dgd
    sim.request("POST", "/api/v1/namespaces", {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": ns}})
    sim.request(
        "POST",
        f"/api/v1/namespaces/{ns}/serviceaccounts",
        {"apiVersion": "v1", "kind": "ServiceAccount", "metadata": {"name": "default"}},
    )
    pods = operator_pods(dgd)
    for op in pods:
        sim.request("POST", f"/api/v1/namespaces/{ns}/pods", _pod(op, ns, tid))
    old = label_selector_string(
        {"matchLabels": {"nvidia.com/metrics-enabled": "true", "nvidia.com/dynamo-component-type": "worker"}}
    )
    assert _list(sim, ns, old) == []
    new = label_selector_string(
        {
            "matchExpressions": [
                {"key": "nvidia.com/dynamo-component-type", "operator": "In", "values": ["worker", "prefill", "decode"]}
            ]
        }
    )
    assert sorted(p["metadata"]["name"] for p in _list(sim, ns, new)) == sorted(
        op.name for op in pods if op.component_type != "frontend"
    )
