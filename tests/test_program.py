"""`pulumi up` and `render --stack` share one builder: same verdicts, same objects."""
import pytest

from harness import run_program
from stacks.config import ConfigError
from stacks.program import build_program
from stacks.render import program_for_stack, render_stack, split_secrets, stack_raw_config, to_yaml

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
    with pytest.raises(ConfigError, match=r"none of dynamo:kubeconfig \(secret\), dynamo:cluster.kubeconfigPath, KUBECONFIG is set"):
        build_program({"cluster": {"mode": "kubeconfig"}}, "t", frozenset({"hfToken"}), env={})


def test_split_secrets_reads_secure_values_as_secret_keys():
    plain, secret = split_secrets({"hfToken": {"secure": "v1:abc"}, "gpu": "h100"})
    assert plain == {"gpu": "h100"} and secret == {"hfToken"}


@pytest.mark.parametrize("stack", ["h100-disagg", "b200-disagg", "dev", "ultra-b200-agg"])
def test_render_stack_is_what_up_registers(stack, tmp_path, monkeypatch):
    """The objects `render --stack` prints are the serving objects the program registers, field for field
    (EKS stacks included: storage class and the download Job's nodeSelector)."""
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
    rendered = {(o["kind"], o["metadata"]["name"]): o for o in render_stack(stack)}
    registered = {}
    for r in run.resources:
        if r.type.startswith("kubernetes:") and r.inputs.get("metadata", {}).get("namespace") == plain.get("namespace", "dynamo"):
            registered[(r.inputs["kind"], r.inputs["metadata"]["name"])] = r.inputs
    assert set(rendered) - {("Namespace", plain.get("namespace", "dynamo"))} <= set(registered)
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
    assert "serving layer only" in err and "EKS cluster" in err
    assert main(["render", "--stack", "dev"]) == 0
    assert "serving layer only" not in capsys.readouterr().err


def test_render_never_prints_the_token_value():
    text = to_yaml(render_stack("dev"))
    assert "secure" not in text and program_for_stack("dev").serving.hf_secret["stringData"]["HF_TOKEN"].startswith("<redacted")
