"""`pulumi up` and `render --stack` share one builder: same verdicts, same objects."""

import pytest

from harness import run_program
from stacks.config.keys import ConfigError
from stacks.program import build_program
from stacks.program.render import program_for_stack, render_stack, split_secrets, stack_raw_config, to_yaml

TOKEN = {"hfToken": "hf_program_test"}


@pytest.mark.parametrize("render_dir", ["", "   "])
def test_render_stack_needs_a_render_dir(render_dir):
    raw = {"cluster": {"mode": "render", "renderDir": render_dir}}
    with pytest.raises(ConfigError, match=r"dynamo:cluster.renderDir: .* is empty"):
        build_program(raw, "t", frozenset({"hfToken"}))
    with pytest.raises(Exception, match="renderDir"):
        run_program(raw, TOKEN)
    from harness import LAST_RUN

    assert LAST_RUN.resources == []


def test_plain_text_token_refused_everywhere():
    with pytest.raises(ConfigError, match=r"dynamo:hfToken: is set in plain text; it must be a Pulumi secret"):
        build_program({"hfToken": "hf_plain"}, "t", frozenset())
    with pytest.raises(Exception) as e:
        run_program({"hfToken": "hf_plain"})
    assert "plain text" in str(e.value) and "hf_plain" not in str(e.value)


def test_token_and_secret_name_together_refused():
    with pytest.raises(ConfigError, match=r"dynamo:hfTokenSecretName: 'mine' together with the secret dynamo:hfToken"):
        build_program({"hfTokenSecretName": "mine"}, "t", frozenset({"hfToken"}))


def test_missing_token_is_a_deploy_error_not_a_review_error():
    # A committed stack may leave the token to the environment that deploys it: review renders it,
    # `up` (env given) refuses it before any resource.
    assert build_program({}, "t", frozenset(), env=None).objects()
    with pytest.raises(ConfigError, match=r"dynamo:hfToken is not set"):
        build_program({}, "t", frozenset(), env={})


def test_kubeconfig_path_missing_file_is_a_config_error(tmp_path):
    raw = {"cluster": {"mode": "kubeconfig", "kubeconfigPath": str(tmp_path / "nope")}}
    with pytest.raises(ConfigError, match=r"dynamo:cluster.kubeconfigPath: .*nope' is not a readable file"):
        build_program(raw, "t", frozenset({"hfToken"}), env={})
    with pytest.raises(
        ConfigError, match=r"none of dynamo:kubeconfig \(secret\), dynamo:cluster.kubeconfigPath, KUBECONFIG is set"
    ):
        build_program({"cluster": {"mode": "kubeconfig"}}, "t", frozenset({"hfToken"}), env={})


def test_split_secrets_reads_secure_values_as_secret_keys():
    plain, secret = split_secrets({"hfToken": {"secure": "v1:abc"}, "gpu": "h100"})
    assert plain == {"gpu": "h100"} and secret == {"hfToken"}


@pytest.mark.parametrize("stack", ["h100-disagg", "b200-disagg", "dev", "ultra-b200-agg"])
def test_render_stack_is_what_up_registers(stack, tmp_path, monkeypatch):
    """The objects `render --stack` prints are objects the program registers, field for field (EKS stacks included:
    storage class and the download Job's nodeSelector; the layers' objects, such as the device plugins, too)."""
    kubeconfig = tmp_path / "kubeconfig"
    kubeconfig.write_text("apiVersion: v1\nkind: Config\n")
    monkeypatch.setenv("KUBECONFIG", str(kubeconfig))
    plain, secret = split_secrets(stack_raw_config(stack))
    secrets = {k: "s3cret" for k in secret}
    if "hfTokenSecretName" not in plain:
        secrets.update(TOKEN)
    if (plain.get("cluster") or {}).get("mode") == "eks" and plain.get("imagePullSecrets"):
        secrets.setdefault("ngcApiKey", "nvapi-s3cret")  # an EKS stack creates its pull secret from this secret
    run = run_program(plain, secrets, stack=stack)
    rendered = {(o["kind"], o["metadata"].get("namespace"), o["metadata"]["name"]): o for o in render_stack(stack)}
    registered = {}
    for r in run.resources:
        if r.type.startswith("kubernetes:") and "kind" in r.inputs:
            md = r.inputs.get("metadata", {})
            registered[(r.inputs["kind"], md.get("namespace"), md.get("name"))] = r.inputs
    assert set(rendered) <= set(registered)
    for key, obj in rendered.items():
        if key not in registered or key[0] == "Secret":
            continue
        got = registered[key]
        for field in ("spec", "data"):
            if field in obj:
                assert got.get(field) == obj[field], f"{key} {field} differs between render and up"


def test_render_stack_of_eks_stack_has_cluster_settings():
    objs = {o["kind"]: o for o in render_stack("h100-disagg")}
    assert objs["PersistentVolumeClaim"]["spec"]["storageClassName"]
    assert objs["Job"]["spec"]["template"]["spec"]["nodeSelector"] == {"dynamo.nvidia.com/pool": "system"}


def test_render_stack_says_serving_layer_only(capsys):
    from stacks.__main__ import main

    assert main(["render", "--stack", "h100-disagg"]) == 0
    err = capsys.readouterr().err
    # the device plugins and the Dynamo platform are layers: their objects are printed, their charts named
    assert "serving layer and device plugins and Dynamo platform objects" in err and "EKS cluster" in err
    assert "nvidia-device-plugin" in err and "dynamo-platform" in err
    assert main(["render", "--stack", "dev"]) == 0
    assert "serving layer only" not in capsys.readouterr().err


def test_render_writes_what_pyyamls_own_emitter_writes():
    """The libyaml emitter render uses writes, byte for byte, what yaml.SafeDumper's pure Python emitter writes with the
    same representers, for every catalog target and every committed stack (the goldens and reviews compare this text)."""
    import yaml

    from stacks import catalog
    from stacks.program import render
    from stacks.program.render import render_target
    from stacks.registry import yaml_text

    class Pure(yaml.SafeDumper):
        pass

    Pure.add_representer(str, yaml_text._str)
    assert yaml_text._Dumper.__mro__[1] is yaml.CSafeDumper  # this machine's PyYAML has libyaml: the fast path is the one tested
    stacks = sorted(p.name[len("Pulumi.") : -len(".yaml")] for p in render.REPO_ROOT.glob("Pulumi.*.yaml"))
    renders = [render_target(t) for t in sorted(catalog.targets())] + [render_stack(s) for s in stacks]
    assert len(renders) > len(catalog.targets())
    # and the shapes no target has today: a dict and a list appearing twice (anchors), floats, empty containers,
    # strings YAML would read as another type, a non-str key, a tuple
    shared, items = {"a": 1}, [1, "2"]
    odd = [
        {
            "x": shared,
            "y": shared,
            "l": items,
            "m": items,
            "f": 0.5,
            "g": 1e20,
            "n": float("nan"),
            "e": {},
            "s": [],
            "t": "true",
            "z": "",
            "i": "123",
            "nl": "a\nb\n",
            5: None,
            "tu": (1, 2),
            "b": False,
        }
    ]
    for objs in renders + [odd]:
        pure = yaml.dump_all(list(objs), Dumper=Pure, sort_keys=False, width=4096, default_flow_style=False)
        assert to_yaml(objs) == pure


def test_render_never_prints_the_token_value():
    text = to_yaml(render_stack("dev"))
    assert "secure" not in text and program_for_stack("dev").serving.hf_secret["stringData"]["HF_TOKEN"].startswith("<redacted")


# --------------------------------------------------------------------------- `up` and `render` read the stack file alike
# `up` gets its config from the Pulumi CLI (Go, YAML 1.2 scalars, duplicate keys refused; a top-level YAML null or ''
# arrives as ""); `render --stack` reads the file with stacks/program/stack_yaml.py to the same effect (tests/test_stack_yaml.py
# holds the comparison with the real CLI).


def _write(tmp_path, text: str):
    (tmp_path / "Pulumi.t.yaml").write_text(text)
    return tmp_path


def test_duplicate_key_in_a_stack_file_is_refused_by_render(tmp_path):
    root = _write(
        tmp_path,
        "config:\n  dynamo:serve:\n    - target: lightning-vllm-agg-h100-dspark\n      namespace: a\n      namespace: b\n",
    )
    with pytest.raises(ConfigError, match=r"Pulumi.t.yaml is not valid YAML: mapping key 'namespace' is given twice"):
        program_for_stack("t", root)
    root = _write(tmp_path, "config:\n  dynamo:gpu: h100\n  dynamo:gpu: h200\n")
    with pytest.raises(ConfigError, match=r"mapping key 'dynamo:gpu' is given twice"):
        program_for_stack("t", root)


@pytest.mark.parametrize("word", ["yes", "no", "on", "off", "y", "n"])
def test_yaml_1_1_booleans_are_strings_on_both_paths(word, tmp_path):
    """YAML 1.2 has only true/false: `namespace: yes` is the namespace 'yes' for `up` and for render alike."""
    root = _write(
        tmp_path,
        f"config:\n  dynamo:target: lightning-vllm-agg-h100-dspark\n  dynamo:namespace: {word}\n"
        "  dynamo:hfToken:\n    secure: v1:AAAA\n",
    )
    rendered = program_for_stack("t", root)
    assert rendered.entries[0].plan.dgd["metadata"]["namespace"] == word
    up = run_program({"target": "lightning-vllm-agg-h100-dspark", "namespace": word}, TOKEN, stack="t")
    assert up.one("kubernetes:core/v1:Namespace").inputs["metadata"]["name"] == word
    nested = _write(tmp_path, f"config:\n  dynamo:target: lightning-vllm-agg-h100-dspark\n  dynamo:wait:\n    enabled: {word}\n")
    with pytest.raises(ConfigError, match=rf"dynamo:wait.enabled: .*'{word}'"):
        program_for_stack("t", nested)


@pytest.mark.parametrize("empty", ["", "''", "null", "~"])
def test_an_empty_top_level_value_is_refused_on_both_paths(empty, tmp_path):
    """`gpu:` (null) and `gpu: ''` arrive at `up` as "" from the CLI: both paths refuse them, naming every such key,
    rather than silently taking the default."""
    root = _write(
        tmp_path,
        f"config:\n  dynamo:target: lightning-vllm-agg-h100-dspark\n  dynamo:gpu: {empty}\n  dynamo:namespace: {empty}\n",
    )
    want = (
        r"dynamo:gpu: the value is empty, which would silently take the default; dynamo:namespace: the value is empty.*"
        r"pulumi config rm dynamo:gpu"
    )
    with pytest.raises(ConfigError, match=want):
        program_for_stack("t", root)
    with pytest.raises(Exception, match=want):
        run_program({"target": "lightning-vllm-agg-h100-dspark", "gpu": "", "namespace": ""}, TOKEN, stack="t")


def test_misspelt_project_prefix_is_refused_on_both_paths(tmp_path):
    from pulumi.runtime import config as rc

    from stacks.config.pulumi_config import raw_config

    root = _write(
        tmp_path, "config:\n  dynamo:target: lightning-vllm-agg-h100-dspark\n  dyanmo:gpu: h100\n  aws:region: us-east-1\n"
    )
    with pytest.raises(ConfigError, match=r"dyanmo:gpu: 'dyanmo' is not this project's config namespace.*'dynamo:gpu'"):
        program_for_stack("t", root)
    rc.set_all_config({"dynamo:target": "lightning-vllm-agg-h100-dspark", "dyanmo:gpu": "h100", "aws:region": "us-east-1"}, [])
    try:
        with pytest.raises(ConfigError, match=r"dyanmo:gpu: 'dyanmo' is not this project's config namespace"):
            raw_config()
        rc.set_all_config({"dynamo:target": "x", "aws:region": "us-east-1", "kubernetes:context": "c"}, [])
        assert raw_config() == {"target": "x"}  # other programs' namespaces are not ours, and not refused
    finally:
        rc.set_all_config({}, [])


# --------------------------------------------------------------------------- what `pulumi destroy` keeps


def test_destroy_report_lists_what_the_program_registers_with_retain_on_delete():
    """The report (python -m stacks destroy-report) and the wiring agree: every Kubernetes object the real program
    registers with retainOnDelete is in the report with a delete command, and nothing else is."""
    from stacks.program import retained_after_destroy

    raw = {"serve": [{"target": "lightning-vllm-agg-h100-dspark", "namespace": "a"}, {"model": "motif-3", "namespace": "b"}]}
    run = run_program(raw, TOKEN, stack="t")
    kept = sorted(
        (
            r.type.split(":")[-1],
            (r.inputs["metadata"].get("namespace", "") + "/" if r.inputs["metadata"].get("namespace") else "")
            + r.inputs["metadata"]["name"],
        )
        for r in run.resources
        if r.retain_on_delete and r.type.startswith("kubernetes:")
    )
    report = retained_after_destroy(build_program(raw, "t", frozenset({"hfToken"})))
    assert sorted((i["kind"], i["name"]) for i in report) == kept
    assert kept and all(i["delete"].startswith("kubectl delete") and i["why"] and i["adopt"] for i in report)


def test_destroy_report_of_the_local_stack_and_of_an_unprotected_one(capsys):
    from stacks.__main__ import main
    from stacks.program import retained_report

    assert main(["destroy-report", "--stack", "local"]) == 0
    out = capsys.readouterr().out
    assert "keeps" in out and "kubectl delete pvc shared-model-cache -n dynamo-local" in out
    assert "Namespace dynamo-local" not in out  # the local stack's namespace is made by `make local-up`, not by the stack
    own = build_program({"target": "lightning-vllm-agg-h100-dspark"}, "t", frozenset({"hfToken"}))
    assert "Namespace dynamo" in retained_report(own)  # a namespace the stack creates is kept with its cache claim
    off = build_program({"target": "lightning-vllm-agg-h100-dspark", "storage": {"protect": False}}, "t", frozenset({"hfToken"}))
    assert "keeps nothing" in retained_report(off)


def test_destroy_report_names_a_kept_fsx_file_system_and_its_network():
    from stacks.program import retained_after_destroy

    raw = {"gpu": "h100", "topology": "agg", "cluster": {"mode": "eks", "region": "us-east-1", "cacheStorage": "fsx-lustre"}}
    kinds = [i["kind"] for i in retained_after_destroy(build_program(raw, "t", frozenset({"hfToken"})))]
    assert "FSx for Lustre file system" in kinds and "VPC, subnet and security group of the file system" in kinds


def test_render_says_what_it_did_not_check(capsys):
    """Checks only `up` can make (secret values, the kubeconfig file, the live cluster's storage classes) are named
    on render's stderr, so a clean render is not read as a passed deploy check."""
    from stacks.__main__ import main

    assert main(["render", "--stack", "local"]) == 0
    err = capsys.readouterr().err
    assert "not checked by render" in err and "kubeconfig file" in err and "storage class" in err


# --------------------------------------------------------------------------- one parse, at the edge
@pytest.mark.parametrize(
    "cluster, kind",
    [
        ({"mode": "render"}, "RenderCluster"),
        ({}, "RenderCluster"),
        ({"mode": "kubeconfig", "context": "kind-x"}, "KubeconfigCluster"),
        ({"mode": "stack", "stack": "org/dynamo/h100-cluster"}, "StackCluster"),
        ({"mode": "eks", "region": "us-east-1"}, "EksCluster"),
    ],
)
def test_the_cluster_source_is_its_modes_variant(cluster, kind):
    """The spec's cluster source is the variant of the configured mode, and the plan keeps the spec it was built from."""
    from stacks.config import parse_spec

    raw = {"target": "lightning-vllm-agg-h100-dspark", "cluster": cluster}
    spec = parse_spec(raw, "t", frozenset({"hfToken"}))
    assert type(spec.cluster).__name__ == kind and spec.cluster.mode == (cluster.get("mode") or "render")
    assert [e.key for e in spec.entries] == ["dynamo"] and spec.entries[0].config.target == "lightning-vllm-agg-h100-dspark"
    program = build_program(raw, "t", frozenset({"hfToken"}))
    assert program.spec == spec and type(program.cluster).__name__ == kind


def test_serve_entries_are_typed_with_the_stack_defaults_and_stack_sections():
    from stacks.config import parse_spec

    raw = {
        "namespace": "shared",
        "serve": [
            {"target": "lightning-vllm-agg-h100-dspark", "name": "a"},
            {"target": "lightning-vllm-agg-h100-dspark", "namespace": "b"},
        ],
        "observability": {"enabled": True},
    }
    spec = parse_spec(raw, "t", frozenset({"hfToken"}))
    assert [(e.key, e.name, e.named, e.config.namespace) for e in spec.entries] == [
        ("dynamo:serve[0]", "a", True, "shared"),
        ("dynamo:serve[1]", None, False, "b"),
    ]
    assert spec.multi and spec.observability.enabled and not spec.benchmark.enabled


def test_up_and_render_stack_go_through_the_same_parse(monkeypatch, tmp_path):
    """`pulumi up` (__main__.py) and `render --stack` both call stacks.config.parse_spec once, and build from what it
    returns: a parse that refuses everything stops both before any resource."""
    import stacks.program

    calls = []
    real = stacks.program.parse_spec

    def recording(raw, stack, *a, **kw):
        calls.append(stack)
        return real(raw, stack, *a, **kw)

    monkeypatch.setattr(stacks.program, "parse_spec", recording)
    program_for_stack("dev")
    run_program({"target": "lightning-vllm-agg-h100-dspark"}, TOKEN, stack="up")
    assert calls == ["dev", "up"]

    def refuse(raw, stack, *a, **kw):
        raise ConfigError("dynamo:target: refused by the parse")

    monkeypatch.setattr(stacks.program, "parse_spec", refuse)
    with pytest.raises(ConfigError, match="refused by the parse"):
        program_for_stack("dev")
    with pytest.raises(Exception, match="refused by the parse"):
        run_program({"target": "lightning-vllm-agg-h100-dspark"}, TOKEN)
    import harness

    assert harness.LAST_RUN.resources == []
