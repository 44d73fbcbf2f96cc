"""Several targets in one `dynamo:serve` stack: entries, shared caches, per-entry overrides, capacity from the sum."""

import pytest

from harness import run_program
from stacks.config.keys import ConfigError
from stacks.program import build_program
from stacks.program.render import render_config
from stacks.cli.review import diff_objects
from stacks.serving.serve import build_entries

AGG, DISAGG, MOTIF = "lightning-vllm-agg-h100-dspark", "lightning-vllm-disagg-h100-dspark", "motif3-vllm-agg-b200-chat"
TOKEN = frozenset({"hfToken"})


def three(**extra):
    return {
        "serve": [
            {"target": AGG, "namespace": "llm"},
            {"target": DISAGG, "namespace": "llm"},
            {"model": "motif-3", "namespace": "motif"},
        ],
        **extra,
    }


def kinds(objs):
    out = {}
    for o in objs:
        out.setdefault(o["kind"], []).append((o["metadata"].get("namespace"), o["metadata"]["name"]))
    return out


def test_entries_of_one_model_share_one_cache_and_download():
    program = build_program(three(), "t", TOKEN)
    k = kinds(program.objects())
    assert sorted(k["PersistentVolumeClaim"]) == [("llm", "shared-model-cache"), ("motif", "shared-model-cache")]
    assert sorted(k["Job"]) == [("llm", "model-download"), ("motif", "model-download")]
    assert sorted(k["Namespace"]) == [(None, "llm"), (None, "motif")]
    assert len(k["DynamoGraphDeployment"]) == 3
    llm = [e for e in program.entries if e.plan.dgd["metadata"]["namespace"] == "llm"]
    assert llm[1].cache_owner == llm[0].name and not llm[1].owns_cache


def test_different_models_in_one_namespace_are_refused_by_entry():
    with pytest.raises(ConfigError, match=r"dynamo:serve\[1\]\.namespace: 'dynamo': this entry needs its own model cache"):
        build_program({"serve": [{"target": AGG}, {"model": "motif-3"}]}, "t", TOKEN)


@pytest.mark.parametrize(
    "entry, must",
    [
        ({"gpu": "a100"}, r"dynamo:serve\[1\]\.gpu: 'a100'"),
        ({"target": "nope"}, r"dynamo:serve\[1\]\.target: 'nope'"),
        ({"target": AGG, "overrides": {"Agg": {}}}, r"dynamo:serve\[1\]\.overrides\.Agg: .*did you mean 'agg'"),
        (
            {"target": AGG, "overrides": {"agg": {"args": {"set": {"--no-such-flag": "1"}}}}},
            r"overrides\.agg\.args\.set: '--no-such-flag' is not among",
        ),
        (
            {"target": AGG, "overrides": {"agg": {"args": {"drop": ["x"]}}}},
            r"overrides\.agg\.args\.drop: unknown key; valid keys: set, append, remove",
        ),
        (
            {"target": AGG, "overrides": {"agg": {"resources": {"limits": {"memory": "lots"}}}}},
            r"resources\.limits: memory: 'lots' is not a Kubernetes quantity",
        ),
        ({"target": AGG, "cluster": {"mode": "render"}}, r"dynamo:serve\[1\]\.cluster: is a stack-wide key"),
        ("not-a-map", r"dynamo:serve\[1\]: 'not-a-map' is not a mapping"),
    ],
)
def test_bad_entries_name_the_entry(entry, must):
    raw = {"serve": [{"target": DISAGG, "namespace": "other"}, entry]}
    with pytest.raises(ConfigError, match=must):
        build_program(raw, "t", TOKEN)


def test_empty_serve_list_is_refused():
    with pytest.raises(ConfigError, match=r"dynamo:serve: \[\] is not a non-empty list"):
        build_program({"serve": []}, "t", TOKEN)


def test_top_level_keys_are_every_entrys_defaults():
    program = build_program(
        {"namespace": "shared", "images": {"*": "nvcr.io/x/y:1.2.3"}, "serve": [{"target": AGG}, {"target": DISAGG}]}, "t", TOKEN
    )
    for e in program.entries:
        assert e.plan.dgd["metadata"]["namespace"] == "shared"
        assert {c["image"] for comp in e.plan.dgd["spec"]["components"] for c in comp["podTemplate"]["spec"]["containers"]} == {
            "nvcr.io/x/y:1.2.3"
        }


def _container(program, entry_index, component):
    dgd = program.entries[entry_index].plan.dgd
    return next(c for c in dgd["spec"]["components"] if c["name"] == component)["podTemplate"]["spec"]["containers"][0]


def test_overrides_set_append_remove_args_env_and_resources():
    base = _container(build_program({"serve": [{"target": DISAGG}]}, "t", TOKEN), 0, "VllmDecodeWorker")
    assert "--async-scheduling" in base["args"]
    ov = {
        "VllmDecodeWorker": {
            "args": {"set": {"--max-num-seqs": "64"}, "append": ["--enforce-eager"], "remove": ["--async-scheduling"]},
            "env": {"VLLM_LOGGING_LEVEL": "DEBUG"},
            "resources": {"limits": {"memory": "400Gi"}},
        }
    }
    c = _container(build_program({"serve": [{"target": DISAGG, "overrides": ov}]}, "t", TOKEN), 0, "VllmDecodeWorker")
    assert c["args"][c["args"].index("--max-num-seqs") + 1] == "64"
    assert c["args"][-1] == "--enforce-eager" and "--async-scheduling" not in c["args"]
    assert len(c["args"]) == len(base["args"])  # one added, one removed
    assert {"name": "VLLM_LOGGING_LEVEL", "value": "DEBUG"} in c["env"]
    assert c["resources"]["limits"]["memory"] == "400Gi"
    # Other components and entries are untouched.
    assert _container(
        build_program({"serve": [{"target": DISAGG, "overrides": ov}]}, "t", TOKEN), 0, "VllmPrefillWorker"
    ) == _container(build_program({"serve": [{"target": DISAGG}]}, "t", TOKEN), 0, "VllmPrefillWorker")


def test_no_override_renders_exactly_the_catalog_target():
    """Fidelity holds per entry: without overrides an entry's objects are the single-target render."""
    program = build_program({"serve": [{"target": AGG}]}, "t", TOKEN)
    assert program.objects() == render_config({"target": AGG})


def test_stacks_diff_shows_an_override():
    old = build_program({"serve": [{"target": DISAGG}]}, "t", TOKEN).objects()
    new = build_program(
        {"serve": [{"target": DISAGG, "overrides": {"VllmDecodeWorker": {"args": {"set": {"--max-num-seqs": "64"}}}}}]},
        "t",
        TOKEN,
    ).objects()
    lines = diff_objects({"s": old}, {"s": new})
    assert any("VllmDecodeWorker" in line or "max-num-seqs" in line for line in lines), lines
    assert any("64" in line for line in lines), lines


def test_entry_names_are_unique_and_stable():
    entries = build_entries({"serve": [{"target": AGG, "namespace": "a"}, {"target": AGG, "namespace": "b"}]})
    assert [e.name for e in entries] == ["vllm-agg-h100-dspark", "vllm-agg-h100-dspark-b"]
    with pytest.raises(ConfigError, match=r"dynamo:serve\[1\]\.name: 'x' is already the name of dynamo:serve\[0\]"):
        build_entries({"serve": [{"target": AGG, "namespace": "a", "name": "x"}, {"target": AGG, "namespace": "b", "name": "x"}]})


def test_program_registers_one_serving_per_namespace_and_a_graph_per_entry():
    run = run_program(three(), {"hfToken": "hf_serve"})
    servings = sorted(r.name for r in run.by_type("dynamo:serving:Serving"))
    graphs = sorted(r.name for r in run.by_type("dynamo:serving:DynamoGraph"))
    assert servings == ["serving-llm", "serving-motif"]
    assert len(graphs) == 3 and all(g.startswith(("serving-llm-graph-", "serving-motif-graph-")) for g in graphs)
    assert len(run.by_type("kubernetes:core/v1:PersistentVolumeClaim")) == 2
    assert len(run.by_type("kubernetes:batch/v1:Job")) == 2
    # The DGD of the entry sharing a cache waits for that cache's download.
    job = next(r for r in run.by_type("kubernetes:batch/v1:Job") if r.name.startswith("serving-llm"))
    for dgd in run.by_type("kubernetes:nvidia.com/v1beta1:DynamoGraphDeployment"):
        if dgd.name.startswith("serving-llm"):
            assert job.urn in dgd.dependencies
    assert set(run.outputs["entries"]) == {e["name"] if isinstance(e, dict) else e for e in run.outputs["entries"]}


def eks(**cluster):
    return {"mode": "eks", "region": "us-east-1", "availabilityZones": ["us-east-1a", "us-east-1b"], **cluster}


def test_eks_gpu_node_group_is_sized_from_the_sum_of_entries():
    one = build_program({"target": DISAGG, "cluster": eks()}, "t", TOKEN)
    both = build_program(
        {
            "cluster": eks(),
            "serve": [
                {"target": DISAGG, "namespace": "a"},
                {"target": DISAGG, "namespace": "b"},
                {"target": AGG, "namespace": "a", "replicas": {"agg": 8}},
            ],
        },
        "t",
        TOKEN,
    )
    n1 = one.cluster_plan.gpu_nodegroup["scaling_config"]["desired_size"]
    n_all = both.cluster_plan.gpu_nodegroup["scaling_config"]["desired_size"]
    gpus = sum(__import__("stacks.catalog", fromlist=["gpus_needed"]).gpus_needed(e.plan.dgd) for e in both.entries)
    assert n_all >= -(-gpus // 8) and n_all > n1, (n1, n_all, gpus)


def test_eks_plan_that_cannot_fit_is_refused_before_any_resource():
    raw = {
        "cluster": eks(gpuNodes=1),
        "replicas": {"VllmDecodeWorker": 4},
        "serve": [{"target": DISAGG, "namespace": "a"}, {"target": DISAGG, "namespace": "b"}],
    }
    with pytest.raises(ConfigError, match=r"dynamo:cluster.gpuNodes"):
        build_program(raw, "t", TOKEN)


# --------------------------------------------------------------------------- stack-wide optional layers on dynamo:serve


def test_serve_stack_with_observability_registers_monitors_and_dashboards():
    """A dynamo:serve stack reads dynamo:observability at its top level: one chart install, the PodMonitors of every
    entry's DGD (in its namespace, selecting its DGD), one serving dashboard offering every serving namespace."""
    import json

    from stacks.observe.observability import DGD_NAME_LABEL

    run = run_program(three(observability={"enabled": True}), {"hfToken": "hf_serveobs"}, stack="t")
    monitors = run.by_type("kubernetes:monitoring.coreos.com/v1:PodMonitor")
    got = sorted(
        (m.inputs["metadata"]["namespace"], m.inputs["spec"]["selector"]["matchLabels"][DGD_NAME_LABEL]) for m in monitors
    )
    dgds = sorted(
        (d.inputs["metadata"]["namespace"], d.inputs["metadata"]["name"])
        for d in run.by_type("kubernetes:nvidia.com/v1beta1:DynamoGraphDeployment")
    )
    assert got == sorted(dgds * 2)  # a frontend and a worker monitor per DGD
    assert len({m.name for m in monitors}) == len(monitors)
    assert run.by_type("kubernetes:helm.sh/v3:Release") == []  # the default render mode installs no chart
    boards = [
        c for c in run.by_type("kubernetes:core/v1:ConfigMap") if c.inputs["metadata"].get("labels", {}).get("grafana_dashboard")
    ]
    serving = [json.loads(v) for c in boards for k, v in c.inputs["data"].items() if k.startswith("dynamo-serving")]
    assert len(serving) == 1
    var = next(v for v in serving[0]["templating"]["list"] if v["name"] == "namespace")
    assert var["query"].split(",") == ["llm", "motif"]
    # On a cluster, one install of the charts for the whole stack.
    live = build_program(three(observability={"enabled": True}, cluster={"mode": "kubeconfig"}), "t", TOKEN | {"kubeconfig"})
    assert [c.chart for c in live.observability.charts] == ["kube-prometheus-stack"]
    assert sum(layer.startswith("observability charts") for layer in live.other_layers) == 1


def test_serve_stack_refuses_invalid_or_unbuilt_stack_wide_settings():
    with pytest.raises(ConfigError, match=r"dynamo:observability.prometheus: 'prom' is not valid"):
        build_program(three(observability={"enabled": True, "prometheus": "prom"}), "t", TOKEN)
    with pytest.raises(ConfigError, match=r"dynamo:observability.dashboards: has no effect"):
        build_program(three(observability={"dashboards": False}), "t", TOKEN)
    with pytest.raises(ConfigError, match=r"dynamo:benchmark.requestCount: .*0"):
        build_program(three(benchmark={"enabled": True, "requestCount": 0}), "t", TOKEN)
    with pytest.raises(ConfigError, match=r"dynamo:benchmark.enabled: True is not built for dynamo:serve stacks"):
        build_program(three(benchmark={"enabled": True}), "t", TOKEN)
