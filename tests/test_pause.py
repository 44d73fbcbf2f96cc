"""Pause and resume (``paused: true`` on an entry or a single-target stack; stacks/serving/autoscaling.py).

Plan level (pure, stacks.program.build_program): pausing changes exactly the GPU components' replicas and the GPU node
group's desired and minimum size, nothing else (frontend, cache, download Job, launch template, labels, max size all
equal); resuming gives back the unpaused plan. Under the Pulumi mocks harness (the real __main__.py): the same URNs on
both sides (nothing created, deleted or replaced), inputs differing only there, and the AWS update rules accept
pause -> resume and resume -> pause (EKS's min <= desired <= max on UpdateNodegroupConfig, the size asked for).
"""

from __future__ import annotations

import copy
import functools

import pytest
import yaml

from harness import run_program
import aws_rules as R
from aws_rules import Graph, check
from stacks.config.keys import ConfigError
from stacks.program import build_program
from stacks.registry import yaml_text

SECRETS = {"hfToken": "hf_mock", "ngcApiKey": "nvapi-mock"}
DISAGG = {
    "target": "lightning-vllm-disagg-h100-dspark",
    "imagePullSecrets": ["ngc-secret"],
    "cluster": {"mode": "eks", "region": "us-east-1"},
}
GPU_COMPONENTS = {"VllmPrefillWorker", "VllmDecodeWorker"}


def paused(cfg: dict) -> dict:
    return {**copy.deepcopy(cfg), "paused": True}


def comps(program, entry: int = 0) -> dict[str, int]:
    return {c["name"]: c.get("replicas", 1) for c in program.entries[entry].plan.dgd["spec"]["components"]}


def scaling(program, pool: int = 0) -> dict:
    return dict(program.cluster_plan.gpu_pools[pool].nodegroup["scaling_config"])


def _strip(x, paths):
    """``x`` without the given (dotted) paths, for comparing everything else."""
    x = copy.deepcopy(x)
    for path in paths:
        *head, last = path.split(".")
        d = x
        for p in head:
            d = d[int(p)] if isinstance(d, list) else d[p]
        d.pop(last, None) if isinstance(d, dict) else None
    return x


def test_pause_puts_gpu_components_at_zero_and_keeps_the_frontend():
    on, off = build_program(DISAGG, "p"), build_program(paused(DISAGG), "p")
    assert {n for n, r in comps(on).items() if r} == {"Frontend", *GPU_COMPONENTS}
    assert comps(off) == {**comps(on), **{n: 0 for n in GPU_COMPONENTS}}
    assert comps(off)["Frontend"] == comps(on)["Frontend"] >= 1


def test_pause_changes_only_replicas_and_node_counts():
    on, off = build_program(DISAGG, "p"), build_program(paused(DISAGG), "p")
    # serving objects: equal except the GPU components' replicas
    objs_on, objs_off = on.objects(), off.objects()
    assert [(o["kind"], o["metadata"]["name"]) for o in objs_on] == [(o["kind"], o["metadata"]["name"]) for o in objs_off]
    for a, b in zip(objs_on, objs_off):
        if a["kind"] != "DynamoGraphDeployment":
            assert a == b, a["kind"]
            continue
        idx = [str(i) for i, c in enumerate(a["spec"]["components"]) if c["name"] in GPU_COMPONENTS]
        assert _strip(a, [f"spec.components.{i}.replicas" for i in idx]) == _strip(
            b, [f"spec.components.{i}.replicas" for i in idx]
        )
    # the cache and its download are kept
    assert any(o["kind"] == "PersistentVolumeClaim" for o in objs_off) and any(o["kind"] == "Job" for o in objs_off)
    # node group: desired and min to 0, max kept; launch template, labels, taints, instance type unchanged
    assert scaling(on) == {"desired_size": 1, "min_size": 1, "max_size": 1}
    assert scaling(off) == {"desired_size": 0, "min_size": 0, "max_size": 1}
    ng_on, ng_off = (p.cluster_plan.gpu_pools[0] for p in (on, off))
    assert _strip(ng_on.nodegroup, ["scaling_config"]) == _strip(ng_off.nodegroup, ["scaling_config"])
    assert ng_on.launch_template == ng_off.launch_template and ng_on.placement_group == ng_off.placement_group
    assert (ng_on.node_shape.count, ng_off.node_shape.count) == (1, 0)
    assert on.cluster_plan.system_nodegroup == off.cluster_plan.system_nodegroup


def test_resume_is_the_unpaused_plan():
    resumed = build_program({**paused(DISAGG), "paused": False}, "p")
    on = build_program(DISAGG, "p")
    assert resumed.objects() == on.objects() and scaling(resumed) == scaling(on)


def test_replicas_zero_for_every_gpu_component_is_a_pause_too():
    cfg = {**DISAGG, "replicas": {"VllmPrefillWorker": 0, "VllmDecodeWorker": 0}}
    p = build_program(cfg, "p")
    assert scaling(p)["desired_size"] == 0 and scaling(p)["min_size"] == 0 and scaling(p)["max_size"] >= 1
    # one GPU component left running keeps its nodes
    assert scaling(build_program({**DISAGG, "replicas": {"VllmPrefillWorker": 0}}, "p"))["desired_size"] == 1


def test_paused_entry_frees_only_its_own_share_of_the_pool():
    two = {
        "imagePullSecrets": ["ngc-secret"],
        "cluster": {"mode": "eks", "region": "us-east-1"},
        "serve": [
            {"name": "a", "target": "lightning-vllm-agg-h100-dspark", "namespace": "a", "replicas": {"agg": 8}},
            {"name": "b", "target": "lightning-vllm-agg-h100-dspark", "namespace": "b", "replicas": {"agg": 8}},
        ],
    }
    both = build_program(two, "p")
    assert scaling(both)["desired_size"] == 2  # 16 one-GPU workers on 8-GPU p5.48xlarge
    one_paused = copy.deepcopy(two)
    one_paused["serve"][1]["paused"] = True
    p = build_program(one_paused, "p")
    assert comps(p, 1)["agg"] == 0 and comps(p, 0)["agg"] == 8
    assert scaling(p) == {"desired_size": 1, "min_size": 1, "max_size": 1}
    all_paused = copy.deepcopy(one_paused)
    all_paused["serve"][0]["paused"] = True
    p = build_program(all_paused, "p")
    assert scaling(p) == {"desired_size": 0, "min_size": 0, "max_size": 2}  # max: what resuming both needs


AUTOSCALED = {
    **DISAGG,
    "observability": {"enabled": True},
    "cluster": {"mode": "eks", "region": "us-east-1", "gpuNodes": 1},
    "autoscaling": {"VllmDecodeWorker": {"minReplicas": 1, "maxReplicas": 4, "metric": "queue-depth", "target": 4}},
}


def test_paused_autoscaled_component_keeps_its_scaled_object_which_keda_holds_at_zero():
    """An autoscaled entry pauses like any other (GPU components at 0, node group to 0) and keeps its ScaledObject,
    annotated ``autoscaling.keda.sh/paused-replicas: "0"``: KEDA scales the adapter (and so the DGD component, whose
    replicas the Pulumi DGD ignores after creation) to 0 and stops autoscaling until a resume removes it."""
    from stacks.serving.autoscaling import PAUSED_REPLICAS

    on, off = build_program(AUTOSCALED, "p"), build_program(paused(AUTOSCALED), "p")
    assert comps(off) == {**comps(on), **{n: 0 for n in GPU_COMPONENTS}} and comps(on)["VllmDecodeWorker"] >= 1
    assert [c["name"] for c in off.entries[0].plan.dgd["spec"]["components"] if "scalingAdapter" in c] == ["VllmDecodeWorker"]
    (so_on,), (so_off,) = on.entries[0].plan.autoscalers, off.entries[0].plan.autoscalers
    assert "annotations" not in so_on["metadata"]
    assert so_off["metadata"]["annotations"] == {PAUSED_REPLICAS: "0"}
    assert _strip(so_off, ["metadata.annotations"]) == so_on  # the same trigger, bounds and target
    objs_on, objs_off = on.objects(), off.objects()
    assert [(o["kind"], o["metadata"]["name"]) for o in objs_on] == [(o["kind"], o["metadata"]["name"]) for o in objs_off]
    assert scaling(off) == {"desired_size": 0, "min_size": 0, "max_size": scaling(on)["max_size"]}
    # resume: the unpaused plan, the ScaledObject without the pause
    resumed = build_program({**paused(AUTOSCALED), "paused": False}, "p")
    assert resumed.objects() == objs_on and scaling(resumed) == scaling(on)


def test_paused_autoscaled_entry_is_refused_what_its_resume_would_be():
    """The pool bounds are checked against the resumed DGD: pausing does not let a maxReplicas through that resuming
    would refuse (the paused DGD's other GPU components are at 0)."""
    big = copy.deepcopy(AUTOSCALED)
    big["autoscaling"]["VllmDecodeWorker"]["maxReplicas"] = 8  # + the prefill worker: 9 GPUs on one 8-GPU node
    for cfg in (big, paused(big)):
        with pytest.raises(
            ConfigError,
            match=r"dynamo:autoscaling.VllmDecodeWorker.maxReplicas: 8 x 1 GPUs plus the pool's "
            r"other 1 GPUs need 9 h100 GPUs; .* valid range 1-7",
        ):
            build_program(cfg, "p")


def test_paused_is_a_boolean():
    with pytest.raises(ConfigError, match=r"dynamo:paused"):
        build_program({**DISAGG, "paused": "maybe"}, "p")


# ---------------------------------------------------------------------------- the real program under mocks


@functools.lru_cache(maxsize=None)
def _run(text: str):
    return run_program(yaml_text.load(text), SECRETS, stack="pause")


def run(cfg: dict):
    return _run(yaml.safe_dump(cfg))


def graph(cfg: dict) -> Graph:
    return Graph(run(cfg).resources)


def test_mocks_pause_and_resume_touch_only_replicas_and_scaling():
    on, off = run(DISAGG), run(paused(DISAGG))
    assert sorted(r.urn for r in on.resources) == sorted(r.urn for r in off.resources)  # nothing created or deleted
    before = {r.urn: r for r in on.resources}
    changed = {}
    for r in off.resources:
        b = before[r.urn]
        assert (r.parent, sorted(r.dependencies), r.retain_on_delete, r.protect, r.ignore_changes) == (
            b.parent,
            sorted(b.dependencies),
            b.retain_on_delete,
            b.protect,
            b.ignore_changes,
        ), r.name
        if r.inputs != b.inputs:
            changed[r.type] = (b, r)
    assert set(changed) == {"kubernetes:nvidia.com/v1beta1:DynamoGraphDeployment", R.NODEGROUP}
    b, a = changed[R.NODEGROUP]
    assert _strip(b.inputs, ["scalingConfig"]) == _strip(a.inputs, ["scalingConfig"])
    assert (
        a.inputs["scalingConfig"]["desiredSize"],
        a.inputs["scalingConfig"]["minSize"],
        a.inputs["scalingConfig"]["maxSize"],
    ) == (0, 0, 1)
    b, a = changed["kubernetes:nvidia.com/v1beta1:DynamoGraphDeployment"]
    idx = [str(i) for i, c in enumerate(b.inputs["spec"]["components"]) if c["name"] in GPU_COMPONENTS]
    assert _strip(b.inputs, [f"spec.components.{i}.replicas" for i in idx]) == _strip(
        a.inputs, [f"spec.components.{i}.replicas" for i in idx]
    )
    assert [c["replicas"] for c in a.inputs["spec"]["components"] if c["name"] in GPU_COMPONENTS] == [0, 0]


def test_mocks_pause_of_an_autoscaled_entry_changes_only_replicas_scaling_and_the_keda_pause():
    from stacks.serving.autoscaling import PAUSED_REPLICAS

    on, off = run(AUTOSCALED), run(paused(AUTOSCALED))
    assert sorted(r.urn for r in on.resources) == sorted(r.urn for r in off.resources)  # nothing created or deleted
    before = {r.urn: r for r in on.resources}
    changed = {}
    for r in off.resources:
        b = before[r.urn]
        assert (r.parent, sorted(r.dependencies), r.retain_on_delete, r.protect, r.ignore_changes) == (
            b.parent,
            sorted(b.dependencies),
            b.retain_on_delete,
            b.protect,
            b.ignore_changes,
        ), r.name
        if r.inputs != b.inputs:
            changed[r.type] = (b, r)
    so_type = "kubernetes:keda.sh/v1alpha1:ScaledObject"
    assert set(changed) == {"kubernetes:nvidia.com/v1beta1:DynamoGraphDeployment", R.NODEGROUP, so_type}
    b, a = changed[so_type]
    assert a.inputs["metadata"]["annotations"] == {PAUSED_REPLICAS: "0"} and "annotations" not in b.inputs["metadata"]
    assert _strip(a.inputs, ["metadata.annotations"]) == b.inputs
    dgd = changed["kubernetes:nvidia.com/v1beta1:DynamoGraphDeployment"][1]
    idx = next(i for i, c in enumerate(dgd.inputs["spec"]["components"]) if c["name"] == "VllmDecodeWorker")
    assert dgd.ignore_changes == [f"spec.components[{idx}].replicas"]  # still the adapter's, paused or not
    assert check(Graph(off.resources)) == [] and R.check_update(Graph(on.resources), Graph(off.resources)) == []
    assert R.check_update(Graph(off.resources), Graph(on.resources)) == []


def test_mocks_pause_and_resume_pass_the_aws_rules():
    on, off = graph(DISAGG), graph(paused(DISAGG))
    assert check(off) == [] and check(on) == []
    assert R.check_update(on, off) == []  # pause: min 0 <= desired 0 <= max 1
    assert R.check_update(off, on) == []  # resume: min 1 <= desired 1 <= max 1
    assert R.sent_scaling(
        next(r for r in on.resources if r.type == R.NODEGROUP and r.name.endswith("-gpu")),
        next(r for r in off.resources if r.type == R.NODEGROUP and r.name.endswith("-gpu")),
    ) == (0, 0, 1)


# ---------------------------------------------------------------------------- what a paused entry answers (real frontend)


def test_real_frontend_answers_404_model_not_found_once_the_paused_workers_are_gone(tmp_path):
    """The rig's real Dynamo 1.6.1 frontend and mocker (tests/rig.py) run the unpaused aggregated DGD; the processes of
    the pods the paused DGD no longer has (stacks.serving.operator.operator_pods) get SIGTERM, as a deleted pod does. The
    frontend drops the model from /v1/models and answers a request for it with HTTP 404 (the README's statement, and
    Dynamo's autoscaling guide: "Requests for the model return HTTP 404"), after at most a moment of 503 while the
    worker stops."""
    import json
    import os
    import signal
    import time
    import urllib.error
    import urllib.request

    from rig import _get, start_rig
    from stacks.serving.operator import operator_pods

    cfg = {"target": "lightning-vllm-agg-h100-dspark"}
    on, off = build_program(cfg, "p").entries[0].plan.dgd, build_program(paused(cfg), "p").entries[0].plan.dgd
    gone = {p.component for p in operator_pods(on)} - {p.component for p in operator_pods(off)}
    assert gone == {"agg"} and {p.component for p in operator_pods(off)} == {"Frontend"}
    cm = start_rig(on, tmp_path, timeout=180)
    rig = next(cm.gen)
    try:
        procs = cm.gen.gi_frame.f_locals["procs"].procs
        names = {p.name: p.component for p in rig.pods}
        assert json.loads(_get(rig.frontend_url + "/v1/models")[1])["data"][0]["id"] == rig.model
        for name, proc in procs.items():
            if names[name] in gone:
                os.killpg(proc.pid, signal.SIGTERM)
        deadline = time.monotonic() + 60
        while rig.model in _get(rig.frontend_url + "/v1/models")[1]:
            assert time.monotonic() < deadline, "the frontend still lists the model 60 s after its last worker went"
            time.sleep(0.5)
        body = json.dumps({"model": rig.model, "messages": [{"role": "user", "content": "hi"}], "max_tokens": 4}).encode()

        def ask() -> tuple[int, str]:
            req = urllib.request.Request(
                rig.frontend_url + "/v1/chat/completions", data=body, headers={"Content-Type": "application/json"}
            )
            try:
                with urllib.request.urlopen(req, timeout=30) as r:
                    return r.status, r.read().decode()
            except urllib.error.HTTPError as e:
                return e.code, e.read().decode()

        # While the last worker shuts down the frontend may answer 503 for a moment ("not ready to serve requests
        # yet" / "Service temporarily unavailable"); then, and for good, 404 "Model not found".
        seen = [ask()]
        while seen[-1][0] != 404:
            assert time.monotonic() < deadline + 10, f"no 404 after the workers went: {seen}"
            time.sleep(0.2)
            seen.append(ask())
        assert {code for code, _ in seen} <= {404, 503}, seen
        # Settled: 404 on every request; the body is Dynamo's {"message": "Model not found"} or empty (seen with 1.6.1
        # once no model is left), never a completion.
        settled = [ask() for _ in range(3)]
        assert [code for code, _ in settled] == [404, 404, 404], settled
        assert all(not b or json.loads(b)["message"] == "Model not found" for _, b in seen[-1:] + settled), settled
        assert json.loads(_get(rig.frontend_url + "/v1/models")[1])["data"] == []
    finally:
        cm.gen.close()


KARPENTER = {
    **DISAGG,
    "cluster": {"mode": "eks", "region": "us-east-1", "gpuPools": [{"gpu": "h100", "capacity": "karpenter", "maxNodes": 2}]},
}


def test_karpenter_pool_keeps_its_nodepool_and_only_the_dgd_changes():
    """A Karpenter pool registers no node group: the paused DGD has no GPU pod pending, so Karpenter launches nothing and
    consolidates the emptied nodes; the NodePool and EC2NodeClass stay as they are, and the pool's capacity
    placeholder (its Job and the PriorityClass) goes, so no placeholder holds a node (stacks/cluster/karpenter.py)."""
    on, off = run(KARPENTER), run(paused(KARPENTER))
    gone = sorted(
        r.urn for r in on.resources if r.name in ("cluster-karpenter-gpu-placeholder", "cluster-karpenter-placeholder-priority")
    )
    assert len(gone) == 2
    assert sorted(r.urn for r in on.resources if r.urn not in gone) == sorted(r.urn for r in off.resources)
    before = {r.urn: r for r in on.resources}
    changed = sorted(r.type for r in off.resources if r.inputs != before[r.urn].inputs)
    assert changed == ["kubernetes:nvidia.com/v1beta1:DynamoGraphDeployment"]
    assert not any(r.type == R.NODEGROUP and r.name.endswith("-gpu") for r in off.resources)
    assert R.check_update(Graph(on.resources), Graph(off.resources)) == [] and check(Graph(off.resources)) == []
