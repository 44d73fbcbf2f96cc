"""Each class of bad config gets a clear error naming key, value and choices, and registers no resource."""
import pytest

from harness import run_program
from stacks.config import ConfigError, StackConfig, parse, select_target
from stacks.render import render_config


@pytest.mark.parametrize(
    "raw, must_contain",
    [
        ({"gpu": "a100"}, ["dynamo:gpu", "'a100'", "h100", "gb200"]),
        ({"spec": "eagle"}, ["dynamo:spec", "'eagle'", "dspark"]),
        ({"modle": "x"}, ["dynamo:modle", "unknown key"]),
        ({"storage": {"size": "lots"}}, ["dynamo:storage.size", "'lots'"]),
        ({"storage": {"clas": "efs"}}, ["dynamo:storage.clas", "unknown key"]),
        ({"namespace": "Bad_NS"}, ["dynamo:namespace", "Bad_NS"]),
        ({"target": "nope"}, ["dynamo:target", "'nope'", "lightning-vllm-agg-h100-dspark"]),
        ({"runtime": "trtllm", "topology": "disagg"}, ["dynamo:topology", "'disagg'", "TensorRT-LLM is aggregated-only", "agg"]),
        ({"gpu": "gb200", "topology": "disagg", "spec": "mtp"}, ["dynamo:spec", "'mtp'", "GB200 disaggregated has dflash, dspark only"]),
        ({"gpu": "h100", "routing": "kv", "spec": "mtp"}, ["dynamo:routing", "'kv'", "qualified choices: single"]),
        ({"target": "lightning-vllm-agg-h100-dspark", "gpu": "h200"}, ["dynamo:gpu", "contradicts"]),
        ({"replicas": {"agg": -1}}, ["dynamo:replicas", "-1"]),
    ],
)
def test_bad_config_message(raw, must_contain):
    with pytest.raises(ConfigError) as e:
        render_config(raw)
    for s in must_contain:
        assert s in str(e.value), f"{s!r} not in: {e.value}"


def test_unknown_component_override_lists_components():
    with pytest.raises(ConfigError) as e:
        render_config({"target": "lightning-vllm-agg-h100-dspark", "replicas": {"Decode": 2}})
    assert "'Decode'" in str(e.value) and "Frontend, agg" in str(e.value)


def test_bad_duration():
    with pytest.raises(ConfigError, match=r"dynamo:wait.jobTimeout: .*'soon'"):
        render_config({"wait": {"jobTimeout": "soon"}})


@pytest.mark.parametrize(
    "raw",
    [
        {"gpu": "a100"},
        {"runtime": "trtllm", "topology": "disagg"},
        {"storage": {"size": "x"}},
        {"cluster": {"mode": "eks", "marketType": "capacity-block"}},
        {"gpu": "b200", "topology": "disagg", "cluster": {"mode": "eks"}},  # InfiniBand recipe on EKS without the EFA profile
        {"fabricProfile": "aws-efa"},  # profile on an aggregated target
    ],
)
def test_program_registers_nothing_on_bad_config(raw):
    import harness

    with pytest.raises(Exception) as e:
        run_program(raw, {"hfToken": "hf_x"})
    assert "dynamo:" in str(e.value)
    assert harness.LAST_RUN.resources == []


def test_registers_nothing_when_token_missing():
    import harness

    with pytest.raises(Exception) as e:
        run_program({"target": "lightning-vllm-agg-h100-dspark"})
    assert "dynamo:hfToken" in str(e.value)
    assert harness.LAST_RUN.resources == []


def test_renders_never_carry_the_token():
    from stacks.render import to_yaml

    text = to_yaml(render_config({"target": "lightning-vllm-agg-h100-dspark", "hfToken": "hf_CANARY_render_77"}))
    assert "hf_CANARY_render_77" not in text
    assert "<redacted: Pulumi secret>" in text


def test_defaults_pick_the_promoted_dspark_recipe_per_gpu():
    picks = {g: select_target(StackConfig(gpu=g)).id for g in ("h100", "h200", "b200", "gb200")}
    assert picks == {
        "h100": "lightning-vllm-agg-h100-dspark",
        "h200": "lightning-vllm-agg-h200-dspark",
        "b200": "lightning-vllm-agg-b200-dspark-bf16",
        "gb200": "lightning-vllm-agg-gb200-dspark-bf16",
    }


def test_every_target_reachable_by_its_axes():
    from stacks import catalog
    from stacks.catalog.model import SELECT_ORDER

    for t in catalog.targets().values():
        raw = {a: t.axis(a) for a in SELECT_ORDER if t.axis(a) is not None}
        assert select_target(parse(raw)).id == t.id


def test_model_revision_only_where_the_download_supports_it():
    with pytest.raises(ConfigError, match=r"dynamo:modelRevision: 'v1' cannot be applied.*nemotron-3-ultra"):
        render_config({"modelRevision": "v1"})
    objs = render_config({"model": "nemotron-3-ultra", "gpu": "b200", "modelRevision": "a" * 40})
    download = next(o for o in objs if o["kind"] == "Job" and o["metadata"]["name"] == "nemotron-ultra-model-download")
    assert {"name": "MODEL_REVISION", "value": "a" * 40} in download["spec"]["template"]["spec"]["containers"][0]["env"]
