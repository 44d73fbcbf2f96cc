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
    apply_in_order,
    chat,
    dgd_ready,
    diagnose,
    hub_requests,
    kubectl,
    label_node_for,
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
JOB_TIMEOUT, READY_TIMEOUT = 300, 420


def _need_root():
    if sys.platform != "linux" or os.geteuid() != 0:
        pytest.skip("the real node needs Linux and root (README: the local node)")


@pytest.fixture(scope="module")
def node(tmp_path_factory):
    _need_root()
    state = tmp_path_factory.mktemp("node-cp")
    with control_plane(state, node=True, crds=True) as env:
        yield env


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
