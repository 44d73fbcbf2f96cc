"""Each class of bad config gets a clear error naming key, value and choices, and registers no resource."""

import re

import pytest

from harness import run_program
from stacks.config.keys import ConfigError, StackConfig, parse, select_target
from stacks.program.render import render_config


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
        (
            {"gpu": "gb200", "topology": "disagg", "spec": "mtp"},
            ["dynamo:spec", "'mtp'", "GB200 disaggregated has dflash, dspark only"],
        ),
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
    from stacks.program.render import to_yaml

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


def test_model_revision_only_where_the_download_supports_it(monkeypatch):
    from dataclasses import replace

    from stacks import catalog

    fam = catalog.families()["nemotron-3.5-lightning"]
    for name, job in list(fam.cache_job_builders.items()):  # a Lightning download Job that took no revision
        monkeypatch.setitem(fam.cache_job_builders, name, replace(job, revision=None))
    # the models whose download Jobs take a revision, from the catalog's data (Lightning's now take none)
    supported = sorted(
        f.id for f in catalog.families().values() if any(getattr(b, "revision", None) for b in f.cache_job_builders.values())
    )
    assert "nemotron-3.5-lightning" not in supported and supported
    with pytest.raises(
        ConfigError, match=rf"dynamo:modelRevision: 'v1' cannot be applied.*\(supported: {re.escape(', '.join(supported))}\)"
    ):
        render_config({"modelRevision": "v1"})
    objs = render_config({"model": "nemotron-3-ultra", "gpu": "b200", "modelRevision": "a" * 40})
    download = next(o for o in objs if o["kind"] == "Job" and o["metadata"]["name"] == "nemotron-ultra-model-download")
    assert {"name": "MODEL_REVISION", "value": "a" * 40} in download["spec"]["template"]["spec"]["containers"][0]["env"]


# --------------------------------------------------------------------------- the protected cache's immutable spec: refused with a migration message

from stacks.config.keys import CACHE_SPEC_ANNOTATION, cache_claim_changes, cache_migration_error  # noqa: E402

OLD_SPEC = {"accessModes": ["ReadWriteMany"], "storageClassName": "efs-sc", "resources": {"requests": {"storage": "400Gi"}}}


@pytest.mark.parametrize(
    "new, fields",
    [
        ({**OLD_SPEC, "storageClassName": "gp3"}, ["storageClassName"]),
        ({**OLD_SPEC, "accessModes": ["ReadWriteOnce"]}, ["accessModes"]),
        ({k: v for k, v in OLD_SPEC.items() if k != "storageClassName"}, ["storageClassName"]),  # to the cluster default
        ({**OLD_SPEC, "resources": {"requests": {"storage": "200Gi"}}}, ["resources.requests.storage"]),  # claims only grow
        ({**OLD_SPEC, "storageClassName": "gp3", "resources": {"requests": {"storage": "1Ti"}}}, ["storageClassName"]),
    ],
)
def test_immutable_claim_changes_are_found(new, fields):
    assert [f for f, _, _ in cache_claim_changes(OLD_SPEC, new)] == fields


def test_allowed_claim_changes_pass():
    assert cache_claim_changes(OLD_SPEC, {**OLD_SPEC, "resources": {"requests": {"storage": "1.5Ti"}}}) == []
    assert cache_claim_changes(None, OLD_SPEC) == []  # first create
    assert cache_claim_changes(OLD_SPEC, dict(OLD_SPEC)) == []


def test_migration_message_names_key_values_and_ways_out():
    msg = cache_migration_error(
        cache_claim_changes(OLD_SPEC, {**OLD_SPEC, "storageClassName": "gp3"}), "model-cache", "dynamo-prod"
    )
    for s in (
        "dynamo:storage.className: 'efs-sc' -> 'gp3'",
        "dynamo-prod/model-cache",
        "dynamo:storage.existingClaim",
        "storage.protect false",
        "Nothing was changed",
    ):
        assert s in msg, s


def _record_requests(monkeypatch):
    import harness

    seen = {}
    original = harness.RecordingMonitor.RegisterResource

    def register(self, request):
        seen[request.name] = request
        return original(self, request)

    monkeypatch.setattr(harness.RecordingMonitor, "RegisterResource", register)
    return seen


MOCK_BASE = {
    "target": "lightning-vllm-agg-h100-dspark",
    "cluster": {"mode": "render", "renderDir": "/tmp/dynamo-mock-render"},
    "storage": {"className": "efs-sc"},
}


def test_protected_claim_ignores_immutable_fields_and_guards_updates(monkeypatch):
    seen = _record_requests(monkeypatch)
    run = run_program(MOCK_BASE, {"hfToken": "hf_x"})
    pvc = run.one("kubernetes:core/v1:PersistentVolumeClaim")
    req = seen[pvc.name]
    assert pvc.retain_on_delete is True
    assert set(req.ignoreChanges) >= {"spec.storageClassName", "spec.accessModes", "spec.volumeName", "spec.selector"}
    assert "spec.resources" not in " ".join(req.ignoreChanges)  # growing the cache stays an ordinary update
    assert list(req.hooks.before_update) == [f"{pvc.name}-claim-spec"]
    assert (
        pvc.inputs["metadata"]["annotations"][CACHE_SPEC_ANNOTATION]
        == '{"accessModes":["ReadWriteMany"],"storageClassName":"efs-sc"}'
    )


def test_unprotected_claim_is_replaced_normally(monkeypatch):
    seen = _record_requests(monkeypatch)
    run = run_program({**MOCK_BASE, "storage": {"className": "efs-sc", "protect": False}}, {"hfToken": "hf_x"})
    pvc = run.one("kubernetes:core/v1:PersistentVolumeClaim")
    assert list(seen[pvc.name].ignoreChanges) == [] and list(seen[pvc.name].hooks.before_update) == []
    assert CACHE_SPEC_ANNOTATION not in (pvc.inputs["metadata"].get("annotations") or {})


def test_claim_guard_refuses_a_changed_class_with_the_migration_message():
    from types import SimpleNamespace

    from components.serving import claim_spec_guard
    from stacks.program.render import render_config

    pvc = next(o for o in render_config({**MOCK_BASE, "storage": {"className": "gp3"}}) if o["kind"] == "PersistentVolumeClaim")
    guard = claim_spec_guard(pvc)
    with pytest.raises(ConfigError) as e:
        guard(SimpleNamespace(old_inputs={"spec": {**pvc["spec"], "storageClassName": "efs-sc"}}))
    assert "dynamo:storage.className: 'efs-sc' -> 'gp3'" in str(e.value) and "storage.existingClaim" in str(e.value)
    guard(SimpleNamespace(old_inputs={"spec": dict(pvc["spec"])}))  # same spec: the update goes ahead
    guard(SimpleNamespace(old_inputs=None))


def test_unknown_or_misplaced_secret_keys_are_refused_without_their_value():
    from stacks.config.keys import check_secret_keys

    check_secret_keys({"hfToken", "kubeconfig"})
    with pytest.raises(ConfigError, match=r"dynamo:hfTokn: set as a Pulumi secret, but is not a setting; did you mean 'hfToken'"):
        check_secret_keys({"hfToken", "hfTokn"})
    with pytest.raises(ConfigError, match=r"dynamo:namespace: set as a Pulumi secret, but is not a secret setting"):
        check_secret_keys({"namespace"})


def test_image_pull_secrets_reach_every_pod_of_every_target():
    """Ultra and Motif-3 recipes name no pull secret; dynamo:imagePullSecrets must not be ignored there."""
    import json

    from stacks import catalog
    from stacks.program.render import render_config

    for tid in sorted(catalog.targets()):
        for o in render_config({"target": tid, "imagePullSecrets": ["zz-pull"]}):
            if o["kind"] in ("Job", "DynamoGraphDeployment"):
                text = json.dumps(o)
                assert text.count('"zz-pull"') == text.count('"containers"'), (tid, o["metadata"]["name"])
        assert "zz-pull" not in json.dumps(render_config({"target": tid}))


def test_one_parse_names_every_independent_problem():
    """The cluster's sections and every serving entry are checked independently, so one `up` names all of their
    problems (a line each) instead of the first: a public VPC range, zones of another Region and an FSx size FSx
    does not make, with two entries that each name a bad value."""
    from stacks.config import parse_spec

    raw = {
        "cluster": {
            "mode": "eks",
            "region": "us-east-1",
            "vpcCidr": "8.8.0.0/16",
            "fsxStorageCapacityGib": 1000,
            "availabilityZones": ["us-west-2a", "us-east-1b"],
        },
        "serve": [{"target": "no-such-target"}, {"model": "motif-3", "gpu": "no-such-gpu"}],
    }
    with pytest.raises(ConfigError) as err:
        parse_spec(raw, "dev")
    lines = str(err.value).splitlines()
    keys = [line.strip().split(":", 2)[1] for line in lines[1:]]
    assert lines[0] == "invalid stack config:"
    assert keys == [
        "cluster.vpcCidr",
        "cluster.availabilityZones",
        "cluster.fsxStorageCapacityGib",
        "serve[0].target",
        "serve[1].gpu",
    ], lines


def test_a_section_that_reads_an_earlier_one_waits_for_it():
    """A bad Region is reported once, where it is set: the zone checks that read the Region do not run on it."""
    from stacks.config import parse_spec

    raw = {
        "cluster": {"mode": "eks", "region": "mars-east-1", "availabilityZones": ["us-west-2a", "us-west-2b"]},
        "target": "lightning-vllm-agg-h100-dspark",
    }
    with pytest.raises(ConfigError) as err:
        parse_spec(raw, "dev")
    assert "cluster.region: 'mars-east-1'" in str(err.value) and "availabilityZones" not in str(err.value)


def test_each_cluster_mode_reads_only_its_own_keys():
    """One pydantic variant per cluster mode holding its keys only: a render cluster has no region, and a key of
    another mode is refused naming the modes that read it, with every other problem of the section."""
    from stacks.config import parse_spec
    from stacks.config.stack import CLUSTER_VARIANTS, EksCluster, KubeconfigCluster, RenderCluster, StackCluster

    assert set(CLUSTER_VARIANTS) == {"render", "kubeconfig", "stack", "eks"}
    assert RenderCluster.keys() == {"renderDir"} and StackCluster.keys() == {"stack"}
    assert "region" in EksCluster.keys() and not {"region", "gpuPools"} & KubeconfigCluster.keys()
    cluster = parse_spec({"target": "lightning-vllm-agg-h100-dspark"}, "dev").cluster
    assert isinstance(cluster, RenderCluster) and not hasattr(cluster, "region")
    with pytest.raises(ConfigError) as err:
        parse_spec(
            {
                "cluster": {"mode": "kubeconfig", "region": "us-east-1", "renderDir": "out", "contxt": "a"},
                "target": "lightning-vllm-agg-h100-dspark",
            },
            "dev",
        )
    text = str(err.value)
    assert "cluster.region: 'us-east-1' has no effect with cluster.mode 'kubeconfig'; it applies to mode 'eks'" in text
    assert "cluster.renderDir: 'out' has no effect with cluster.mode 'kubeconfig'; it applies to mode 'render'" in text
    assert "cluster.contxt: unknown key" in text and "did you mean 'context'" in text
