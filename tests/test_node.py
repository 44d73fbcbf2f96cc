"""Every pod the program deploys starts on a real node: the kubelet, containerd, runc and the CNI plugins of
tools/kube-node.sh run the rendered pods, and the real Dynamo frontend answers through the target's Service.

One target of each kind is rendered as ``render --target`` prints it (in its own namespace) and applied; its download
Job runs its own ``snapshot_download`` against the local hub (tools/node/hub.py) into the claim the local
provisioner binds (tools/node/controller.py); the stand-in operator runs the DGD's pods from their podTemplates; the
test waits for the Job to complete and for every pod to be Ready, then sends a chat completion to the frontend
Service's cluster IP (kube-proxy's nftables rules). A pod that does not start fails the test with its events and its
containers' last log lines (tests/local_node.py ``diagnose``).

What stands in is listed in tests/local_node.py's docstring; everything else runs as rendered, the volumes and
mounts (read-only claims, subPaths), security contexts, probes, env and command lines included.
"""

from __future__ import annotations

import copy
import json
import os
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))

from local_cluster import control_plane  # noqa: E402
from local_node import (  # noqa: E402
    NodeError,
    apply,
    apply_in_order,
    chat,
    dgd_ready,
    diagnose,
    hub_requests,
    kubectl,
    label_node_for,
    node_log,
    service_url,
    wait_for,
)
from stacks.serving import render_config  # noqa: E402
from stacks.serving.operator import FRONTEND, component_type, service_name  # noqa: E402

pytestmark = [pytest.mark.engine]

# One target of each kind: vLLM aggregated and disaggregated and TensorRT-LLM aggregated (Lightning, H100), Ultra's
# KV-router aggregated target on B200, whose claim is read-only upstream (the compile cache must still be writable:
# tools/node/worker.py writes it as the engine does), and Ultra's disaggregated H200 target (its start script counts
# the GPUs with nvidia-smi and the InfiniBand devices: tools/kube/node/deviceplugin). Motif-3 is not here: its
# frontend runs vLLM's chat processor with the tool-call and reasoning parsers named "motif", which vLLM's release
# does not have (they come with Motif's image, pinned by a digest that cannot be reproduced here).
TARGETS = (
    "lightning-vllm-agg-h100-dspark",
    "lightning-vllm-disagg-h100-dspark",
    "lightning-trtllm-agg-h100-mtp",
    "ultra-vllm-agg-b200-agentic-256K-kv-router",
    "ultra-vllm-disagg-h200-agentic-256K",
)
# A Job's pod created while its claim is still unbound is unschedulable until the scheduler retries it, at the latest
# when it has been unschedulable for 5 minutes (kube-scheduler's podMaxInUnschedulablePodsDuration): the Job's
# timeout covers that retry.
JOB_TIMEOUT, READY_TIMEOUT = 420, 420


def _need_root():
    if sys.platform != "linux" or os.geteuid() != 0:
        pytest.skip("the real node needs Linux and root (README: the local node)")


@pytest.fixture(scope="module")
def node(tmp_path_factory):
    _need_root()
    state = tmp_path_factory.mktemp("node-cp")
    with control_plane(state, node=True, crds=True) as env:
        yield env
    left = _left_behind(state)
    assert not left, f"the node's stop left these behind: {left}"


def _left_behind(state: Path) -> list[str]:
    """What a stopped node must not leave on the host (tools/kube-node.sh stop): a process of its state dir, a pod
    network namespace, the bridge, a KUBE-* chain in the legacy iptables tables (kube-router's, the kubelet's), an
    ipset of kube-router's."""
    import subprocess

    def run(*cmd: str) -> str:
        return subprocess.run(cmd, capture_output=True, text=True).stdout

    bin_dir = state / "node" / "bin"
    out = [f"process {line}" for line in run("pgrep", "-af", str(state)).splitlines() if "pytest" not in line]
    out += [f"netns {ln.split()[0]}" for ln in run("ip", "netns", "list").splitlines() if ln.startswith("cni-")]
    if run("ip", "-o", "link", "show", "dynlocal0").strip():
        out.append("bridge dynlocal0")
    if (bin_dir / "iptables-save").exists():
        for table in ("filter", "nat", "mangle"):
            out += [
                f"{table} chain {ln[1:].split()[0]}"
                for ln in run(str(bin_dir / "iptables-save"), "-t", table).splitlines()
                if ln.startswith(":KUBE-")
            ]
        out += [f"ipset {n}" for n in run(str(bin_dir / "ipset"), "list", "-n").split() if n.startswith(("KUBE-", "kube-router"))]
    return out


def _objects(tid: str, namespace: str) -> list[dict]:
    return render_config({"target": tid, "namespace": namespace})


def _dgd(objs):
    return next(o for o in objs if o["kind"] == "DynamoGraphDeployment")


def _served_model(dgd: dict) -> str:
    from rig import served_model

    return served_model(dgd)


def _scheduled(env, namespace: str, dgd: dict):
    from stacks.serving.operator import operator_pods

    want = {p.name for p in operator_pods({**dgd, "metadata": {**dgd["metadata"], "namespace": namespace}})}

    def probe():
        pods = json.loads(kubectl(env, "-n", namespace, "get", "pods", "-o", "json"))["items"]
        bound = {p["metadata"]["name"] for p in pods if p["spec"].get("nodeName")}
        return want <= bound, f"bound {sorted(bound & want)} of {sorted(want)}"

    return probe


@pytest.fixture(scope="module")
def served(node):
    """Every target of TARGETS applied, one after the other (the node carries one GPU product label at a time; a bound
    pod keeps running when the label changes: requiredDuringScheduling*IgnoredDuringExecution*)."""
    env = node
    rendered = {tid: _objects(tid, f"node-{i}") for i, tid in enumerate(TARGETS)}
    results: dict[str, object] = {}
    for i, tid in enumerate(TARGETS):
        ns, objs = f"node-{i}", rendered[tid]
        try:
            label_node_for(env, objs)
            apply_in_order(env, objs, JOB_TIMEOUT)
            wait_for(f"{tid}: the DGD's pods bound", _scheduled(env, ns, _dgd(objs)), 120, env, ns)
        except NodeError as e:
            results[tid] = e
    for i, tid in enumerate(TARGETS):
        ns, objs = f"node-{i}", rendered[tid]
        if tid in results:
            continue
        dgd = _dgd(objs)
        try:
            wait_for(f"{tid}: DGD Ready", dgd_ready(env, ns, dgd["metadata"]["name"]), READY_TIMEOUT, env, ns)
            frontend = next(c for c in dgd["spec"]["components"] if component_type(c) == FRONTEND)
            url = service_url(env, ns, service_name({**dgd, "metadata": {**dgd["metadata"], "namespace": ns}}, frontend))
            answer = chat(url, _served_model(dgd))
            results[tid] = {"url": url, "answer": answer, "objects": objs}
        except (NodeError, OSError) as e:
            results[tid] = NodeError(f"{tid}: {e}\n{diagnose(env, ns)}")
    results["_hub_requests"] = hub_requests(env)
    return results


@pytest.mark.parametrize("tid", TARGETS)
def test_target_serves_on_the_real_node(served, tid):
    res = served[tid]
    if isinstance(res, Exception):
        raise res
    answer = res["answer"]
    assert answer["choices"][0]["message"]["content"], answer
    assert answer["model"] == _served_model(_dgd(res["objects"]))
    assert answer["usage"]["completion_tokens"] > 0


def test_the_download_jobs_fetched_from_the_hub(served):
    """The Jobs' own snapshot_download ran against the hub: every model the rendered Jobs name was listed and fetched."""
    requests = served["_hub_requests"]
    for tid in TARGETS:
        res = served[tid]
        if isinstance(res, Exception):
            continue
        for job in (o for o in res["objects"] if o["kind"] == "Job"):
            env = {e["name"]: e.get("value") for e in job["spec"]["template"]["spec"]["containers"][0].get("env") or []}
            models = [v for k, v in env.items() if k.endswith("_MODEL") or k in ("MODEL_ID", "HF_MODEL_ID", "MODEL")] or []
            for m in models:
                if m and "/" in m:
                    assert any(r.startswith(f"GET /api/models/{m}/") for r in requests), (tid, m, requests[:20])


def test_a_read_only_claim_source_makes_the_compile_cache_read_only(node):
    """The kubelet's rule the compile-cache fix rests on, on the real node: the Ultra worker as rendered but with
    upstream's read-only claim source put back (what the program rendered before) cannot write its compile cache,
    although its compile-cache mount says nothing of readOnly; the worker exits on the read-only file system."""
    env = node
    tid, ns = "ultra-vllm-agg-b200-agentic-256K-kv-router", "node-readonly"
    objs = _objects(tid, ns)
    dgd = _dgd(objs)
    before = copy.deepcopy(dgd)
    released = 0
    for comp in before["spec"]["components"]:
        spec = comp["podTemplate"]["spec"]
        if any(
            m.get("subPath", "").startswith("compile-cache/") for c in spec["containers"] for m in c.get("volumeMounts") or []
        ):
            claim = next(v for v in spec["volumes"] if "persistentVolumeClaim" in v)
            assert "readOnly" not in claim["persistentVolumeClaim"]  # the render releases it
            claim["persistentVolumeClaim"]["readOnly"] = True
            released += 1
    assert released
    label_node_for(env, objs)
    apply_in_order(env, [before if o["kind"] == "DynamoGraphDeployment" else o for o in objs], JOB_TIMEOUT)

    def crashed():
        pods = json.loads(kubectl(env, "-n", ns, "get", "pods", "-o", "json"))["items"]
        for p in pods:
            if "job-name" in p["metadata"].get("labels", {}):
                continue  # the model-cache Jobs' pods
            for st in (p.get("status") or {}).get("containerStatuses") or []:
                term = (st.get("lastState") or {}).get("terminated") or (st.get("state") or {}).get("terminated")
                if term:
                    return True, json.dumps(term)
        return False, json.dumps([p.get("status", {}).get("containerStatuses") for p in pods])

    wait_for(f"{tid}: the worker with a read-only claim source exits", crashed, 180, env, ns)
    log = diagnose(env, ns, lines=40)
    assert "Read-only file system" in log, log


# A connection probe that runs in a pod: per (name, address, port) of PROBE_TARGETS, TCP connects (one second each)
# until one succeeds or PROBE_WINDOW seconds have passed; prints {name: connected}. A NetworkPolicy agent drops what a
# policy does not admit, so those connects time out; the window covers the agent's sync of the probe's own new pod
# address into its rules (kube-router adds it to its ipsets on the pod's event), so an admitted probe is not refused
# for starting first.
PROBE_WINDOW = 15
PROBE = """
import json, os, socket, threading, time
targets, out = json.loads(os.environ["PROBE_TARGETS"]), {}
deadline = time.monotonic() + float(os.environ["PROBE_WINDOW"])

def connect(name, host, port):
    out[name] = False
    while time.monotonic() < deadline:
        try:
            socket.create_connection((host, port), timeout=1).close()
            out[name] = True
            return
        except OSError:
            time.sleep(0.5)

threads = [threading.Thread(target=connect, args=t) for t in targets]
for t in threads:
    t.start()
for t in threads:
    t.join()
print("PROBE " + json.dumps(out, sort_keys=True), flush=True)
"""


def _probe_pod_spec(image: str, targets: list) -> dict:
    return {
        "restartPolicy": "Never",
        "securityContext": {"runAsNonRoot": True, "runAsUser": 1000, "seccompProfile": {"type": "RuntimeDefault"}},
        "containers": [
            {
                "name": "probe",
                "image": image,
                "imagePullPolicy": "IfNotPresent",
                "command": ["python3", "-c", PROBE],
                "env": [
                    {"name": "PROBE_TARGETS", "value": json.dumps(targets)},
                    {"name": "PROBE_WINDOW", "value": str(PROBE_WINDOW)},
                ],
                "securityContext": {"allowPrivilegeEscalation": False, "capabilities": {"drop": ["ALL"]}},
            }
        ],
    }


def _probe(env, namespace: str, name: str, image: str, targets: list, job: bool = False) -> dict:
    """Run the probe in ``namespace`` as a Pod ``name`` (or a Job ``name``: its pod carries the Job controller's
    ``batch.kubernetes.io/job-name`` label); its result, read from the pod's log on the node."""
    spec = _probe_pod_spec(image, targets)
    if job:
        obj = {
            "apiVersion": "batch/v1",
            "kind": "Job",
            "metadata": {"name": name, "namespace": namespace},
            "spec": {"backoffLimit": 0, "template": {"spec": spec}},
        }
        selector = f"batch.kubernetes.io/job-name={name}"
    else:
        obj = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name, "namespace": namespace, "labels": {"probe": name}}}
        obj["spec"] = spec
        selector = f"probe={name}"
    kubectl(env, "-n", namespace, "delete", obj["kind"].lower(), name, "--ignore-not-found", "--wait=true")
    apply(env, [obj])

    def finished():
        pods = json.loads(kubectl(env, "-n", namespace, "get", "pods", "-l", selector, "-o", "json"))["items"]
        done = [p for p in pods if p.get("status", {}).get("phase") in ("Succeeded", "Failed")]
        return bool(done), json.dumps([p.get("status", {}).get("phase") for p in pods])

    wait_for(f"probe {namespace}/{name} finished", finished, 120, env, namespace)
    pod = json.loads(kubectl(env, "-n", namespace, "get", "pods", "-l", selector, "-o", "json"))["items"][0]
    log = node_log(env, namespace, pod["metadata"]["name"], pod["metadata"]["uid"], "probe")
    kubectl(env, "-n", namespace, "delete", obj["kind"].lower(), name, "--wait=false")
    line = next((ln for ln in log.splitlines() if ln.startswith("PROBE ")), None)
    assert line, f"probe {namespace}/{name} printed no result:\n{log}"
    return json.loads(line[len("PROBE ") :])


def test_network_policies_are_enforced_on_the_node(served, node):
    """The serving namespace's NetworkPolicies (networkPolicy on) on the real node's NetworkPolicy agent, against the
    served Lightning aggregated target: before them every probe connects (the ports listen); after them a pod in
    another namespace reaches neither the frontend nor the worker, nor does a pod of the serving namespace that is
    not the benchmark Job's; the ingress namespace (the front door's gateway) reaches the frontend's HTTP port only,
    the monitoring namespace (Prometheus) the frontend and the worker's system port, and the benchmark Job the
    frontend, through its Service too."""
    from stacks.config.keys import parse
    from stacks.serving import build_plan
    from stacks.serving.network_policy import benchmark_job_name
    from stacks.serving.operator import LABEL_COMPONENT_TYPE, WORKER, container_ports

    env = node
    node_dir = Path(env["KUBE_LOCAL_DIR"]) / "node"
    agent = node_dir / "netpol-agent"
    assert agent.is_file(), "no NetworkPolicy agent runs on the node: " + (
        (node_dir / "netpol-disabled").read_text() if (node_dir / "netpol-disabled").is_file() else "(no reason recorded)"
    )
    tid, ns = TARGETS[0], "node-0"
    res = served[tid]
    if isinstance(res, Exception):
        raise res
    gateway, monitoring, other = "np-gateway", "np-monitoring", "np-other"
    plan = build_plan(
        parse(
            {
                "target": tid,
                "namespace": ns,
                "networkPolicy": {"enabled": True, "ingressNamespaces": [gateway], "monitoringNamespaces": [monitoring]},
                "benchmark": {"enabled": True},
            }
        )
    )
    dgd = _dgd(res["objects"])
    assert plan.dgd["metadata"]["name"] == dgd["metadata"]["name"] and plan.network_policies
    comps = {component_type(c): c for c in dgd["spec"]["components"]}
    fe_port = container_ports(comps[FRONTEND])["http"]
    system_port = container_ports(comps[WORKER])["system"]
    pods = json.loads(kubectl(env, "-n", ns, "get", "pods", "-o", "json"))["items"]

    def pod_ip(ctype: str) -> str:
        return next(
            p["status"]["podIP"]
            for p in pods
            if p["metadata"].get("labels", {}).get(LABEL_COMPONENT_TYPE) == ctype and p["status"].get("podIP")
        )

    svc = res["url"].removeprefix("http://").rsplit(":", 1)
    targets = [
        ["frontend", pod_ip(FRONTEND), fe_port],
        ["frontend-service", svc[0], int(svc[1])],
        ["worker-system", pod_ip(WORKER), system_port],
    ]
    image = comps[FRONTEND]["podTemplate"]["spec"]["containers"][0]["image"]
    for n in (gateway, monitoring, other):
        kubectl(env, "create", "namespace", n, check=False)
    everything = {t[0]: True for t in targets}
    assert _probe(env, other, "before", image, targets) == everything
    # What stands in: Dynamo's discovery store runs on the node's bridge address (tools/node/controller.py
    # DISCOVERY_ETCD), not as a pod of dynamo-system, which the graph policy admits; without this one policy the
    # frontend and workers lose etcd (their leases lapse and the frontend stops serving) once the policies apply.
    from controller import DISCOVERY_ETCD

    etcd = DISCOVERY_ETCD.removeprefix("http://").split(":")
    discovery = {
        "apiVersion": "networking.k8s.io/v1",
        "kind": "NetworkPolicy",
        "metadata": {"name": "local-node-discovery", "namespace": ns},
        "spec": {
            "podSelector": {},
            "policyTypes": ["Egress"],
            "egress": [{"to": [{"ipBlock": {"cidr": f"{etcd[0]}/32"}}], "ports": [{"protocol": "TCP", "port": int(etcd[1])}]}],
        },
    }
    try:
        apply(env, [discovery, *plan.network_policies])

        def enforced():
            got = _probe(env, other, "other", image, targets)
            return not any(got.values()), json.dumps(got)

        wait_for(f"the policies of {ns} refuse a pod of {other}", enforced, 90, env, ns, interval=1)
        assert _probe(env, gateway, "gateway", image, targets) == {
            "frontend": True,
            "frontend-service": True,
            "worker-system": False,
        }
        assert _probe(env, monitoring, "monitoring", image, targets) == everything
        # A pod of the serving namespace itself that is not the benchmark Job's (a download Job running remote code,
        # a pod someone starts) reaches nothing of the graph.
        assert _probe(env, ns, "same-namespace", image, targets) == {t[0]: False for t in targets}
        assert _probe(env, ns, benchmark_job_name(dgd), image, targets, job=True) == {
            "frontend": True,
            "frontend-service": True,
            "worker-system": False,
        }
    finally:
        for p in [discovery, *plan.network_policies]:
            kubectl(env, "-n", ns, "delete", "networkpolicy", p["metadata"]["name"], "--ignore-not-found", check=False)
