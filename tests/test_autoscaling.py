"""DGD autoscaling (``autoscaling.<component>``; stacks/serving/autoscaling.py): config refusals before any resource, the
ScaledObject and the DGD opt-in the plan renders, the Pulumi wiring (mocks), and admission by a real kube-apiserver
with the KEDA ScaledObject CRD of the pinned KEDA (Go module github.com/kedacore/keda/v2 at the chart's version,
config/crd/bases) and the Dynamo DGD and DGDSA CRDs of the pinned platform (../shared/reference/crds)."""

from __future__ import annotations

import copy
import json
import os
import re
import shutil
import subprocess
import time
from pathlib import Path

import pytest

from conftest import reference_file

from harness import run_program
from local_cluster import control_plane
from stacks.cli import fidelity
from stacks.serving.autoscaling import DGDSA_API, DGDSA_KIND, PAUSED_REPLICAS, adapter_name, gpus_per_replica
from stacks.config.keys import ConfigError
from stacks.observe.observability import DYNAMO_METRICS, prometheus_url
from stacks.program import build_program
from stacks.program.render import render_target
from stacks.registry.charts import chart_pin
from stacks.registry import yaml_text

ROOT = Path(__file__).resolve().parent.parent
GPU_KEY = "nvidia.com/gpu"
SECRETS = {"hfToken": "hf_mock", "ngcApiKey": "nvapi-mock"}
AGG = "lightning-vllm-agg-h100-dspark"
SCALE = {"worker": {"minReplicas": 1, "maxReplicas": 8, "metric": "queue-depth", "target": 4}}


def cfg(**kw) -> dict:
    base = {
        "target": AGG,
        "imagePullSecrets": ["ngc-secret"],
        "observability": {"enabled": True},
        "cluster": {"mode": "eks", "region": "us-east-1"},
        "autoscaling": copy.deepcopy(SCALE),
    }
    base.update(kw)
    return base


def worker_name(program) -> str:
    return next(c["name"] for c in program.entries[0].plan.dgd["spec"]["components"] if gpus_per_replica(c))


@pytest.fixture(scope="module")
def comp() -> str:
    return worker_name(build_program({"target": AGG}, "a"))


def scaled_cfg(comp: str, **kw) -> dict:
    c = cfg(**kw)
    c["autoscaling"] = {comp: c["autoscaling"].pop("worker")} if "worker" in c["autoscaling"] else c["autoscaling"]
    return c


# ---------------------------------------------------------------------------- plan


def test_scaled_object_drives_the_components_adapter_from_the_stacks_prometheus(comp):
    p = build_program(scaled_cfg(comp), "a")
    plan = p.entries[0].plan
    dgd = plan.dgd
    (so,) = plan.autoscalers
    name = f"{dgd['metadata']['name']}-{comp.lower()}"
    assert adapter_name(dgd["metadata"]["name"], comp) == name
    assert so["apiVersion"] == "keda.sh/v1alpha1" and so["kind"] == "ScaledObject"
    assert so["metadata"]["namespace"] == dgd["metadata"]["namespace"]
    assert so["spec"]["scaleTargetRef"] == {"apiVersion": DGDSA_API, "kind": DGDSA_KIND, "name": name}
    assert (so["spec"]["minReplicaCount"], so["spec"]["maxReplicaCount"]) == (1, 8)
    (trig,) = so["spec"]["triggers"]
    assert trig["type"] == "prometheus"
    assert trig["metadata"]["serverAddress"] == p.observability.prometheus_endpoint == prometheus_url("monitoring")
    assert trig["metadata"]["threshold"] == "4"
    q = trig["metadata"]["query"]
    assert q.startswith(f"sum({DYNAMO_METRICS['queued']}{{") and f'namespace="{dgd["metadata"]["namespace"]}"' in q
    assert f'dynamo_namespace="{dgd["metadata"]["namespace"]}-{dgd["metadata"]["name"]}"' in q
    # the component opts into its DGDSA; the others do not
    assert [c["name"] for c in dgd["spec"]["components"] if "scalingAdapter" in c] == [comp]
    assert next(c for c in dgd["spec"]["components"] if c["name"] == comp)["scalingAdapter"] == {}
    (keda,) = [layer for layer in p.layers if layer.key == "keda"]  # one KEDA layer, its chart only
    assert [c.chart for c in keda.charts] == ["keda"] and keda.objects == [] and keda.gates == "autoscalers"
    assert keda.describe() in p.other_layers


def test_ttft_and_existing_prometheus(comp):
    c = scaled_cfg(
        comp, observability={"enabled": True, "prometheus": "existing", "prometheusEndpoint": "http://prom.obs.svc:9090"}
    )
    c["autoscaling"][comp].update(metric="ttft", target=0.5)
    (so,) = build_program(c, "a").entries[0].plan.autoscalers
    md = so["spec"]["triggers"][0]["metadata"]
    assert md["serverAddress"] == "http://prom.obs.svc:9090" and md["threshold"] == "0.5"
    assert md["query"].startswith(f"histogram_quantile(0.95, sum by (le) (rate({DYNAMO_METRICS['ttft']}_bucket{{")


def test_replicas_start_inside_the_bounds(comp):
    c = scaled_cfg(comp, replicas={comp: 12}, cluster={"mode": "eks", "region": "us-east-1", "gpuNodes": 2})
    dgd = build_program(c, "a").entries[0].plan.dgd
    assert next(x for x in dgd["spec"]["components"] if x["name"] == comp)["replicas"] == 8


def test_without_autoscaling_nothing_changes():
    p = build_program({"target": AGG, "cluster": {"mode": "eks", "region": "us-east-1"}}, "a")
    assert p.entries[0].plan.autoscalers == [] and not [layer for layer in p.layers if layer.key == "keda"]
    assert not any("scalingAdapter" in c for c in p.entries[0].plan.dgd["spec"]["components"])
    assert render_target(AGG) == build_program({"target": AGG}, "a").objects()


def test_max_replicas_beyond_the_pool_is_refused_with_the_valid_range(comp):
    per = gpus_per_replica(
        next(c for c in build_program({"target": AGG}, "a").entries[0].plan.dgd["spec"]["components"] if c["name"] == comp)
    )
    c = scaled_cfg(comp, cluster={"mode": "eks", "region": "us-east-1", "gpuNodes": 1})
    c["autoscaling"][comp]["maxReplicas"] = 8 // per + 1
    with pytest.raises(ConfigError) as e:
        build_program(c, "a")
    assert str(e.value) == (
        f"dynamo:autoscaling.{comp}.maxReplicas: {8 // per + 1} x {per} GPUs need {(8 // per + 1) * per} h100 GPUs; "
        f"the pool (dynamo:cluster.gpuNodes) holds 8 (1 x p5.48xlarge); valid range 1-{8 // per}, "
        f"or raise dynamo:cluster.gpuNodes"
    )
    c["autoscaling"][comp]["maxReplicas"] = 8 // per
    build_program(c, "a")  # at the limit: accepted


def test_gpu_pool_key_and_other_entries_count_against_the_pool(comp):
    c = {
        "imagePullSecrets": ["ngc-secret"],
        "observability": {"enabled": True, "prometheus": "existing", "prometheusEndpoint": "http://prom.obs.svc:9090"},
        "cluster": {"mode": "eks", "region": "us-east-1", "gpuPools": [{"gpu": "h100", "nodes": 1}]},
        "serve": [
            {"name": "a", "target": AGG, "namespace": "a", "replicas": {comp: 4}},
            {
                "name": "b",
                "target": AGG,
                "namespace": "b",
                "autoscaling": {comp: {"maxReplicas": 8, "metric": "inflight", "target": 16}},
            },
        ],
    }
    with pytest.raises(
        ConfigError,
        match=rf"dynamo:serve\[1\].autoscaling.{comp}.maxReplicas: 8 x \d+ GPUs plus the pool's "
        rf"other \d+ GPUs need \d+ h100 GPUs; the pool \(dynamo:cluster.gpuPools\[0\].nodes\)",
    ):
        build_program(c, "a")
    c["serve"][0]["replicas"] = {comp: 0}
    p = build_program(c, "a")
    assert [len(e.plan.autoscalers) for e in p.entries] == [0, 1]
    # a dynamo:serve stack installs the stack-wide Prometheus too: its ScaledObjects query that one
    c["observability"] = {"enabled": True}
    p = build_program(c, "a")
    assert p.observability.charts and p.observability.prometheus_endpoint.startswith("http://")
    assert p.observability.prometheus_endpoint in str(p.entries[1].plan.autoscalers)


@pytest.mark.parametrize(
    "body, match",
    [
        (
            {"minReplicas": 0, "maxReplicas": 2, "metric": "queue-depth", "target": 1},
            r"minReplicas: 0 is not allowed: .*HTTP 404.*valid range 1-2.*paused: true",
        ),
        (
            {"minReplicas": 3, "maxReplicas": 2, "metric": "queue-depth", "target": 1},
            r"minReplicas: 3 is above maxReplicas 2; valid range 1-2",
        ),
        ({"maxReplicas": 101, "metric": "queue-depth", "target": 1}, r"maxReplicas: 101 is outside the valid range 1-100"),
        (
            {"maxReplicas": 2, "metric": "gpu-util", "target": 1},
            r"metric: 'gpu-util' is not valid; choose one of 'queue-depth', 'inflight' or 'ttft'",
        ),
        ({"maxReplicas": 2, "metric": "ttft"}, r"target: required"),
        # AGG routes to a single worker (no KV Router): the Planner's load-based mode is refused there
        (
            {"maxReplicas": 2, "via": "planner"},
            r"via: 'planner' is not available for lightning-vllm-agg-h100-dspark: its "
            r"routing is 'single' .*KV Router.*valid choices here: keda; KV-routed targets "
            r"of nemotron-3.5-lightning it can drive: .*lightning-vllm-agg-h100-dspark-kv-router",
        ),
        (
            {"maxReplicas": 2, "metric": "ttft", "target": 1, "optimizationTarget": "latency"},
            r"optimizationTarget: 'latency' is a Dynamo Planner setting; it needs via: planner",
        ),
        (
            {"maxReplicas": 2, "metric": "ttft", "target": 1, "scaleDown": 1},
            r"scaleDown: unknown key; valid keys: minReplicas, maxReplicas",
        ),
    ],
)
def test_bad_autoscaling_is_refused_before_any_resource(comp, body, match):
    c = cfg()
    c["autoscaling"] = {comp: body}
    with pytest.raises(ConfigError, match=rf"dynamo:autoscaling\.{comp}\.{match}"):
        build_program(c, "a")


def test_frontend_unknown_component_and_missing_prometheus_are_refused(comp):
    for body, match in (
        ({"Frontend": SCALE["worker"]}, r"dynamo:autoscaling.Frontend: 'Frontend' holds no GPU"),
        ({"nope": SCALE["worker"]}, rf"dynamo:autoscaling.nope: component 'nope' is not in this target; GPU components: {comp}"),
    ):
        with pytest.raises(ConfigError, match=match):
            build_program({**cfg(), "autoscaling": body}, "a")
    c = scaled_cfg(comp)
    del c["observability"]
    with pytest.raises(ConfigError, match=r"dynamo:autoscaling: needs dynamo:observability.enabled: true"):
        build_program(c, "a")


def test_the_dgd_crd_takes_the_opt_in_and_zero_replicas():
    crd = yaml_text.load(reference_file("crds/nvidia.com_dynamographdeployments.yaml").read_text())
    v1beta1 = next(v for v in crd["spec"]["versions"] if v["name"] == "v1beta1")
    comp_schema = v1beta1["schema"]["openAPIV3Schema"]["properties"]["spec"]["properties"]["components"]["items"]["properties"]
    assert comp_schema["scalingAdapter"]["type"] == "object" and comp_schema["replicas"]["minimum"] == 0
    sa = yaml_text.load(reference_file("crds/nvidia.com_dynamographdeploymentscalingadapters.yaml").read_text())
    assert sa["spec"]["names"]["kind"] == DGDSA_KIND
    served = {f"{sa['spec']['group']}/{v['name']}": v for v in sa["spec"]["versions"] if v["served"]}
    assert served[DGDSA_API]["subresources"]["scale"]["specReplicasPath"] == ".spec.replicas"


# ---------------------------------------------------------------------------- via: planner (the Dynamo Planner)
#
# Expected values come from the pinned Dynamo 1.6.1 (the ai-dynamo wheel of the serving rig), not from the product:
# - dynamo/planner/__main__.py _parse_config: the Planner's one flag is --config (a JSON string or a file path);
# - dynamo/planner/config/planner_config.py PlannerConfig: environment "kubernetes", backend, mode agg|disagg|prefill|
#   decode, optimization_target (throughput/latency/load: load-based scaling on, throughput-based off; sla: profiling),
#   enable_load_scaling, enable_throughput_scaling, pre_deployment_sweeping_mode "none", min_endpoint (agg) or
#   prefill_min_endpoint/decode_min_endpoint, max_gpu_budget ("Maximum total GPUs the planner may allocate");
# - examples/backends/vllm/deploy/v1beta1/disagg_planner.yaml @ 14a3b0d9132c9194daefae989364777c191ee559: the component
#   is type planner, runs `python3 -m dynamo.planner --config ...`, image nvcr.io/nvidia/ai-dynamo/dynamo-planner:<v>;
# - dynamo/planner/monitoring/dgd_services.py: roles by component type prefill/decode, one type worker as decode (agg).

KV_AGG = "lightning-vllm-agg-h100-dspark-kv-router"
KV_DISAGG = "ultra-vllm-disagg-b200-agentic-256K"  # type prefill + type decode, routing kv


def _planner(plan) -> dict:
    (pl,) = [c for c in plan.dgd["spec"]["components"] if c.get("type") == "planner"]
    return pl


def _planner_config(plan) -> dict:
    (main,) = _planner(plan)["podTemplate"]["spec"]["containers"]
    assert main["command"] == ["python3", "-m", "dynamo.planner"]
    flag, value = main["args"]
    assert flag == "--config"
    return json.loads(value)


def test_kv_routed_targets_come_from_the_catalog():
    from stacks import catalog
    from stacks.serving.autoscaling import planner_targets

    kv = {t.dgd_name for t in catalog.targets().values() if t.routing == "kv"}
    got = {t.dgd_name for t in planner_targets().values()}
    assert got and got <= kv
    assert {t.routing for t in planner_targets().values()} == {"kv"}
    # the KV-routed Motif targets run prefill and decode both as type worker, which the Planner cannot tell apart
    assert not any(t.model == "motif-3" or t.id.startswith("motif3") for t in planner_targets().values())


def test_planner_on_a_kv_routed_agg_target_is_a_load_based_planner_component_and_no_scaled_object():
    p = build_program({"target": KV_AGG, "autoscaling": {"agg": {"via": "planner", "minReplicas": 2, "maxReplicas": 4}}}, "a")
    plan = p.entries[0].plan
    pl = _planner(plan)
    assert pl["name"] == "Planner" and pl["replicas"] == 1
    (main,) = pl["podTemplate"]["spec"]["containers"]
    assert main["name"] == "main" and main["image"].startswith("nvcr.io/nvidia/ai-dynamo/dynamo-planner:1.6.")
    assert GPU_KEY not in json.dumps(main.get("resources") or {})
    per = gpus_per_replica(next(c for c in plan.dgd["spec"]["components"] if c["name"] == "agg"))
    assert _planner_config(plan) == {
        "environment": "kubernetes",
        "backend": "vllm",
        "mode": "agg",
        "optimization_target": "throughput",
        "enable_load_scaling": True,
        "enable_throughput_scaling": False,
        "pre_deployment_sweeping_mode": "none",
        "min_endpoint": 2,
        "max_gpu_budget": 4 * per,
    }
    # the scaled component opts into its adapter as on the KEDA path; no ScaledObject, no KEDA, no Prometheus needed
    assert [c["name"] for c in plan.dgd["spec"]["components"] if "scalingAdapter" in c] == ["agg"]
    assert plan.autoscalers == [] and p.observability is None
    assert not [layer for layer in p.layers if layer.key == "keda"]
    assert plan.autoscaling["agg"].via == "planner"  # its replicas are the adapter's after creation


def test_planner_on_a_disagg_target_scales_prefill_and_decode_in_one_planner():
    scale = {
        "prefill": {"via": "planner", "maxReplicas": 2},
        "decode": {"via": "planner", "minReplicas": 2, "maxReplicas": 3, "optimizationTarget": "latency"},
    }
    with pytest.raises(ConfigError, match=r"optimizationTarget: one Planner drives prefill, decode, so they take one"):
        build_program({"target": KV_DISAGG, "autoscaling": scale}, "a")
    scale["prefill"]["optimizationTarget"] = "latency"
    plan = build_program({"target": KV_DISAGG, "autoscaling": scale}, "a").entries[0].plan
    comps = {c["name"]: c for c in plan.dgd["spec"]["components"]}
    cfg_ = _planner_config(plan)
    assert (cfg_["mode"], cfg_["optimization_target"]) == ("disagg", "latency")
    assert (cfg_["prefill_min_endpoint"], cfg_["decode_min_endpoint"]) == (1, 2) and "min_endpoint" not in cfg_
    assert cfg_["max_gpu_budget"] == 2 * gpus_per_replica(comps["prefill"]) + 3 * gpus_per_replica(comps["decode"])
    # decode alone: the Planner's decode mode, the prefill left as configured
    one = (
        build_program({"target": KV_DISAGG, "autoscaling": {"decode": {"via": "planner", "maxReplicas": 3}}}, "a").entries[0].plan
    )
    assert _planner_config(one)["mode"] == "decode" and "prefill_min_endpoint" not in _planner_config(one)
    assert [c["name"] for c in one.dgd["spec"]["components"] if "scalingAdapter" in c] == ["decode"]


def test_planner_and_keda_side_by_side_only_keda_gets_a_scaled_object():
    scale = {
        "prefill": {"via": "planner", "maxReplicas": 2},
        "decode": {"minReplicas": 1, "maxReplicas": 3, "metric": "inflight", "target": 16},
    }
    with pytest.raises(ConfigError, match=r"dynamo:autoscaling: needs dynamo:observability.enabled: true .*for decode\)"):
        build_program({"target": KV_DISAGG, "autoscaling": scale}, "a")
    plan = build_program({"target": KV_DISAGG, "autoscaling": scale, "observability": {"enabled": True}}, "a").entries[0].plan
    assert [so["metadata"]["name"] for so in plan.autoscalers] == [adapter_name(plan.dgd["metadata"]["name"], "decode")]
    assert _planner_config(plan)["mode"] == "prefill"


@pytest.mark.parametrize(
    "target, body, kw, match",
    [
        (
            "motif3-vllm-disagg-b200-chat-generic-2p1d-kv",
            {"DecodeWorker": {"via": "planner", "maxReplicas": 2}},
            {},
            r"DecodeWorker\.via: 'planner' is not available for motif3-vllm-disagg-b200-chat-generic-2p1d-kv: the Planner "
            r"finds no role .*type worker components PrefillWorker, DecodeWorker.*valid choices here: keda",
        ),
        (
            KV_AGG,
            {"agg": {"via": "planner", "maxReplicas": 2, "optimizationTarget": "sla"}},
            {},
            r"agg\.via: 'planner' in the Planner's SLA mode \(optimizationTarget: 'sla'\) is not available: SLA scaling needs "
            r"profiling data.*valid optimizationTarget with via: planner: throughput, latency",
        ),
        (
            KV_AGG,
            {"agg": {"via": "planner", "maxReplicas": 2, "optimizationTarget": "load"}},
            {},
            r"agg\.optimizationTarget: 'load' needs the Planner's prefill queue-token and decode KV-utilization thresholds",
        ),
        (
            KV_AGG,
            {"agg": {"via": "planner", "maxReplicas": 2, "metric": "ttft", "target": 1}},
            {},
            r"agg\.metric: 'ttft' is a KEDA setting; with via: planner .*remove metric, or choose via: keda",
        ),
        (
            KV_AGG,
            {"agg": {"via": "planner", "maxReplicas": 2, "pollingInterval": 30}},
            {},
            r"agg\.pollingInterval: 30 is a KEDA setting",
        ),
        (
            KV_AGG,
            {"agg": {"via": "planner", "maxReplicas": 2}},
            {"paused": True},
            r"agg\.via: 'planner' with paused: true is not possible: .*valid choices for a paused entry: keda",
        ),
        (
            KV_AGG,
            {"agg": {"via": "nope", "maxReplicas": 2}},
            {},
            r"agg\.via: 'nope' is not valid; choose one of 'keda' or 'planner'",
        ),
    ],
)
def test_planner_refusals_name_the_key_the_value_why_and_the_choices(target, body, kw, match):
    with pytest.raises(ConfigError, match=rf"^dynamo:autoscaling\.{match}"):
        build_program({"target": target, "autoscaling": body, **kw}, "a")


def test_planner_in_a_serve_entry_names_the_entry_key():
    raw = {
        "serve": [
            {"target": AGG, "name": "a"},
            {
                "target": "lightning-vllm-agg-h100-dspark",
                "name": "b",
                "autoscaling": {"agg": {"via": "planner", "maxReplicas": 2}},
            },
        ]
    }
    with pytest.raises(ConfigError, match=r"dynamo:serve\[1\]\.autoscaling\.agg\.via: 'planner' is not available"):
        build_program(raw, "a")


def test_planner_config_is_accepted_by_the_pinned_planner():
    """The --config the DGD carries, validated by PlannerConfig of the pinned ai-dynamo 1.6.1 wheel (the rig's env)."""
    from rig import RigError, rig_env_dir

    try:
        py = rig_env_dir() / "bin" / "python"
    except RigError as e:
        pytest.skip(f"the serving rig's environment is not available: {e}")
    configs = [
        _planner_config(build_program({"target": t, "autoscaling": a}, "a").entries[0].plan)
        for t, a in (
            (KV_AGG, {"agg": {"via": "planner", "maxReplicas": 4}}),
            (KV_DISAGG, {"prefill": {"via": "planner", "maxReplicas": 2}, "decode": {"via": "planner", "maxReplicas": 3}}),
            (KV_DISAGG, {"decode": {"via": "planner", "maxReplicas": 3, "optimizationTarget": "latency"}}),
        )
    ]
    # The rig env lacks the Planner's runtime dependencies (sklearn, aisimulate_core) that dynamo/planner/__init__.py
    # and plugins/__init__.py import; the config module needs only pydantic, so those two package inits are skipped.
    code = (
        "import json, os, sys, types\n"
        "import dynamo\n"
        "base = os.path.join(list(dynamo.__path__)[0], 'planner')\n"
        "for name, sub in (('dynamo.planner', base), ('dynamo.planner.plugins', os.path.join(base, 'plugins'))):\n"
        "    m = types.ModuleType(name); m.__path__ = [sub]; sys.modules[name] = m\n"
        "from dynamo.planner.config.planner_config import PlannerConfig\n"
        "out = []\n"
        "for arg in json.loads(sys.argv[1]):\n"
        "    c = PlannerConfig.from_config_arg(arg)\n"
        "    out.append({k: getattr(c, k) for k in ('environment', 'backend', 'mode', 'optimization_target',"
        " 'enable_load_scaling', 'enable_throughput_scaling', 'max_gpu_budget')})\n"
        "print(json.dumps(out, default=str))\n"
    )
    proc = subprocess.run(
        [str(py), "-c", code, json.dumps([json.dumps(c) for c in configs])], capture_output=True, text=True, timeout=120
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    got = json.loads(proc.stdout.strip().splitlines()[-1])
    for c, g in zip(configs, got):
        # load-based: the pinned Planner keeps load scaling on and throughput (profiling) scaling off
        assert g["enable_load_scaling"] is True and g["enable_throughput_scaling"] is False
        assert {k: g[k] for k in ("environment", "backend", "mode", "optimization_target", "max_gpu_budget")} == {
            k: c[k] for k in ("environment", "backend", "mode", "optimization_target", "max_gpu_budget")
        }


# ---------------------------------------------------------------------------- wiring (Pulumi mocks)


def test_mocks_scaled_object_after_dgd_and_keda_and_replicas_left_to_the_adapter(comp):
    c = scaled_cfg(comp)
    run = run_program(c, SECRETS, stack="autoscale")
    dgd = run.one("kubernetes:nvidia.com/v1beta1:DynamoGraphDeployment")
    so = run.one("kubernetes:keda.sh/v1alpha1:ScaledObject")
    keda = [r for r in run.by_type("kubernetes:helm.sh/v3:Release") if r.inputs.get("chart") == "keda"]
    assert len(keda) == 1
    pin = chart_pin("keda")
    assert (keda[0].inputs["version"], keda[0].inputs["namespace"], keda[0].inputs["repositoryOpts"]["repo"]) == (
        pin["version"],
        "keda",
        pin["repo"],
    )
    assert dgd.urn in so.dependencies and keda[0].urn in so.dependencies
    idx = [i for i, x in enumerate(dgd.inputs["spec"]["components"]) if x["name"] == comp]
    assert dgd.ignore_changes == [f"spec.components[{idx[0]}].replicas"]
    assert so.inputs["spec"]["scaleTargetRef"]["name"] == adapter_name(dgd.inputs["metadata"]["name"], comp)
    plain = run_program({**cfg(), "autoscaling": {}}, SECRETS, stack="autoscale")
    assert plain.by_type("kubernetes:keda.sh/v1alpha1:ScaledObject") == []
    assert plain.one("kubernetes:nvidia.com/v1beta1:DynamoGraphDeployment").ignore_changes == []


def test_mocks_two_autoscaled_entries_share_one_keda(comp):
    c = {
        "imagePullSecrets": ["ngc-secret"],
        "observability": {"enabled": True, "prometheus": "existing", "prometheusEndpoint": "http://prom.obs.svc:9090"},
        "cluster": {"mode": "eks", "region": "us-east-1", "gpuNodes": 2},
        "serve": [
            {
                "name": n,
                "target": AGG,
                "namespace": n,
                "autoscaling": {comp: {"maxReplicas": 4, "metric": "queue-depth", "target": 2}},
            }
            for n in ("a", "b")
        ],
    }
    run = run_program(c, SECRETS, stack="autoscale2")
    assert len(run.by_type("kubernetes:keda.sh/v1alpha1:ScaledObject")) == 2
    assert len([r for r in run.by_type("kubernetes:helm.sh/v3:Release") if r.inputs.get("chart") == "keda"]) == 1


# ---------------------------------------------------------------------------- admission by a real kube-apiserver


def keda_crds() -> Path:
    """config/crd/bases of github.com/kedacore/keda/v2 at the pinned chart's version, from the Go module proxy."""
    go = shutil.which("go")
    if not go:
        pytest.skip("go not on PATH (the KEDA CRD comes from the Go module proxy)")
    mod = f"github.com/kedacore/keda/v2@v{chart_pin('keda')['version']}"
    out = subprocess.run(
        [go, "mod", "download", "-json", mod],
        capture_output=True,
        text=True,
        timeout=300,
        env={**os.environ, "GOFLAGS": "-mod=mod"},
        cwd="/",
    )
    info = json.loads(out.stdout or "{}")
    if out.returncode or "Dir" not in info:
        pytest.fail(f"go mod download {mod}: {info.get('Error') or out.stderr}")
    return Path(info["Dir"]) / "config" / "crd" / "bases"


@pytest.fixture(scope="module")
def apiserver(tmp_path_factory):
    if not shutil.which("kubectl"):
        pytest.skip("kubectl not on PATH: run `make test` (it builds the pinned toolchain) or tools/toolchain.sh")
    from stacks.cli.simulate import Simulator

    crds = keda_crds()
    state = tmp_path_factory.mktemp("kube-autoscaling")
    with control_plane(state, apiserver_only=True, crds=False, timeout=300):
        sim = Simulator(state / "kubeconfig")
        try:
            docs = [yaml_text.load((crds / "keda.sh_scaledobjects.yaml").read_text())]
            for f in ("nvidia.com_dynamographdeployments.yaml", "nvidia.com_dynamographdeploymentscalingadapters.yaml"):
                d = yaml_text.load((fidelity.reference_root() / "crds" / f).read_text())
                d["spec"]["conversion"] = {
                    "strategy": "None"
                }  # no operator webhook here; both versions share one schema shape per object
                docs.append(d)
            for d in docs:
                d["metadata"].pop("annotations", None)
                sim.request("POST", "/apis/apiextensions.k8s.io/v1/customresourcedefinitions", d)
            deadline = time.monotonic() + 60
            for d in docs:
                while not any(
                    c["type"] == "Established" and c["status"] == "True"
                    for c in (
                        sim.request(
                            "GET", f"/apis/apiextensions.k8s.io/v1/customresourcedefinitions/{d['metadata']['name']}"
                        ).get("status")
                        or {}
                    ).get("conditions")
                    or []
                ):
                    assert time.monotonic() < deadline, f"CRD {d['metadata']['name']} not Established"
                    time.sleep(0.2)
            yield sim
        finally:
            sim.close()


def _post(sim, obj: dict) -> dict:
    group, _, version = obj["apiVersion"].rpartition("/")
    plural = {
        "ScaledObject": "scaledobjects",
        "DynamoGraphDeployment": "dynamographdeployments",
        DGDSA_KIND: "dynamographdeploymentscalingadapters",
    }[obj["kind"]]
    return sim.request("POST", f"/apis/{group}/{version}/namespaces/{obj['metadata']['namespace']}/{plural}", obj)


@pytest.mark.engine
def test_api_server_admits_the_dgd_adapter_and_scaled_object_and_scales_through_the_adapter(apiserver, comp):
    from stacks.cli.simulate import KubeError

    sim = apiserver
    plan = build_program(scaled_cfg(comp), "a").entries[0].plan
    ns = plan.dgd["metadata"]["namespace"]
    sim.request("POST", "/api/v1/namespaces", {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": ns}})
    # the DGD as planned: the opt-in and the component's replicas survive the CRD's structural schema
    stored = _post(sim, plan.dgd)
    got = {c["name"]: c for c in stored["spec"]["components"]}
    assert got[comp]["scalingAdapter"] == {} and got[comp]["replicas"] == 1
    # the adapter the operator creates for it (generateAdapterName; spec seeded from the component's replicas)
    name = adapter_name(plan.dgd["metadata"]["name"], comp)
    _post(
        sim,
        {
            "apiVersion": DGDSA_API,
            "kind": DGDSA_KIND,
            "metadata": {"name": name, "namespace": ns},
            "spec": {"dgdRef": {"name": plan.dgd["metadata"]["name"], "componentName": comp}, "replicas": 1},
        },
    )
    # the ScaledObject as planned is admitted, nothing pruned
    (so,) = plan.autoscalers
    assert _post(sim, so)["spec"] == so["spec"]
    # what the scale target names is a scalable object: the HPA KEDA creates reads and writes its scale subresource
    ref = so["spec"]["scaleTargetRef"]
    base = f"/apis/{ref['apiVersion']}/namespaces/{ns}/dynamographdeploymentscalingadapters/{ref['name']}"
    scale = sim.request("GET", f"{base}/scale")
    assert scale["kind"] == "Scale" and scale["spec"]["replicas"] == 1
    scale["spec"]["replicas"] = so["spec"]["maxReplicaCount"]
    sim.request("PUT", f"{base}/scale", scale)
    assert sim.request("GET", base)["spec"]["replicas"] == so["spec"]["maxReplicaCount"]
    # the API server refuses what the config refuses: min above max (the CRD's CEL rule)
    bad = copy.deepcopy(so)
    bad["metadata"]["name"] = "min-above-max"
    bad["spec"].update(minReplicaCount=3, maxReplicaCount=2)
    with pytest.raises(KubeError) as e:
        _post(sim, bad)
    assert e.value.status == 422 and "minReplicaCount must be less than or equal to maxReplicaCount" in json.dumps(e.value.body)
    # paused (paused: true): the DGD update (GPU components at 0, the opt-in kept) and the ScaledObject with KEDA's pause
    # are admitted; KEDA applies the pause by writing the count to the adapter's Scale subresource
    # (scaleTargetToPausedCount), which the adapter's schema takes at 0 (and refuses below); resume: KEDA writes
    # minReplicaCount there (RequestScale, target below its minimum).
    paused_plan = build_program({**scaled_cfg(comp), "paused": True}, "a").entries[0].plan
    dgd_path = f"/apis/{plan.dgd['apiVersion']}/namespaces/{ns}/dynamographdeployments/{plan.dgd['metadata']['name']}"
    live = sim.request("GET", dgd_path)
    stored = sim.request("PUT", dgd_path, {**live, "spec": paused_plan.dgd["spec"]})
    got = {c["name"]: c for c in stored["spec"]["components"]}
    assert got[comp]["scalingAdapter"] == {} and got[comp]["replicas"] == 0
    (pso,) = paused_plan.autoscalers
    so_path = f"/apis/keda.sh/v1alpha1/namespaces/{ns}/scaledobjects/{so['metadata']['name']}"
    live = sim.request("GET", so_path)
    updated = sim.request(
        "PUT", so_path, {**live, "metadata": {**live["metadata"], "annotations": pso["metadata"]["annotations"]}}
    )
    assert updated["metadata"]["annotations"] == {PAUSED_REPLICAS: "0"} and updated["spec"] == pso["spec"] == so["spec"]
    for replicas in (int(pso["metadata"]["annotations"][PAUSED_REPLICAS]), so["spec"]["minReplicaCount"]):
        scale = sim.request("GET", f"{base}/scale")
        scale["spec"]["replicas"] = replicas
        sim.request("PUT", f"{base}/scale", scale)
        assert sim.request("GET", base)["spec"]["replicas"] == replicas
    scale = sim.request("GET", f"{base}/scale")
    scale["spec"]["replicas"] = -1
    with pytest.raises(KubeError) as e:
        sim.request("PUT", f"{base}/scale", scale)
    assert e.value.status == 422


@pytest.mark.engine
def test_pinned_keda_pauses_at_the_annotations_count_and_resumes_to_min_replicas():
    """The facts the pause relies on, in the source of the pinned KEDA (the module of the chart's version): the
    annotation the plan sets is its PausedReplicasAnnotation, its reconciler writes that count to the target's Scale
    (while ``autoscaling.keda.sh/paused`` alone writes nothing), and its scale loop raises a target below
    minReplicaCount to it."""
    mod = keda_crds().parents[2]
    types = (mod / "apis" / "keda" / "v1alpha1" / "scaledobject_types.go").read_text()
    assert f'PausedReplicasAnnotation = "{PAUSED_REPLICAS}"' in types
    ctrl = (mod / "controllers" / "keda" / "scaledobject_controller.go").read_text()
    body = ctrl.split("func (r *ScaledObjectReconciler) scaleTargetToPausedCount(", 1)[1].split("\n}\n", 1)[0]
    assert "if pausedCount == nil {" in body and "return nil" in body and "scale.Spec.Replicas = *pausedCount" in body
    assert (
        "r.scaleTargetToPausedCount(ctx, logger, scaledObject)"
        in ctrl.split("func (r *ScaledObjectReconciler) handlePause(", 1)[1]
    )
    loop = (mod / "pkg" / "scaling" / "executor" / "scale_scaledobjects.go").read_text()
    assert (
        "currentReplicas < minReplicas:" in loop
        and "updateScaleOnScaleTarget(ctx, scaledObject, *scaledObject.Spec.MinReplicaCount)" in loop
    )


def test_karpenter_pool_bounds_name_max_nodes(comp):
    c = scaled_cfg(
        comp,
        cluster={"mode": "eks", "region": "us-east-1", "gpuPools": [{"gpu": "h100", "capacity": "karpenter", "maxNodes": 1}]},
    )
    per = gpus_per_replica(
        next(x for x in build_program({"target": AGG}, "a").entries[0].plan.dgd["spec"]["components"] if x["name"] == comp)
    )
    c["autoscaling"][comp]["maxReplicas"] = 8 // per + 1
    with pytest.raises(
        ConfigError,
        match=rf"dynamo:autoscaling.{comp}.maxReplicas: .* the pool \(dynamo:cluster.gpuPools\[0\].maxNodes\) "
        rf"holds 8 \(NodePool limit 1 x p5.48xlarge\); valid range 1-{8 // per}, or raise dynamo:cluster.gpuPools\[0\].maxNodes",
    ):
        build_program(c, "a")


# ---------------------------------------------------------------------------- pools known only at `up`, or not at all

CLUSTER_STACK = "organization/dynamo/h100-cluster"  # the committed cluster stack (tests/harness.py cluster_stack_outputs)


def on_cluster_stack(max_replicas: int) -> dict:
    """Pulumi.h100-serving.yaml's entries (on the committed h100-cluster: 2 x p5.48xlarge), the disaggregated one's decode
    workers autoscaled."""
    return {
        "imagePullSecrets": ["ngc-secret"],
        "cluster": {"mode": "stack", "stack": CLUSTER_STACK},
        "observability": {"enabled": True, "prometheus": "existing", "prometheusEndpoint": "http://prom.obs.svc:9090"},
        "serve": [
            {"name": "lightning-agg", "target": AGG, "namespace": "llm"},
            {
                "name": "lightning-disagg",
                "target": "lightning-vllm-disagg-h100-dspark",
                "namespace": "llm",
                "autoscaling": {"VllmDecodeWorker": {"maxReplicas": max_replicas, "metric": "queue-depth", "target": 4}},
            },
            {"name": "lightning-trtllm", "target": "lightning-trtllm-agg-h100-mtp", "namespace": "trtllm"},
        ],
    }


def test_cluster_stack_pool_bounds_autoscaling_at_up_before_any_dgd():
    """On ``cluster.mode: stack`` the pools are the cluster stack's ``nodePools`` output, known at `up` only (the
    program reads no other stack's config): the plan takes any maxReplicas up to the DGD's own 100, and `up` refuses one
    beyond the pool before any DGD, naming the key, the pool and the valid range; the top of that range is accepted."""
    import harness

    assert build_program(on_cluster_stack(100), "s").entries[1].plan.autoscalers  # nothing known of the pool yet
    with pytest.raises(
        Exception,
        match=r"dynamo:serve\[1\]\.autoscaling\.VllmDecodeWorker\.maxReplicas: 100 .* the pool "
        r"\(dynamo:cluster\.gpuPools\[0\]\.nodes of organization/dynamo/h100-cluster\) holds "
        r"(16 \(2 x p5\.48xlarge\)|2 x p5\.48xlarge); valid range 1-\d+",
    ) as e:
        run_program(on_cluster_stack(100), SECRETS, stack="serving")
    assert harness.LAST_RUN.by_type("kubernetes:nvidia.com/v1beta1:DynamoGraphDeployment") == []
    hi = int(re.search(r"valid range 1-(\d+)", str(e.value)).group(1))
    assert 1 <= hi < 16  # 16 GPUs, three other GPU workers
    run = run_program(on_cluster_stack(hi), SECRETS, stack="serving")
    (so,) = run.by_type("kubernetes:keda.sh/v1alpha1:ScaledObject")
    assert (
        so.inputs["spec"]["maxReplicaCount"] == hi
        and len(run.by_type("kubernetes:nvidia.com/v1beta1:DynamoGraphDeployment")) == 3
    )
    with pytest.raises(Exception, match=rf"maxReplicas: {hi + 1} .*valid range 1-{hi}"):
        run_program(on_cluster_stack(hi + 1), SECRETS, stack="serving")


def test_cluster_stack_karpenter_pool_is_bounded_by_its_node_limit():
    """A Karpenter pool of a cluster stack exports its maxNodes as ``count`` (stacks.cluster.node_pools): the bound
    names it."""
    from harness import cluster_stack_outputs

    pools = [{**p, "capacity": "karpenter", "count": 1} for p in cluster_stack_outputs(CLUSTER_STACK)["nodePools"]]
    program = build_program(on_cluster_stack(8), "s")
    msg = program.autoscaling_shortfall(pools)
    assert re.search(
        r"maxReplicas: 8 .*\(dynamo:cluster\.gpuPools\[0\]\.maxNodes of organization/dynamo/h100-cluster\) holds "
        r"(8 )?\(?NodePool limit 1 x p5\.48xlarge\)?; valid range 1-5",
        msg,
    ), msg
    assert program.autoscaling_shortfall([{**p, "count": 2} for p in pools]) is None
    assert program.autoscaling_shortfall(None) is None  # not a list: capacity_shortfall reports that


def test_existing_cluster_checks_only_the_dgds_own_bounds(tmp_path, comp):
    """``cluster.mode: kubeconfig``: no pool is known, so only 1 <= minReplicas <= maxReplicas <= 100 is checked."""
    kubeconfig = tmp_path / "kubeconfig"
    kubeconfig.write_text("apiVersion: v1\nkind: Config\n")
    c = scaled_cfg(comp, cluster={"mode": "kubeconfig", "kubeconfigPath": str(kubeconfig)})
    c["createNamespace"] = False  # the pull Secrets are the existing cluster's: in a namespace made beside them
    c["autoscaling"][comp]["maxReplicas"] = 100
    assert build_program(c, "k").entries[0].plan.autoscalers[0]["spec"]["maxReplicaCount"] == 100
    c["autoscaling"][comp]["maxReplicas"] = 101
    with pytest.raises(ConfigError, match=rf"dynamo:autoscaling.{comp}.maxReplicas: 101 is outside the valid range 1-100"):
        build_program(c, "k")


def test_committed_example_autoscales_a_karpenter_pool():
    from stacks.program.render import program_for_stack

    p = program_for_stack("h100-karpenter")
    assert p.cluster_plan.gpu_pools[0].capacity == "karpenter"
    (so,) = p.entries[0].plan.autoscalers
    dgd = p.entries[0].plan.dgd
    assert so["spec"]["scaleTargetRef"]["name"] == adapter_name(dgd["metadata"]["name"], "VllmDecodeWorker")
    assert [c["name"] for c in dgd["spec"]["components"] if "scalingAdapter" in c] == ["VllmDecodeWorker"]
