"""Mock tests (pulumi.runtime.set_mocks) pinning the serving wiring."""

import pytest

from harness import plain_occurrences, run_program

CANARY = "hf_CANARY_5f0c9e1d7a"
BASE = {"target": "lightning-vllm-disagg-h100-dspark", "cluster": {"mode": "render", "renderDir": "/tmp/dynamo-mock-render"}}


@pytest.fixture(scope="module")
def run():
    return run_program(BASE, {"hfToken": CANARY})


def test_every_child_has_its_component_parent(run):
    comps = {r.urn: r for r in run.resources if r.type.startswith("dynamo:serving:")}
    serving = run.one("dynamo:serving:Serving")
    for r in run.resources:
        if r.type.startswith("dynamo:serving:") and r is not serving:
            assert r.parent == serving.urn, r.name
        elif r.type.startswith("kubernetes:") and r.type != "pulumi:providers:kubernetes":
            assert r.parent in comps, f"{r.type} {r.name} parent {r.parent}"


def test_type_tokens_follow_dynamo_module_type():
    run = run_program(BASE, {"hfToken": CANARY})
    tokens = {r.type for r in run.resources if r.type.startswith("dynamo:")}
    assert tokens == {
        "dynamo:serving:Serving",
        "dynamo:serving:Namespace",
        "dynamo:serving:HfTokenSecret",
        "dynamo:serving:ModelCache",
        "dynamo:serving:ModelDownload",
        "dynamo:serving:DynamoGraph",
    }


def test_dgd_depends_on_download_job_and_configmap(run):
    dgd = run.one("kubernetes:nvidia.com/v1beta1:DynamoGraphDeployment")
    job = run.one("kubernetes:batch/v1:Job")
    cm = run.one("kubernetes:core/v1:ConfigMap")
    assert job.urn in dgd.dependencies
    assert cm.urn in dgd.dependencies


def test_download_job_waits_for_pvc_and_secret(run):
    job = run.one("kubernetes:batch/v1:Job")
    assert run.urn_of("kubernetes:core/v1:PersistentVolumeClaim") in job.dependencies
    assert run.urn_of("kubernetes:core/v1:Secret") in job.dependencies


def test_cache_pvc_is_retained_on_destroy_by_default(run):
    assert run.one("kubernetes:core/v1:PersistentVolumeClaim").retain_on_delete is True
    # deleting the namespace would delete the PVC in it, so it is kept too
    assert run.one("kubernetes:core/v1:Namespace").retain_on_delete is True


def test_cache_pvc_opt_out_removes_it_on_destroy():
    r = run_program({**BASE, "storage": {"protect": False}}, {"hfToken": CANARY})
    assert r.one("kubernetes:core/v1:PersistentVolumeClaim").retain_on_delete is False
    assert r.one("kubernetes:core/v1:Namespace").retain_on_delete is False


def test_hf_token_never_plain_in_registered_inputs(run):
    secret = run.one("kubernetes:core/v1:Secret")
    for r in run.resources:
        assert plain_occurrences(r.raw_inputs, CANARY) == [], r.name
    assert "stringData" in secret.additional_secret_outputs


def test_hf_token_never_in_stack_outputs(run):
    assert run.outputs, "the program exports next steps"
    for raw in run.raw_outputs:
        assert CANARY not in str(raw)


def test_existing_secret_name_creates_no_secret_and_is_referenced():
    r = run_program({**BASE, "hfTokenSecretName": "team-hf", "createNamespace": False})
    assert r.by_type("kubernetes:core/v1:Secret") == []
    job = r.one("kubernetes:batch/v1:Job")
    assert job.inputs["spec"]["template"]["spec"]["containers"][0]["envFrom"] == [{"secretRef": {"name": "team-hf"}}]


def test_second_run_registers_identical_inputs(run):
    again = run_program(BASE, {"hfToken": CANARY})
    first = {(r.type, r.name): r.inputs for r in run.resources}
    second = {(r.type, r.name): r.inputs for r in again.resources}
    assert first == second


def test_outputs_say_what_to_do_next(run):
    o = run.outputs
    assert o["portForward"] == "kubectl -n dynamo port-forward svc/vllm-disagg-h100-dspark-frontend 8000:8000"
    assert "--concurrency 24" in o["aiperf"]
    assert o["gpusNeeded"] == 2
    assert o["expectedPerf"]["ttftP50Ms"] == 2028.23


def test_render_mode_never_writes_the_token_to_disk():
    r = run_program({**BASE}, {"hfToken": CANARY})  # BASE renders to a directory
    secret = r.one("kubernetes:core/v1:Secret")
    assert CANARY not in str(secret.raw_inputs)
    # rendered without its data: a placeholder would still make the render provider warn of a plaintext secret
    assert not secret.inputs.get("stringData") and not secret.inputs.get("data"), secret.inputs


def test_cluster_mode_sends_the_token_as_a_secret(tmp_path, monkeypatch):
    kc = tmp_path / "kubeconfig"
    kc.write_text("apiVersion: v1\nkind: Config\nclusters: []\ncontexts: []\nusers: []\n")
    monkeypatch.setenv("KUBECONFIG", str(kc))
    r = run_program({**BASE, "cluster": {"mode": "kubeconfig"}}, {"hfToken": CANARY})
    secret = r.one("kubernetes:core/v1:Secret")
    assert secret.inputs["stringData"]["HF_TOKEN"] == CANARY
    for res in r.resources:
        assert plain_occurrences(res.raw_inputs, CANARY) == [], res.name


def test_each_namespace_creates_its_pull_secrets_and_its_dgds_wait_for_them():
    """On a cluster stack's cluster, the Serving of each namespace creates that namespace's image pull Secret after the
    namespace, and only its own DGDs wait for it. The Secrets stay top-level resources (parent: the stack), each named by
    its namespace and name (stacks/program/names.py; the first namespace's earlier name is an alias)."""
    cfg = {
        "cluster": {"mode": "stack", "stack": "org/dynamo/h100-cluster"},
        "imagePullSecrets": ["ngc-secret"],
        "serve": [
            {"target": "lightning-vllm-agg-h100-dspark", "namespace": "first"},
            {"target": "lightning-vllm-agg-h100-dspark", "namespace": "second"},
        ],
    }
    run = run_program(cfg, {"hfToken": CANARY, "ngcApiKey": "nvapi-mock"}, stack="serving")
    pulls = {
        r.inputs["metadata"]["namespace"]: r
        for r in run.by_type("kubernetes:core/v1:Secret")
        if r.inputs["metadata"]["name"] == "ngc-secret"
    }
    assert {ns: r.name for ns, r in pulls.items()} == {
        "first": "pull-secret-first-ngc-secret",
        "second": "pull-secret-second-ngc-secret",
    }
    assert {r.parent.rpartition("::")[0].rpartition("::")[2] for r in pulls.values()} == {"pulumi:pulumi:Stack"}, [
        r.parent for r in pulls.values()
    ]
    namespaces = {r.inputs["metadata"]["name"]: r.urn for r in run.by_type("kubernetes:core/v1:Namespace")}
    assert all(namespaces[ns] in r.dependencies for ns, r in pulls.items())
    dgds = {r.inputs["metadata"]["namespace"]: r for r in run.by_type("kubernetes:nvidia.com/v1beta1:DynamoGraphDeployment")}
    assert set(dgds) == {"first", "second"}
    for ns, dgd in dgds.items():
        other = "second" if ns == "first" else "first"
        assert pulls[ns].urn in dgd.dependencies and pulls[other].urn not in dgd.dependencies


def test_printed_commands_reach_the_stack_own_cluster(tmp_path):
    """The local stack names its own kubeconfig (cluster.kubeconfigPath in Pulumi.local.yaml), which is not the user's:
    every kubectl command the program prints and exports carries it, so each works as printed."""
    from pathlib import Path

    import yaml

    raw = yaml.safe_load((Path(__file__).resolve().parent.parent / "Pulumi.local.yaml").read_text())["config"]
    config = {k.split(":", 1)[1]: v for k, v in raw.items() if k.startswith("dynamo:")}
    kubeconfig = tmp_path / "kubeconfig"
    kubeconfig.write_text("apiVersion: v1\nkind: Config\nclusters: []\ncontexts: []\nusers: []\n")
    config["cluster"] = {**config["cluster"], "kubeconfigPath": str(kubeconfig)}
    r = run_program(config)
    commands = {k: v for k, v in r.outputs.items() if isinstance(v, str) and v.startswith("kubectl")}
    assert {"portForward", "followDownload", "watchDgd"} <= set(commands), r.outputs
    for key, command in commands.items():
        assert command.startswith(f"kubectl --kubeconfig {kubeconfig} "), (key, command)
