"""Engine tests: the real Pulumi engine (Automation API) against a real local kube-apiserver.

They need the pinned toolchain (`tools/toolchain.sh`) and the local control plane
(`tools/kube-local.sh`); `make test` provides both. Readiness waits are off through the
one switch `dynamo:wait.enabled: false` (no nodes or controllers run pods here).
"""

from __future__ import annotations

import copy
import functools
import json
import re
import shutil
import subprocess
from pathlib import Path

import pytest

from local_cluster import chart_repo, control_plane
import lazy_results  # noqa: F401  (the Automation API's results, fetched when read)
from stacks.cli import fidelity
from stacks.config.keys import parse, select_target
from stacks.program.render import render_config
from stacks.registry import yaml_text

ROOT = Path(__file__).resolve().parent.parent
TOKEN = "hf_ENGINE_CANARY_9d1e"

pytestmark = pytest.mark.engine

TARGETS = [
    "lightning-vllm-agg-h100-dspark",  # Lightning aggregated
    "lightning-vllm-disagg-h100-dspark",  # disaggregated over AWS EFA
    "lightning-vllm-disagg-h200-dspark",  # disaggregated over InfiniBand
    "lightning-trtllm-agg-h100-mtp",  # TensorRT-LLM
    "ultra-vllm-agg-b200-agentic-256k-2w-kv",  # Nemotron-3-Ultra
    "motif3-vllm-disagg-b200-chat-generic-2p1d-kv",  # Motif-3
]


def _need(tool: str) -> str:
    path = shutil.which(tool)
    if not path:
        pytest.skip(f"{tool} not on PATH: run `make test` (it builds the pinned toolchain) or tools/toolchain.sh")
    return path


@pytest.fixture(scope="session")
def kube(tmp_path_factory):
    """Start the local control plane for this test session and stop it afterwards."""
    _need("pulumi")
    _need("kubectl")
    state = tmp_path_factory.mktemp("kube")
    with control_plane(state, quiet=False) as env:
        yield {"kubeconfig": str(state / "kubeconfig"), "env": env}


def kubectl(kube, *args, check=True, input=None) -> subprocess.CompletedProcess:
    return subprocess.run(
        ["kubectl", "--kubeconfig", kube["kubeconfig"], *args], capture_output=True, text=True, check=check, input=input
    )


def project_copy(tmp_path_factory, name: str = "project") -> dict:
    """A copy of the project (sharing its .venv) so stack files land outside the repository, with its own state backend."""
    work = tmp_path_factory.mktemp(name)
    for f in ("Pulumi.yaml", "__main__.py", "pyproject.toml"):
        shutil.copy(ROOT / f, work / f)
    for d in ("components", "stacks"):
        shutil.copytree(ROOT / d, work / d, ignore=shutil.ignore_patterns("__pycache__"))
    (work / ".venv").symlink_to(ROOT / ".venv")
    backend = tmp_path_factory.mktemp(f"state-{name}")
    return {"dir": work, "backend": backend}


@pytest.fixture(scope="session")
def workspace(tmp_path_factory):
    return project_copy(tmp_path_factory)


@functools.cache
def pulumi_command():
    """One Automation API command object per test process: each new one runs `pulumi version` (0.2 s of CPU here)."""
    from pulumi import automation as auto

    return auto.PulumiCommand()


def new_stack(work_dir, name: str, env: dict):
    """A stack on the test process's key service (tests/transit_keeper.py: no passphrase key derivation per CLI run).
    Created first (a test's stack is new), selected only when it exists: ``create_or_select_stack`` runs a failing
    `pulumi stack select` before every create."""
    from pulumi import automation as auto

    import transit_keeper

    ws = auto.LocalWorkspaceOptions(
        work_dir=str(work_dir),
        env_vars={**env, **transit_keeper.env()},
        secrets_provider=transit_keeper.SECRETS_PROVIDER,
        pulumi_command=pulumi_command(),
    )
    try:
        return auto.create_stack(stack_name=name, work_dir=str(work_dir), opts=ws)
    except auto.StackAlreadyExistsError:
        return auto.select_stack(stack_name=name, work_dir=str(work_dir), opts=ws)


def make_stack(workspace, name: str, config: dict):
    env = {
        "PULUMI_BACKEND_URL": f"file://{workspace['backend']}",
        "PULUMI_SKIP_UPDATE_CHECK": "true",
        "PULUMI_DISABLE_AUTOMATIC_PLUGIN_ACQUISITION": "true",
        "DYNAMO_REFERENCE": str(fidelity.reference_root()),  # $DYNAMO_REFERENCE, else ../shared/reference
    }
    stack = new_stack(workspace["dir"], name, env)
    set_config(stack, config, secrets={"hfToken": TOKEN})
    return stack


def set_config(stack, config: dict, secrets: dict | None = None):
    """Every key in one ``pulumi config set-all``: each CLI run costs this two-core machine about 0.2 s of CPU (a
    secret's about 0.4 s, for the passphrase's key derivation), and the engine tests set several hundred keys."""
    from pulumi import automation as auto

    values = {f"dynamo:{k}": auto.ConfigValue(value=v if isinstance(v, str) else json.dumps(v)) for k, v in config.items()}
    values |= {f"dynamo:{k}": auto.ConfigValue(value=v, secret=True) for k, v in (secrets or {}).items()}
    if values:
        stack.set_all_config(values)


def base_config(kube, target: str, ns: str, **extra) -> dict:
    return {
        "target": target,
        "namespace": ns,
        "wait": {"enabled": False},
        "cluster": {"mode": "kubeconfig", "kubeconfigPath": kube["kubeconfig"]},
        **extra,
    }


SERVER_FIELDS = {"uid", "resourceVersion", "creationTimestamp", "generation", "managedFields", "selfLink"}


def subset_diff(want, got, where="") -> list[str]:
    """Fields of ``want`` that differ in ``got`` (the server may add defaulted fields)."""
    if isinstance(want, dict):
        if not isinstance(got, dict):
            return [f"{where}: {want!r:.120} vs {got!r:.120}"]
        out = []
        for k, v in want.items():
            if k not in got:
                out.append(f"{where}.{k}: missing on the server")
            else:
                out += subset_diff(v, got[k], f"{where}.{k}")
        return out
    if isinstance(want, list):
        if not isinstance(got, list) or len(want) != len(got):
            return [f"{where}: {str(want)[:160]} vs {str(got)[:160]}"]
        return [d for i, (a, b) in enumerate(zip(want, got)) for d in subset_diff(a, b, f"{where}[{i}]")]
    if want != got and str(want) != str(got):
        return [f"{where}: rendered {want!r:.120} != server {got!r:.120}"]
    return []


# kubectl's resource name of a kind the program writes (the DGD's kind is ambiguous without its group).
RESOURCE = {"DynamoGraphDeployment": "dynamographdeployments.nvidia.com"}


def live_key(obj: dict, namespace: str | None = None) -> tuple[str, str, str]:
    """(kind, namespace, name) of an object as ``live_many`` reads it: cluster-scoped objects (Namespace, GatewayClass)
    with namespace ""; ``namespace`` instead of the object's own."""
    md = obj["metadata"]
    return obj["kind"], "" if obj["kind"] == "Namespace" else (namespace or md.get("namespace", "")), md["name"]


def live_many(kube, objs: list[dict], namespace: str | None = None) -> dict[tuple[str, str, str], dict | None]:
    """``live_key`` -> the server's object (None: not there) of each of ``objs``, read with one ``kubectl get
    --ignore-not-found`` per namespace (``namespace``: the one to read the namespaced objects from, instead of their
    own)."""
    wanted: dict[str, list[tuple[str, str, str]]] = {}
    for o in objs:
        key = live_key(o, namespace)
        wanted.setdefault(key[1], []).append(key)
    out: dict[tuple[str, str, str], dict | None] = {}
    for ns, keys in wanted.items():
        names = [f"{RESOURCE.get(kind, kind.lower())}/{name}" for kind, _, name in keys]
        r = kubectl(kube, "get", *names, *(["-n", ns] if ns else []), "-o", "json", "--ignore-not-found")
        listed = json.loads(r.stdout) if r.stdout.strip() else {"items": []}
        items = listed["items"] if listed.get("kind") == "List" else [listed]
        found = {(i["kind"], i["metadata"]["name"]): i for i in items}
        out.update({key: found.get((key[0], key[2])) for key in keys})
    return out


def live(kube, obj: dict) -> dict:
    kind = obj["kind"]
    resource = RESOURCE.get(kind, kind.lower())
    args = ["get", resource, obj["metadata"]["name"], "-o", "json"]
    if kind != "Namespace":
        args[1:1] = ["-n", obj["metadata"]["namespace"]]
    return json.loads(kubectl(kube, *args).stdout)


def upstream_problems(kube, target: str, ns: str) -> list[str]:
    """An oracle independent of the render code: every field that upstream's files set (the target's deploy file and
    its model's model-cache/*.yaml objects the server holds), placeholders replaced as configured (no storage class,
    no pull secret here), is on the API server's object with the same value (the server may add defaults, and the
    program's documented additions: Pulumi annotations, the hardened Jobs' securityContext)."""
    from stacks.cli import fidelity
    from stacks.config.keys import parse, select_target
    from stacks.serving.hardening import without_hardening

    t = select_target(parse({"target": target}))
    if not t.upstream:
        return []
    ref = fidelity.snapshot_dir(t.reference)
    deploy = ref / t.upstream
    if not deploy.is_file():
        from conftest import REFERENCE_SETUP, missing

        missing(f"no upstream file {deploy}", REFERENCE_SETUP)
    docs = [(d, True) for d in fidelity.load_docs(deploy)]
    docs += [
        (d, False) for f in sorted((ref / t.upstream.split("/")[0] / "model-cache").glob("*.yaml")) for d in fidelity.load_docs(f)
    ]
    configmaps = json.loads(kubectl(kube, "get", "configmaps", "-n", ns, "-o", "json").stdout)["items"]
    configmaps = [{**c, "kind": "ConfigMap"} for c in configmaps]
    problems = []
    on_server = live_many(kube, [d for d, _ in docs], namespace=ns)
    for doc, required in docs:
        want = fidelity.normalize(fidelity.substitute_placeholders(doc, None, ()))
        kind = doc["kind"]
        got = on_server[live_key(doc, ns)]
        if got is None:
            if required:
                problems.append(f"{kind}/{doc['metadata']['name']}: in {t.upstream}, not on the server")
            continue  # a model-cache object another target of the model uses
        # The program's listed additions, nothing else: the Jobs' hardening and revision pin, and the vLLM workers'
        # compile-cache env and mount (keyed from the ConfigMaps the server holds, not from the render).
        server, _ = fidelity.without_compile_cache(got, want, configmaps)
        server, _ = fidelity.without_fast_startup_probe(server, want)  # the GPU workers' 5 s startup probe
        server = fidelity.without_revision_pin(without_hardening(server, want), want)
        problems += [f"{kind}/{doc['metadata']['name']}{d}" for d in subset_diff(want, server)]
    return problems


KEPT = re.compile(
    r"warning: kept (?P<kind>\w+) (?P<name>\S+) \(retainOnDelete[^\n]*\n\s+why:\s+(?P<why>[^\n]+)\n"
    r"\s+delete:\s+(?P<delete>[^\n]+)\n\s+adopt:\s+(?P<adopt>[^\n]+)"
)


# The annotation the Dynamo operator's DGD webhook stamps at creation and keeps immutable (ai-dynamo/dynamo
# deploy/operator/internal/consts/consts.go, KubeAnnotationDynamoOperatorOriginVersion).
OPERATOR_ORIGIN_VERSION = "nvidia.com/dynamo-operator-origin-version"


def kept_in_destroy_output(out: str) -> dict[tuple[str, str], dict[str, str]]:
    """(kind, name) -> why/delete/adopt of each object `pulumi destroy --run-program` says it kept (the program's
    after_delete hooks, components/serving.py), read from the Diagnostics section of the engine's own output."""
    return {(m["kind"], m["name"]): {k: m[k].strip() for k in ("why", "delete", "adopt")} for m in KEPT.finditer(out)}


def comparable(obj: dict) -> dict:
    obj = copy.deepcopy(obj)
    if obj["kind"] == "Secret":
        obj.pop("stringData", None)  # checked separately: the server stores it as data
    return obj


@pytest.mark.parametrize("target", TARGETS)
def test_engine_lifecycle(kube, workspace, target, tmp_path):
    ns = "e-" + target.replace("lightning-", "l-").replace("motif3-vllm-disagg-b200-chat-", "m3-")[:50].rstrip("-")
    config = base_config(kube, target, ns)
    stack = make_stack(workspace, ns, config)
    try:
        up = stack.up(on_output=None)
        assert up.summary.result == "succeeded"

        # What the engine created equals what `python -m stacks render` shows for the same config.
        rendered = render_config({k: v for k, v in config.items()})
        problems = []
        on_server = live_many(kube, rendered)
        for obj in rendered:
            server = on_server[live_key(obj)]
            assert server is not None, f"{obj['kind']}/{obj['metadata']['name']}: rendered, not on the server"
            problems += [f"{obj['kind']}/{obj['metadata']['name']}{d}" for d in subset_diff(comparable(obj), server)]
        assert problems == []
        # ...and every field of upstream's own files is on the server (the render code is not its own oracle).
        assert upstream_problems(kube, target, ns) == []
        secret = live(kube, next(o for o in rendered if o["kind"] == "Secret"))
        import base64

        assert base64.b64decode(secret["data"]["HF_TOKEN"]).decode() == TOKEN

        # No secret in plain text in the stack's state or outputs.
        state = stack.export_stack()
        assert TOKEN not in json.dumps(state.deployment)
        assert TOKEN not in json.dumps({k: v.value for k, v in stack.outputs().items()})

        # A second preview with unchanged config changes nothing.
        pv = stack.preview(on_output=None)
        assert set(pv.change_summary) <= {"same"}, pv.change_summary

        # A replica change updates the DGD in place (the same object, its uid kept), never replaces the PVC, and keeps
        # what the Dynamo operator wrote on the DGD: its mutating webhook stamps nvidia.com/dynamo-operator-origin-version
        # on CREATE and refuses an UPDATE that changes or drops it ("the origin version annotation is immutable once
        # set": DGDDefaulter.Default in ai-dynamo/dynamo deploy/operator, the constant in internal/consts/consts.go).
        # No webhook runs here, so the stamp is written as the webhook would, by another field manager.
        dgd = next(o for o in rendered if o["kind"] == "DynamoGraphDeployment")
        worker = next(c["name"] for c in dgd["spec"]["components"] if c["type"] != "frontend")
        kubectl(
            kube,
            "annotate",
            "dynamographdeployments.nvidia.com",
            dgd["metadata"]["name"],
            "-n",
            ns,
            f"{OPERATOR_ORIGIN_VERSION}=1.6.1",
            "--field-manager=dynamo-operator-webhook",
        )
        before = live(kube, {**dgd, "metadata": {**dgd["metadata"], "namespace": ns}})
        set_config(stack, {"replicas": {worker: 3}})
        up2 = stack.up(on_output=None)
        changes = up2.summary.resource_changes
        assert changes.get("update") == 1 and not changes.get("replace") and not changes.get("create"), changes
        live_dgd = live(kube, {**dgd, "metadata": {**dgd["metadata"], "namespace": ns}})
        assert next(c for c in live_dgd["spec"]["components"] if c["name"] == worker)["replicas"] == 3
        assert live_dgd["metadata"]["uid"] == before["metadata"]["uid"]
        assert (live_dgd["metadata"].get("annotations") or {}).get(OPERATOR_ORIGIN_VERSION) == "1.6.1", live_dgd["metadata"]

        # The worker's replicas share one compile cache on the model-cache claim: started one after another from the live
        # DGD (tests/compile_cache_starts.py: what is real, what stands in for vLLM's compiler), the first compiles and
        # the second and third load its artifact; the scale-out did not move the cache (the directory is the one the
        # DGD named before it), and the claim is ReadWriteMany, so replicas on other nodes see the same files.
        if select_target(parse({"target": target})).runtime == "vllm":
            from compile_cache_starts import start_replicas

            starts = start_replicas(live_dgd, worker, 3, tmp_path)
            assert [(s.compiled, s.loaded) for s in starts] == [(True, False), (False, True), (False, True)], starts
            assert len({s.path for s in starts}) == 1
            (before_start,) = start_replicas(before, worker, 1, tmp_path / "before")
            assert before_start.path.relative_to(tmp_path / "before") == starts[0].path.relative_to(tmp_path)
            pvc = json.loads(kubectl(kube, "get", "pvc", starts[0].claim, "-n", ns, "-o", "json").stdout)
            assert "ReadWriteMany" in pvc["spec"]["accessModes"], pvc["spec"]
            others = [c["name"] for c in live_dgd["spec"]["components"] if c["type"] != "frontend" and c["name"] != worker]
            for other in others:  # another component compiles other graphs: its own entry, nothing loaded from ours
                (first,) = start_replicas(live_dgd, other, 1, tmp_path)
                assert first.path != starts[0].path and (first.compiled, first.loaded) == (True, False)

        # destroy removes everything but the protected model cache (and the namespace holding it), and says so.
        # The kept objects' after_delete hooks are in the state, so a destroy without the program is refused
        # before it deletes anything...
        from pulumi.automation import errors

        with pytest.raises(errors.CommandError) as refused:
            stack.destroy(on_output=None)
        assert "--run-program" in str(refused.value)
        assert (
            kubectl(kube, "get", "dynamographdeployments.nvidia.com", dgd["metadata"]["name"], "-n", ns, check=False).returncode
            == 0
        )
        # ...and `pulumi destroy --run-program` prints each object it keeps, why, and how to delete or re-adopt it.
        printed: list[str] = []
        stack.destroy(on_output=printed.append, run_program=True)
        out = "\n".join(printed)
        assert TOKEN not in out
        kept = kept_in_destroy_output(out)
        # what it names as kept is exactly what of the stack's objects is still on the server (so nothing deleted)
        after = live_many(kube, rendered)
        still_there = {
            (o["kind"], o["metadata"]["name"] if o["kind"] == "Namespace" else f"{ns}/{o['metadata']['name']}")
            for o in rendered
            if after[live_key(o)] is not None
        }
        assert set(kept) == still_there == {("Namespace", ns), ("PersistentVolumeClaim", f"{ns}/shared-model-cache")}, out[-3000:]
        assert all(k["why"] and k["adopt"] for k in kept.values())
        assert "storage.protect" in kept["PersistentVolumeClaim", f"{ns}/shared-model-cache"]["why"]
        assert "pulumi up" in kept["PersistentVolumeClaim", f"{ns}/shared-model-cache"]["adopt"]
        for kind, name in (
            ("dynamographdeployments.nvidia.com", dgd["metadata"]["name"]),
            ("jobs", None),
            ("configmap", f"{dgd['metadata']['name']}-config"),
        ):
            got = kubectl(kube, "get", kind, *([name] if name else []), "-n", ns, "-o", "name", check=False)
            assert got.stdout.strip() in ("",) or got.returncode != 0, got.stdout
        # the printed delete command for the claim works as printed
        delete = kept["PersistentVolumeClaim", f"{ns}/shared-model-cache"]["delete"]
        assert delete == f"kubectl delete pvc shared-model-cache -n {ns}", delete
        kubectl(kube, *delete.split()[1:], "--wait=false")
        gone = kubectl(kube, "get", "pvc", "shared-model-cache", "-n", ns, "-o", "json", check=False)
        assert gone.returncode != 0 or json.loads(gone.stdout)["metadata"].get("deletionTimestamp")
        assert kept["Namespace", ns]["delete"].startswith(f"kubectl delete namespace {ns}")
    finally:
        stack.workspace.remove_stack(stack.name, force=True)


def test_cache_opt_out_destroys_the_pvc(kube, workspace):
    """Nothing kept: `pulumi destroy --run-program` deletes the claim and names nothing as kept. (Every stack records the
    program's delete guard, so a destroy always runs the program: components/hooks.py.)"""
    ns = "e-optout"
    stack = make_stack(workspace, ns, base_config(kube, TARGETS[0], ns, storage={"protect": False}))
    try:
        stack.up(on_output=None)
        assert kubectl(kube, "get", "pvc", "shared-model-cache", "-n", ns).returncode == 0
        printed: list[str] = []
        stack.destroy(on_output=printed.append, run_program=True)
        assert kubectl(kube, "get", "pvc", "shared-model-cache", "-n", ns, check=False).returncode != 0
        assert kept_in_destroy_output("\n".join(printed)) == {} and "deleted" in "\n".join(printed)
    finally:
        stack.workspace.remove_stack(stack.name, force=True)


def test_crd_schema_rejects_an_invalid_dgd(kube):
    """The DGDs above were admitted by the real CRD schema; the same schema refuses a bad one."""
    objs = render_config({"target": TARGETS[0]})
    dgd = copy.deepcopy(next(o for o in objs if o["kind"] == "DynamoGraphDeployment"))
    # Applied into the cluster's own `default` namespace (which a stack may not own, so not rendered there).
    dgd["metadata"].update(name="schema-check", namespace="default")
    dgd["spec"]["components"][1]["replicas"] = "four"
    r = kubectl(kube, "apply", "--server-side", "-f", "-", check=False, input=json.dumps(dgd))
    assert r.returncode != 0 and "replicas" in r.stderr, r.stderr


def test_preview_with_policy_pack_rejects_a_violating_config(kube, workspace, tmp_path):
    """The policy pack runs at preview in the real engine, on what the program cannot know about an existing
    cluster: a clean stack passes; GPU pods larger than the pack's node size are refused (mandatory); an
    unretained model cache is reported (advisory). (A floating image no longer reaches the pack: the program
    refuses it first, tests/test_bad_config_table.py.)"""
    from pulumi.automation import errors

    ns = "e-policy"
    stack = make_stack(workspace, ns, base_config(kube, "motif3-vllm-agg-b200-chat", ns))  # 2 GPUs per worker

    def pack(gpus_per_node: int, storage_protect: bool = True):
        path = tmp_path / f"policy-config-{gpus_per_node}-{storage_protect}.json"
        path.write_text(
            json.dumps(
                {
                    "efa-disagg-workers": {"fabric": "none"},
                    "gpu-fits-node": {"gpusPerNode": gpus_per_node},
                    "model-cache-retained": {"storageProtect": storage_protect},
                }
            )
        )
        return {"policy_packs": [str(ROOT / "policy")], "policy_pack_configs": [str(path)]}

    try:
        clean = stack.preview(on_output=None, **pack(8))
        assert "gpu-fits-node" not in clean.stdout and "model-cache-retained" not in clean.stdout
        with pytest.raises(errors.CommandError) as e:
            stack.preview(on_output=None, **pack(1))
        assert "gpu-fits-node" in str(e.value) and "requests 2 nvidia.com/gpu" in str(e.value)
        set_config(stack, {"storage": {"protect": False}})
        advisory = stack.preview(on_output=None, **pack(8, storage_protect=False))
        assert "model-cache-retained" in advisory.stdout and "not retained" in advisory.stdout
    finally:
        stack.workspace.remove_stack(stack.name, force=True)


@pytest.fixture(scope="session")
def wffc_storage_class(kube):
    """A StorageClass that binds on first consumer, so Pulumi's PVC await does not wait for Bound."""
    sc = {
        "apiVersion": "storage.k8s.io/v1",
        "kind": "StorageClass",
        "metadata": {"name": "local-wffc"},
        "provisioner": "kubernetes.io/no-provisioner",
        "volumeBindingMode": "WaitForFirstConsumer",
    }
    kubectl(kube, "apply", "-f", "-", input=json.dumps(sc))
    return "local-wffc"


def test_job_wait_times_out_when_the_download_never_completes(kube, workspace, wffc_storage_class):
    """Waiting is real: no node runs the download here, so with waits on, `up` fails at the Job's timeout."""
    from pulumi.automation import errors

    ns = "e-wait-job"
    cfg = base_config(
        kube, TARGETS[0], ns, storage={"className": wffc_storage_class}, wait={"enabled": True, "dgd": False, "jobTimeout": "15s"}
    )
    stack = make_stack(workspace, ns, cfg)
    try:
        with pytest.raises(errors.CommandError) as e:
            stack.up(on_output=None)
        assert "model-download" in str(e.value)
        assert kubectl(kube, "get", "dgd", "-n", ns, "-o", "name", check=False).stdout.strip() == ""  # the DGD waits for the Job
    finally:
        stack.destroy(on_output=None, run_program=True)
        stack.workspace.remove_stack(stack.name, force=True)


DGD_KIND = "DynamoGraphDeployment"  # kubernetes:nvidia.com/<version>:DynamoGraphDeployment, whichever version the CRD serves


class EngineEvents:
    """The engine events of one `up` (``on_event``), collected from its thread, with what a test waits on."""

    def __init__(self):
        import threading

        self._lock, self._events = threading.Lock(), []

    def __call__(self, event):
        with self._lock:
            self._events.append(event)

    def all(self) -> list:
        with self._lock:
            return list(self._events)

    def count(self) -> int:  # (no __len__: the Automation API tests `if on_event:`, and an empty log would be falsy)
        return len(self.all())

    @staticmethod
    def _urn(e):
        if e.resource_pre_event:
            return e.resource_pre_event.metadata.urn
        if e.res_outputs_event:
            return e.res_outputs_event.metadata.urn
        if e.res_op_failed_event:
            return e.res_op_failed_event.metadata.urn
        return e.diagnostic_event.urn if e.diagnostic_event else None

    @classmethod
    def _type(cls, e) -> str:  # urn:pulumi:<stack>::<project>::<parent types$>type::<name>
        parts = (cls._urn(e) or "").split("::")
        return parts[-2].split("$")[-1] if len(parts) >= 4 else ""

    def of_kind(self, kind: str) -> list[tuple[int, object]]:
        """(index, event) of the step and diagnostic events of the Kubernetes objects of that kind, in order."""
        return [
            (i, e)
            for i, e in enumerate(self.all())
            if self._type(e).startswith("kubernetes:") and self._type(e).rsplit(":", 1)[-1] == kind
        ]

    @staticmethod
    def describe(e) -> str:
        if e.resource_pre_event:
            return f"step {e.resource_pre_event.metadata.op.value} begins"
        if e.res_outputs_event:
            return f"step {e.res_outputs_event.metadata.op.value} done"
        if e.res_op_failed_event:
            return "step failed"
        d = e.diagnostic_event
        return f"{d.severity}{' (status)' if d.ephemeral else ''}: {d.message.strip()[:200]}"

    def last(self, kind: str, n: int = 8) -> str:
        """The last events of that kind's objects, for a failure message (or the types seen when there is none)."""
        seen = [self.describe(e) for _, e in self.of_kind(kind)]
        types = sorted({self._type(e) for e in self.all()} - {""})
        return "; ".join(seen[-n:]) or f"no event of any {kind} ({self.count()} engine events in all, of {types})"


def _awaits_ready(e) -> bool:
    """A status message of the Kubernetes provider's ``pulumi.com/waitFor`` await of a Ready condition, before the
    condition holds (pulumi-kubernetes provider/pkg/await/condition/kubectl.go: "Has no .status.conditions", "Resource
    has condition Ready=False (want True)"); "Skipping await logic" (immediate.go) is the opposite."""
    d = e.diagnostic_event
    return bool(d) and (".status.conditions" in d.message or "has condition Ready=" in d.message)


def test_dgd_wait_follows_the_ready_condition(kube, workspace, wffc_storage_class):
    """With the DGD wait on, `up` returns only once the DGD reports Ready (set here as the operator would). No fixed
    sleep: the engine's own events show the provider awaiting the DGD's Ready condition while the DGD's step is still
    open, and the step ends only after the Ready status is written."""
    import threading
    import time

    ns = "e-wait-dgd"
    cfg = base_config(
        kube,
        TARGETS[0],
        ns,
        storage={"className": wffc_storage_class},
        wait={"enabled": True, "job": False, "dgdTimeout": "180s"},
    )
    stack = make_stack(workspace, ns, cfg)
    result: dict = {}
    events = EngineEvents()

    def run_up():
        try:
            result["up"] = stack.up(on_output=None, on_event=events)
        except Exception as exc:  # reported below
            result["error"] = exc

    def set_ready(check=True):  # as the operator would
        now = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
        status = {
            "status": {
                "conditions": [
                    {"type": "Ready", "status": "True", "reason": "AllReady", "message": "test", "lastTransitionTime": now}
                ]
            }
        }
        kubectl(
            kube, "patch", "dgd", name, "-n", ns, "--subresource=status", "--type=merge", "-p", json.dumps(status), check=check
        )

    def dgd_step_done() -> list[int]:
        return [i for i, e in events.of_kind(DGD_KIND) if e.res_outputs_event or e.res_op_failed_event]

    t, name = threading.Thread(target=run_up), "vllm-agg-h100-dspark"
    try:
        t.start()
        deadline, waiting = time.monotonic() + 150, False
        while not waiting:
            assert not dgd_step_done(), f"up ended the DGD's step before it was Ready: {events.last(DGD_KIND)}"
            assert t.is_alive(), f"up returned before the DGD was Ready: {result}; DGD events: {events.last(DGD_KIND)}"
            assert time.monotonic() < deadline, (
                f"no sign within 150 s that up awaits the DGD's Ready condition; last DGD events: {events.last(DGD_KIND)}"
            )
            waiting = (
                any(_awaits_ready(e) for _, e in events.of_kind(DGD_KIND))
                and kubectl(kube, "get", "dgd", name, "-n", ns, check=False).returncode == 0
            )
            if not waiting:
                time.sleep(0.2)
        # The provider is awaiting Ready on the DGD that exists: up must still be running, the DGD's step open.
        assert t.is_alive() and not dgd_step_done(), f"{result}; DGD events: {events.last(DGD_KIND)}"
        patched_at = events.count()
        set_ready()
        t.join(timeout=150)
        assert not t.is_alive() and "error" not in result, result
        assert result["up"].summary.result == "succeeded"
        done = dgd_step_done()
        assert done and min(done) >= patched_at, (
            f"the DGD's step ended at engine event {done}, before the Ready "
            f"status was written (event {patched_at}): {events.last(DGD_KIND)}"
        )
    finally:
        if t.is_alive():  # a failed assertion above: let the up end (Ready) before the destroy takes the stack's lock
            set_ready(check=False)
            t.join(timeout=200)
        stack.destroy(on_output=None, run_program=True)
        stack.workspace.remove_stack(stack.name, force=True)


def test_render_stack_with_empty_render_dir_never_touches_the_cluster(kube, workspace):
    """A render stack must never talk to a cluster: with the current kubeconfig pointing at a live API server,
    a render stack whose renderDir is empty fails before any resource and creates nothing there (an empty
    renderDir used to fall back to the default provider and deploy to whatever cluster the kubeconfig named)."""
    from pulumi.automation import errors

    ns = "e-render-leak"
    stack = make_stack(workspace, ns, {"target": TARGETS[0], "namespace": ns, "cluster": {"mode": "render", "renderDir": ""}})
    stack.workspace.env_vars["KUBECONFIG"] = kube["kubeconfig"]
    try:
        with pytest.raises(errors.CommandError) as e:
            stack.up(on_output=None)
        assert "dynamo:cluster.renderDir" in str(e.value) and "is empty" in str(e.value)
        assert kubectl(kube, "get", "namespace", ns, check=False).returncode != 0
        state = stack.export_stack().deployment
        kinds = [r["type"] for r in (state.get("resources") or [])]
        assert not any(k.startswith("kubernetes:") for k in kinds), kinds
    finally:
        stack.workspace.remove_stack(stack.name, force=True)


# ---- waits end at their timeout (the provider's await alone re-arms its timer on every resync) ----------------------


def _no_pods_namespace(kube, ns: str) -> None:
    """A namespace where no Pod can be created (ResourceQuota pods: 0): the download Job never
    completes even when other tests have added simulated nodes to this control plane."""
    kubectl(kube, "create", "namespace", ns, check=False)
    quota = {
        "apiVersion": "v1",
        "kind": "ResourceQuota",
        "metadata": {"name": "no-pods", "namespace": ns},
        "spec": {"hard": {"pods": "0"}},
    }
    kubectl(kube, "apply", "-f", "-", input=json.dumps(quota))


def _created_at(kube, resource: str, name: str, ns: str) -> float:
    import calendar
    import time

    out = kubectl(kube, "get", resource, name, "-n", ns, "-o", "jsonpath={.metadata.creationTimestamp}").stdout.strip()
    return calendar.timegm(time.strptime(out, "%Y-%m-%dT%H:%M:%SZ"))


def _timed_up(stack) -> dict:
    """Run `up`, return how it ended: elapsed seconds, end time, and the error text (CommandError)."""
    import time

    from pulumi.automation import errors

    t0 = time.time()
    try:
        stack.up(on_output=None)
        return {"elapsed": time.time() - t0, "end": time.time(), "error": None}
    except errors.CommandError as e:
        return {"elapsed": time.time() - t0, "end": time.time(), "error": str(e)}


WAITS_TEST = "test_waits_of_a_minute_or_more_end_at_their_timeout"


@pytest.fixture(scope="session")
def long_waits(kube, workspace, wffc_storage_class):
    """The three `up`s of the waits test, started in the background as soon as the first engine test runs, so
    their 3 minutes of waiting overlap the other engine tests (they run in namespaces where no pod can start).
    ``test_waits_of_a_minute_or_more_end_at_their_timeout`` joins them and checks how each ended."""
    import threading
    import time

    job_ns, dgd_ns, fail_ns = "e-wait-3m", "e-wait-dgd75", "e-wait-failed"
    for ns in (job_ns, dgd_ns, fail_ns):
        _no_pods_namespace(kube, ns)
    common = {"storage": {"className": wffc_storage_class}, "createNamespace": False}
    stacks = {
        job_ns: make_stack(
            workspace,
            job_ns,
            base_config(kube, TARGETS[0], job_ns, wait={"enabled": True, "dgd": False, "jobTimeout": "3m"}, **common),
        ),
        dgd_ns: make_stack(
            workspace,
            dgd_ns,
            base_config(kube, TARGETS[0], dgd_ns, wait={"enabled": True, "job": False, "dgdTimeout": "75s"}, **common),
        ),
        fail_ns: make_stack(
            workspace,
            fail_ns,
            base_config(kube, TARGETS[0], fail_ns, wait={"enabled": True, "dgd": False, "jobTimeout": "10m"}, **common),
        ),
    }
    results: dict[str, dict] = {}
    threads = {ns: threading.Thread(target=lambda ns=ns, s=s: results.__setitem__(ns, _timed_up(s))) for ns, s in stacks.items()}

    def fail_the_download():
        # The failing download: once its Job exists, a 1-second deadline makes the Job controller mark it Failed.
        deadline = time.time() + 180
        while (
            time.time() < deadline and kubectl(kube, "get", "job", "model-download", "-n", fail_ns, check=False).returncode != 0
        ):
            time.sleep(1)
        kubectl(
            kube,
            "patch",
            "job",
            "model-download",
            "-n",
            fail_ns,
            "--type=merge",
            "-p",
            '{"spec":{"activeDeadlineSeconds":1}}',
            check=False,
        )

    threads["patch"] = threading.Thread(target=fail_the_download)
    for t in threads.values():
        t.start()
    yield {"namespaces": (job_ns, dgd_ns, fail_ns), "stacks": stacks, "results": results, "threads": threads}
    for t in threads.values():
        t.join(timeout=400)
    for st in stacks.values():
        st.workspace.env_vars["DYNAMO_DESTROY"] = "1"  # a Job that ended Failed does not stop the teardown
        st.destroy(on_output=None, run_program=True)
        st.workspace.remove_stack(st.name, force=True)


@pytest.fixture(autouse=True)
def _long_waits_in_background(request):
    """Start ``long_waits`` with the first engine test when the waits test is part of this run."""
    if "kube" in request.fixturenames and any(i.name == WAITS_TEST for i in request.session.items):
        request.getfixturevalue("long_waits")


def test_waits_of_a_minute_or_more_end_at_their_timeout(kube, long_waits):
    """Every wait ends by its timeout plus at most a minute: a Job that never completes with jobTimeout: 3m ends
    `pulumi up` within 4 minutes, and a DGD that never becomes Ready ends it at dgdTimeout (75 s: above
    the provider's one-minute informer resync, which re-armed the old Job await's timer forever).
    Each message says what was awaited, for how long, and the command to look; a Job that ends
    Failed stops `up` at once with its reason. The three stacks run in the background (``long_waits``)."""
    job_ns, dgd_ns, fail_ns = long_waits["namespaces"]
    threads, results = long_waits["threads"], long_waits["results"]
    for t in threads.values():
        t.join(timeout=400)
    assert not any(t.is_alive() for t in threads.values()), "an up outlived every bound"
    for ns, r in results.items():  # shown when an assertion below fails
        print(f"--- {ns}: up {r['elapsed']:.0f} s\n{(r['error'] or 'succeeded')[-2500:]}")

    # Job, jobTimeout 3m: ends after 3 minutes of waiting, within a minute more, and `up` within 4 minutes.
    r = results[job_ns]
    waited = r["end"] - _created_at(kube, "job", "model-download", job_ns)
    print(f"job wait 3m: up {r['elapsed']:.0f} s, waited {waited:.0f} s")
    assert r["error"] is not None
    assert 180 - 5 <= waited < 180 + 60, waited
    assert r["elapsed"] < 240, r["elapsed"]
    msg = r["error"]
    assert (
        f"gave up waiting for Job {job_ns}/model-download to finish (condition Complete or Failed) after 3m (dynamo:wait.jobTimeout)"
        in msg
    ), msg[-3000:]
    assert f"look: kubectl describe job/model-download -n {job_ns}" in msg
    assert "provider: timed out waiting for the condition" in msg
    assert "last seen: pods active" in msg, msg[-3000:]  # read from the live Job (kubeconfig stacks probe it)
    # The engine interrupts its plugins when the update fails; the program's own process group keeps
    # that SIGINT from surfacing as a Python traceback (tools/pulumi language host, runProgramGroup).
    assert "Traceback" not in msg and "KeyboardInterrupt" not in msg, msg[-3000:]
    assert kubectl(kube, "get", "dgd", "-n", job_ns, "-o", "name").stdout.strip() == ""  # the DGD waits for the Job

    # DGD, dgdTimeout 75s: no operator runs, Ready never comes.
    r = results[dgd_ns]
    waited = r["end"] - _created_at(kube, "dgd", "vllm-agg-h100-dspark", dgd_ns)
    print(f"dgd wait 75s: up {r['elapsed']:.0f} s, waited {waited:.0f} s")
    assert r["error"] is not None
    assert 75 - 5 <= waited < 75 + 60, waited
    msg = r["error"]
    assert (
        f"gave up waiting for DynamoGraphDeployment {dgd_ns}/vllm-agg-h100-dspark to be Ready (condition Ready=True) "
        f"after 75s (dynamo:wait.dgdTimeout)"
    ) in msg, msg[-3000:]
    assert f"look: kubectl describe dynamographdeployment/vllm-agg-h100-dspark -n {dgd_ns}" in msg

    # A Job that ends Failed: `up` stops at once (not at jobTimeout 10m) with the Job's reason, and no DGD.
    r = results[fail_ns]
    print(f"failed job: up {r['elapsed']:.0f} s")
    assert r["error"] is not None and r["elapsed"] < 240, r
    msg = r["error"]
    assert f"download Job {fail_ns}/model-download failed" in msg and "DeadlineExceeded" in msg, msg[-3000:]
    assert f"kubectl describe job/model-download -n {fail_ns}" in msg and "pulumi up --replace" in msg
    assert "Traceback" not in msg
    assert kubectl(kube, "get", "dgd", "-n", fail_ns, "-o", "name").stdout.strip() == ""
    # Tearing that stack down: a destroy runs the program, whose Job check stops it the same way, naming the way out
    # (a plain destroy is refused: the kept claim's delete hook needs the program); with it, the destroy completes
    # and says what it kept.
    from pulumi.automation import errors

    st = long_waits["stacks"][fail_ns]
    with pytest.raises(errors.CommandError) as stopped:
        st.destroy(on_output=None, run_program=True)
    assert "DYNAMO_DESTROY=1 pulumi destroy --run-program" in str(stopped.value), str(stopped.value)[-3000:]
    st.workspace.env_vars["DYNAMO_DESTROY"] = "1"
    printed: list[str] = []
    st.destroy(on_output=printed.append, run_program=True)
    assert set(kept_in_destroy_output("\n".join(printed))) == {("PersistentVolumeClaim", f"{fail_ns}/shared-model-cache")}


# --------------------------------------------------------------------------- observability and benchmark objects (both opt-in)

MONITORING_CRDS = fidelity.reference_root() / "crds" / "monitoring"  # Prometheus Operator v0.93.0, kube-prometheus-stack 88.0.0's


def test_observability_and_benchmark_objects_are_admitted(kube, workspace):
    """Dashboards (ConfigMaps), PodMonitors, the GPU Operator's DCGM ServiceMonitor and the alerts' PrometheusRule pass
    the API server's CRD schema; the AIPerf Job is created after the DGD. (Helm charts cannot be fetched here: they are covered by the
    mock tests; this stack uses an existing Prometheus, so no chart is registered.)"""
    from stacks.program import build_program

    for crd in sorted(MONITORING_CRDS.glob("monitoring.coreos.com_*.yaml")):
        kubectl(kube, "apply", "--server-side", "-f", str(crd))
    kubectl(
        kube,
        "wait",
        "--for=condition=Established",
        "--timeout=60s",
        "crd/podmonitors.monitoring.coreos.com",
        "crd/servicemonitors.monitoring.coreos.com",
        "crd/prometheusrules.monitoring.coreos.com",
    )
    ns, mon = "e-obs", "e-obs-monitoring"
    obs = {
        "enabled": True,
        "prometheus": "existing",
        "prometheusEndpoint": "http://prometheus-operated.monitoring.svc:9090",
        "monitorLabels": {"release": "team-prometheus"},
        "dcgm": "gpu-operator",
        "namespace": mon,
    }
    config = base_config(kube, TARGETS[0], ns, observability=obs, benchmark={"enabled": True})
    stack = make_stack(workspace, ns, config)
    try:
        up = stack.up(on_output=None)
        assert up.summary.result == "succeeded"
        program = build_program(config, ns, frozenset({"hfToken"}))
        extra = [o for layer in program.layers for o in layer.objects]  # observability's and the benchmark's LayerPlans
        assert {o["kind"] for o in extra} == {"Namespace", "ConfigMap", "PodMonitor", "ServiceMonitor", "PrometheusRule", "Job"}
        problems = []
        for obj in extra:
            resource = {
                "PodMonitor": "podmonitors.monitoring.coreos.com",
                "ServiceMonitor": "servicemonitors.monitoring.coreos.com",
                "PrometheusRule": "prometheusrules.monitoring.coreos.com",
            }.get(obj["kind"])
            if resource:
                server = json.loads(
                    kubectl(
                        kube, "get", resource, obj["metadata"]["name"], "-n", obj["metadata"]["namespace"], "-o", "json"
                    ).stdout
                )
            else:
                server = live(kube, obj)
            problems += [f"{obj['kind']}/{obj['metadata']['name']}{d}" for d in subset_diff(obj, server)]
        assert problems == []
        dashboards = kubectl(kube, "get", "configmap", "-n", mon, "-l", "grafana_dashboard=1", "-o", "name").stdout.split()
        assert sorted(dashboards) == ["configmap/dynamo-gpu-dashboard", "configmap/dynamo-serving-dashboard"]

        # The benchmark Job comes after the DGD: in the engine's dependency graph and on the server's clock.
        resources = stack.export_stack().deployment["resources"]
        dgd_urn = next(r["urn"] for r in resources if r["type"] == "kubernetes:nvidia.com/v1beta1:DynamoGraphDeployment")
        job = next(
            r for r in resources if r["type"] == "kubernetes:batch/v1:Job" and r["urn"].endswith("aiperf-vllm-agg-h100-dspark")
        )
        assert dgd_urn in job.get("dependencies", [])
        created = {
            kind: kubectl(kube, "get", kind, name, "-n", ns, "-o", "jsonpath={.metadata.creationTimestamp}").stdout.strip()
            for kind, name in (("job", "aiperf-vllm-agg-h100-dspark"), ("dgd", "vllm-agg-h100-dspark"))
        }
        assert created["job"] >= created["dgd"], created  # RFC 3339 UTC timestamps compare as text

        # The CRD schema is enforced: a malformed monitor is refused, so the admissions above mean something.
        bad = json.loads(json.dumps(next(o for o in extra if o["kind"] == "PodMonitor")))
        bad["metadata"]["name"] = "bad-interval"
        bad["spec"]["podMetricsEndpoints"][0]["interval"] = "5 seconds"
        r = kubectl(kube, "apply", "--server-side", "-f", "-", check=False, input=json.dumps(bad))
        assert r.returncode != 0 and "interval" in r.stderr, r.stderr
    finally:
        stack.destroy(on_output=None, run_program=True)
        stack.workspace.remove_stack(stack.name, force=True)


def _kinds(stack) -> dict[str, list[str]]:
    out: dict[str, list[str]] = {}
    for r in stack.export_stack().deployment.get("resources") or []:
        out.setdefault(r["type"], []).append(r["urn"].rsplit("::", 1)[-1])
    return out


def test_one_stack_serves_several_targets(kube, workspace):
    """One dynamo:serve stack, several entries: three entries (two of one model, sharing its cache) come up
    together; a replica change updates only that DGD; removing an entry deletes only its objects; the shared cache stays."""
    ns_a, ns_m = "e-serve-l", "e-serve-m"
    agg, disagg, motif = TARGETS[0], TARGETS[1], TARGETS[5]
    entries = [{"target": agg, "namespace": ns_a}, {"target": disagg, "namespace": ns_a}, {"target": motif, "namespace": ns_m}]
    cfg = {"serve": entries, "wait": {"enabled": False}, "cluster": {"mode": "kubeconfig", "kubeconfigPath": kube["kubeconfig"]}}
    stack = make_stack(workspace, "e-serve", cfg)
    try:
        assert stack.up(on_output=None).summary.result == "succeeded"
        assert len(json.loads(kubectl(kube, "get", "dgd", "-n", ns_a, "-o", "json").stdout)["items"]) == 2
        assert len(json.loads(kubectl(kube, "get", "dgd", "-n", ns_m, "-o", "json").stdout)["items"]) == 1
        pvcs = sorted(_kinds(stack)["kubernetes:core/v1:PersistentVolumeClaim"])
        jobs = _kinds(stack)["kubernetes:batch/v1:Job"]
        assert len(pvcs) == 2 and len(jobs) == 2, (pvcs, jobs)  # one cache and download per model

        # One entry's replicas: that DGD alone is updated in place.
        disagg_dgd = next(o for o in render_config({"target": disagg}) if o["kind"] == "DynamoGraphDeployment")
        set_config(stack, {"serve": [entries[0], {**entries[1], "replicas": {"VllmDecodeWorker": 2}}, entries[2]]})
        changes = stack.up(on_output=None).summary.resource_changes
        assert (
            changes.get("update") == 1 and not changes.get("create") and not changes.get("delete") and not changes.get("replace")
        ), changes
        live_dgd = live(kube, {**disagg_dgd, "metadata": {**disagg_dgd["metadata"], "namespace": ns_a}})
        assert next(c for c in live_dgd["spec"]["components"] if c["name"] == "VllmDecodeWorker")["replicas"] == 2

        # Remove the first entry (the one the shared cache was built from): only its DGD and ConfigMap go.
        set_config(stack, {"serve": [{**entries[1], "replicas": {"VllmDecodeWorker": 2}}, entries[2]]})
        changes = stack.up(on_output=None).summary.resource_changes
        assert not changes.get("create") and not changes.get("update") and not changes.get("replace"), changes
        left = json.loads(kubectl(kube, "get", "dgd", "-n", ns_a, "-o", "json").stdout)["items"]
        assert [d["metadata"]["name"] for d in left] == [disagg_dgd["metadata"]["name"]]
        assert kubectl(kube, "get", "pvc", "shared-model-cache", "-n", ns_a, check=False).returncode == 0
        assert sorted(_kinds(stack)["kubernetes:core/v1:PersistentVolumeClaim"]) == pvcs
    finally:
        stack.destroy(on_output=None, run_program=True)
        stack.workspace.remove_stack(stack.name, force=True)


# Moving a stack between the single-target form and `dynamo:serve`, both ways, from a state the earlier naming wrote:
# tests/test_transitions.py (the day-2 transitions, with what is live on the API server after each step).


# ---------------------------------------------------------------------------------------------------------------
# Simulated GPU cluster (no GPU needed): KWOK nodes shaped like the cluster plan; the real kube-scheduler binds the pods
# and kwok's default stages run them (Job pods Succeed). Nodes exist only during these tests: every other test sees
# a cluster without nodes, where no pod is scheduled and no Job completes.


@pytest.fixture
def simulator(kube):
    from stacks.cli.simulate import Simulator

    sim = Simulator(kube["kubeconfig"])
    yield sim
    sim.cleanup()  # every node and pod any run of the simulation created
    sim.close()


def _simulate(sim, tid, *, dgd=None, edit=None, runtime_classes=None):
    from stacks import catalog
    from stacks.cli.simulate import default_groups, run, target_scenario

    t = catalog.targets()[tid]
    groups = None
    if edit:
        groups, _ = default_groups(t)
        edit({g.name: g for g in groups})
    sc = target_scenario(t, dgd=dgd, groups=groups, runtime_classes=runtime_classes)
    res = run(sim, sc.nodes, sc.intents, sc.runtime_classes, "engine", timeout=30)
    # GPU pods land in the GPU pool (the GB200 recipes pin their frontends there too; others go to system nodes).
    for it, p in zip(sc.intents, res.placements):
        if p.placed and any(
            "nvidia.com/gpu" in (c.get("resources") or {}).get("limits", {}) for c in it.pod["spec"]["containers"]
        ):
            assert p.pool == "gpu", (tid, p)
    return res


def test_simulated_cluster_places_every_target_on_its_default_shape(simulator):
    """Every catalog target's pods, on the default cluster shape of its GPU, are bound by the real scheduler,
    and stacks/cluster/scheduling.py says the same of each target.

    Why the real API server is needed: the Ultra recipes name ``runtimeClassName: nvidia``; the EKS device-plugin stack
    created no RuntimeClass, so the API server refused those pods before the scheduler saw them (10 targets).
    The stack now creates it (stacks.cluster.platform.nvidia_runtime_class); below, no pod is refused at admission.
    scheduling.py does not read runtimeClassName, so only the real API server caught this."""
    from stacks import catalog
    from stacks.cluster.scheduling import check_target

    failures, refused = {}, set()
    for tid, t in sorted(catalog.targets().items()):
        res = _simulate(simulator, tid)
        refused |= {tid for p in res.pending() if "RuntimeClass" in (p.reason or "")}
        if not res.ok:
            failures[tid] = [f"{p.component}[{p.replica}]: {p.reason}" for p in res.pending()]
        assert check_target(t) == [], tid
    assert failures == {} and refused == set()


@pytest.mark.parametrize(
    "tid,worker,replicas,fits",
    [
        ("lightning-vllm-agg-h100-dspark-kv-router", "agg", 8, True),  # 8 x 1 GPU on one p5
        ("lightning-vllm-agg-h100-dspark-kv-router", "agg", 9, False),
        ("motif3-vllm-agg-b200-chat", "Worker", 4, True),  # 4 x 2 GPUs on one p6-b200
        ("motif3-vllm-agg-b200-chat", "Worker", 5, False),
    ],
)
def test_simulated_cluster_agrees_with_scheduling_model_on_replica_overrides(simulator, tid, worker, replicas, fits):
    """A replica override on the target's default cluster (nodes counted for the recipe): the real scheduler
    and stacks/cluster/scheduling.py agree on whether every replica fits."""
    from stacks import catalog
    from stacks.cluster.scheduling import check_target

    t = catalog.targets()[tid]
    dgd = copy.deepcopy(next(o for o in catalog.recipe_objects(t) if o["kind"] == "DynamoGraphDeployment"))
    comp = next(c for c in dgd["spec"]["components"] if c["name"] == worker)
    comp["replicas"] = replicas
    res = _simulate(simulator, tid, dgd=dgd)
    assert res.ok == fits, [p.reason for p in res.pending()]
    if not fits:
        # The replicas are identical pods, so which one the scheduler leaves Pending is its choice; exactly one is.
        pending = res.pending()
        assert [p.component for p in pending] == [worker] and 0 <= pending[0].replica < replicas
        assert "Insufficient nvidia.com/gpu" in res.pending()[0].reason
    assert (check_target(t, dgd=dgd) == []) == fits


@pytest.mark.parametrize("case", ["too-few-nodes", "no-efa", "no-rdma", "no-toleration"])
def test_simulated_cluster_reports_the_schedulers_reason(simulator, case):
    """One pinned example of each shape that cannot fit: Pending, with the scheduler's own reason, and
    stacks/cluster/scheduling.py flags the same target."""
    from stacks import catalog
    from stacks.cluster.scheduling import check_target, default_shapes

    def few(g):  # three workers of 8 GPUs each (1 prefill, 2 decode), two nodes
        g["gpu"].count = 2

    def no_efa(g):
        g["gpu"].allocatable.pop("vpc.amazonaws.com/efa")

    def no_rdma(g):
        g["gpu"].allocatable.pop("rdma/ib")

    def untolerated(g):  # the GB200 Ultra workers tolerate nvidia.com/gpu=present only
        g["gpu"].taints = [{"key": "nvidia.com/gpu", "value": "true", "effect": "NoSchedule"}]

    tid, edit, reason, model_edit = {
        "too-few-nodes": (
            "ultra-vllm-disagg-h200-agentic-256k-1p2d",
            few,
            "Insufficient nvidia.com/gpu",
            lambda s: setattr(s, "count", 2),
        ),
        "no-efa": (
            "lightning-vllm-disagg-h100-dspark",
            no_efa,
            "Insufficient vpc.amazonaws.com/efa",
            lambda s: s.capacity.pop("vpc.amazonaws.com/efa"),
        ),
        "no-rdma": ("lightning-vllm-disagg-h200-dspark", no_rdma, "Insufficient rdma/ib", lambda s: s.capacity.pop("rdma/ib")),
        "no-toleration": (
            "ultra-vllm-agg-gb200-agentic-256k-2w-kv",
            untolerated,
            "untolerated taint {nvidia.com/gpu: true}",
            lambda s: setattr(s, "taints", [{"key": "nvidia.com/gpu", "value": "true", "effect": "NoSchedule"}]),
        ),
    }[case]
    res = _simulate(simulator, tid, edit=edit)
    pending = res.pending()
    assert pending, f"{tid}: every pod placed"
    assert all(reason in p.reason for p in pending), [p.reason for p in pending]
    assert any(p.placed for p in res.placements)  # the frontend still lands on a system node
    t = catalog.targets()[tid]
    system, gpu = default_shapes(t)
    model_edit(gpu)
    assert check_target(t, [system, gpu]) != []


def test_simulated_cluster_up_completes_the_download_job(kube, workspace, simulator):
    """`pulumi up` with the Job wait on: the download Job's pod is bound to a system node, kwok completes it,
    the Job controller marks the Job Complete and Pulumi's own Job await returns by itself."""
    import threading
    import time

    from stacks import catalog
    from stacks.cli.simulate import RUN_LABEL, target_scenario

    ns = "e-sim-up"
    target = TARGETS[0]
    sc = target_scenario(catalog.targets()[target], run_id="engine-up")
    simulator.create_nodes(sc.nodes)
    # The model cache on this cluster: a static ReadWriteMany volume pre-bound to the claim (as an EFS/FSx volume would be).
    storage = [
        {
            "apiVersion": "storage.k8s.io/v1",
            "kind": "StorageClass",
            "metadata": {"name": "simulated-rwx"},
            "provisioner": "kubernetes.io/no-provisioner",
            "volumeBindingMode": "Immediate",
        },
        {
            "apiVersion": "v1",
            "kind": "PersistentVolume",
            "metadata": {"name": f"{ns}-cache", "labels": {RUN_LABEL: "engine-up"}},
            "spec": {
                "capacity": {"storage": "10Ti"},
                "accessModes": ["ReadWriteMany"],
                "storageClassName": "simulated-rwx",
                "persistentVolumeReclaimPolicy": "Retain",
                "hostPath": {"path": "/tmp/simulated-model-cache"},
                "claimRef": {"namespace": ns, "name": "shared-model-cache"},
            },
        },
    ]
    kubectl(kube, "apply", "-f", "-", input=json.dumps({"apiVersion": "v1", "kind": "List", "items": storage}))
    cfg = base_config(
        kube, target, ns, storage={"className": "simulated-rwx"}, wait={"enabled": True, "dgd": False, "jobTimeout": "240s"}
    )
    stack = make_stack(workspace, ns, cfg)
    result: dict = {}

    def run_up():
        try:
            result["up"] = stack.up(on_output=None)
        except Exception as exc:  # reported below
            result["error"] = exc

    t = threading.Thread(target=run_up)
    try:
        t.start()
        pod, seen, deadline = None, "no pod", time.time() + 180
        while time.time() < deadline:
            out = kubectl(kube, "get", "pods", "-n", ns, "-l", "job-name=model-download", "-o", "json", check=False)
            items = json.loads(out.stdout or "{}").get("items", []) if out.returncode == 0 else []
            if items:
                seen = f"{items[0]['metadata']['name']} on {items[0]['spec'].get('nodeName')}: {items[0].get('status', {}).get('phase')}"
            if items and items[0]["spec"].get("nodeName") and items[0].get("status", {}).get("phase") == "Succeeded":
                pod = items[0]
                break
            time.sleep(1)
        assert pod, f"the download Job's pod did not complete within 180 s (last seen: {seen}): {result}"
        node = json.loads(kubectl(kube, "get", "node", pod["spec"]["nodeName"], "-o", "json").stdout)
        assert node["metadata"]["labels"]["dynamo.nvidia.com/pool"] == "system"
        t.join(timeout=240)
        assert not t.is_alive() and "error" not in result, result
        assert result["up"].summary.result == "succeeded"
        job = json.loads(kubectl(kube, "get", "job", "model-download", "-n", ns, "-o", "json").stdout)
        assert any(c["type"] == "Complete" and c["status"] == "True" for c in job["status"]["conditions"])
    finally:
        t.join(timeout=300)
        stack.destroy(on_output=None, run_program=True)
        stack.workspace.remove_stack(stack.name, force=True)


def test_protected_cache_class_change_is_refused(kube, workspace):
    """A PVC's storageClassName is immutable, so changing storage.className of the protected cache is refused
    on preview and up with the migration message (instead of every `up` failing on the API server's
    immutable-spec error), the claim is untouched, and going back converges."""
    from pulumi import automation as auto
    from pulumi.automation import errors

    ns = "e-cache-class"
    stack = make_stack(workspace, ns, base_config(kube, "lightning-vllm-agg-h100-dspark", ns, storage={"className": "class-a"}))
    try:
        stack.up(on_output=None)
        pvc = json.loads(kubectl(kube, "get", "pvc", "shared-model-cache", "-n", ns, "-o", "json").stdout)
        assert pvc["spec"]["storageClassName"] == "class-a"
        stack.set_config("dynamo:storage", auto.ConfigValue(value=json.dumps({"className": "class-b"})))
        for op in (stack.preview, stack.up):
            with pytest.raises(errors.CommandError) as e:
                op(on_output=None)
            text = str(e.value)
            assert "dynamo:storage.className: 'class-a' -> 'class-b'" in text, text[-3000:]
            assert "storage.existingClaim" in text
        pvc = json.loads(kubectl(kube, "get", "pvc", "shared-model-cache", "-n", ns, "-o", "json").stdout)
        assert pvc["spec"]["storageClassName"] == "class-a"
        # growing the cache is still an ordinary update; going back to class-a converges
        stack.set_config("dynamo:storage", auto.ConfigValue(value=json.dumps({"className": "class-a"})))
        stack.up(on_output=None)
        assert stack.preview(on_output=None).change_summary.get("same", 0) > 0
        assert not {k: v for k, v in stack.preview(on_output=None).change_summary.items() if k != "same"}
    finally:
        # Clean-up only (this namespace is the test's own): the kept claim goes with its namespace, without the two
        # engine runs an unprotect-and-destroy takes (destroying an unprotected cache is test_cache_opt_out_destroys_the_pvc).
        kubectl(kube, "delete", "namespace", ns, "--wait=false", check=False)
        stack.workspace.remove_stack(stack.name, force=True)


def test_simulated_cluster_checks_a_stack_against_a_node_inventory(kube, simulator, tmp_path, capsys):
    """`python -m stacks simulate --stack S --nodes <kubectl get nodes -o yaml>`: exit 0 when every pod of the
    stack finds a node of that inventory, 1 with the scheduler's reason when one does not."""
    import yaml

    from stacks import catalog
    from stacks.__main__ import main
    from stacks.cli.simulate import default_groups, node_objects

    groups, _ = default_groups(catalog.targets()["ultra-vllm-agg-b200-agentic-256k-2w-kv"])  # the stack's target
    nodes = node_objects(groups, "inventory", prefix="ip-10-0")
    inventory = tmp_path / "nodes.yaml"
    inventory.write_text(yaml.safe_dump({"apiVersion": "v1", "kind": "List", "items": nodes}))
    argv = ["simulate", "--stack", "ultra-b200-agg", "--nodes", str(inventory), "--kubeconfig", kube["kubeconfig"]]
    assert main(argv) == 0, capsys.readouterr().out
    assert "5/5 pods placed" in capsys.readouterr().out
    for n in nodes:  # the same cluster with H100s instead of B200s
        if "nvidia.com/gpu.product" in n["metadata"]["labels"]:
            n["metadata"]["labels"]["nvidia.com/gpu.product"] = "NVIDIA-H100-80GB-HBM3"
    inventory.write_text(yaml.safe_dump({"apiVersion": "v1", "kind": "List", "items": nodes}))
    assert main(argv) == 1
    out = capsys.readouterr().out
    assert "worker[0]\tPENDING: 0/3 nodes are available:" in out and "didn't match Pod's node affinity/selector" in out
    assert "Job/nemotron-ultra-model-download[0]\tip-10-0-system-" in out


# ---------------------------------------------------------------------------------------------------------------
# A chart bump in stacks/registry/versions.yaml on the real engine: a local Helm repository (no network here) serves two
# versions of a one-ConfigMap stand-in for the nvidia-device-plugin chart; moving the pin from the first to the
# second is one in-place update of the Helm release (same URN, the same object upgraded), nothing replaced.


def test_chart_bump_in_the_manifest_is_an_in_place_release_upgrade(kube, tmp_path):
    import functools
    import http.server
    import threading

    import yaml

    (tmp_path / "repo").mkdir()
    # The second name stands for a chart that moved (as NVIDIA's DRA driver chart did, to kubernetes-sigs'
    # dra-driver-nvidia-gpu): the release keeps its name, and the pin changes chart and version together.
    repo = chart_repo(tmp_path / "repo", "nvidia-device-plugin", ["0.20.0", "0.20.1"], also={"moved-device-plugin": ["0.21.0"]})
    server = http.server.ThreadingHTTPServer(
        ("127.0.0.1", 0), functools.partial(http.server.SimpleHTTPRequestHandler, directory=str(repo))
    )
    threading.Thread(target=server.serve_forever, daemon=True).start()
    work = tmp_path / "project"  # this test's own copy: it edits stacks/registry/versions.yaml
    work.mkdir()
    for name in ("Pulumi.yaml", "__main__.py", "pyproject.toml"):
        shutil.copy(ROOT / name, work / name)
    for d in ("components", "stacks"):
        shutil.copytree(ROOT / d, work / d, ignore=shutil.ignore_patterns("__pycache__"))
    (work / ".venv").symlink_to(ROOT / ".venv")
    manifest = work / "stacks" / "registry" / "versions.yaml"

    def pin(version: str, chart: str = "nvidia-device-plugin"):
        m = yaml_text.load(manifest.read_text())
        m["charts"]["nvidia-device-plugin"] = {
            "repo": f"http://127.0.0.1:{server.server_address[1]}",
            "chart": chart,
            "version": version,
        }
        manifest.write_text(yaml.safe_dump(m))

    ns = "e-chart-bump"
    pin("0.20.0")
    (tmp_path / "state").mkdir()
    stack = make_stack(
        {"dir": work, "backend": tmp_path / "state"},
        ns,
        base_config(
            kube,
            TARGETS[0],
            ns,
            cluster={"mode": "kubeconfig", "kubeconfigPath": kube["kubeconfig"], "installDevicePlugins": True},
        ),
    )
    try:
        stack.up(on_output=None)
        releases = {
            r["urn"]: r for r in stack.export_stack().deployment["resources"] if r["type"] == "kubernetes:helm.sh/v3:Release"
        }
        assert len(releases) == 1
        ((urn, before),) = releases.items()
        cm = json.loads(kubectl(kube, "get", "configmap", "-A", "-o", "json").stdout)
        pinned = [c for c in cm["items"] if c["metadata"]["name"].endswith("-pin")]
        assert [c["data"]["chartVersion"] for c in pinned] == ["0.20.0"]
        uid = pinned[0]["metadata"]["uid"]

        pin("0.20.1")
        result = stack.up(on_output=None)
        changes = result.summary.resource_changes
        assert (
            changes.get("update") == 1 and not changes.get("replace") and not changes.get("create") and not changes.get("delete")
        ), changes
        after = {
            r["urn"]: r for r in stack.export_stack().deployment["resources"] if r["type"] == "kubernetes:helm.sh/v3:Release"
        }
        assert list(after) == [urn] and after[urn]["outputs"]["version"] == "0.20.1" and after[urn]["id"] == before["id"]
        cm = kubectl(
            kube, "get", "configmap", "-n", pinned[0]["metadata"]["namespace"], pinned[0]["metadata"]["name"], "-o", "json"
        ).stdout
        assert (
            json.loads(cm)["data"]["chartVersion"] == "0.20.1" and json.loads(cm)["metadata"]["uid"] == uid
        )  # upgraded, not recreated

        # The chart moved: a new chart name at a new version under the same release is one in-place upgrade too.
        pin("0.21.0", chart="moved-device-plugin")
        result = stack.up(on_output=None)
        changes = result.summary.resource_changes
        assert (
            changes.get("update") == 1 and not changes.get("replace") and not changes.get("create") and not changes.get("delete")
        ), changes
        after = {
            r["urn"]: r for r in stack.export_stack().deployment["resources"] if r["type"] == "kubernetes:helm.sh/v3:Release"
        }
        assert (
            list(after) == [urn] and after[urn]["outputs"]["chart"] == "moved-device-plugin" and after[urn]["id"] == before["id"]
        )
        cm = json.loads(
            kubectl(
                kube, "get", "configmap", "-n", pinned[0]["metadata"]["namespace"], pinned[0]["metadata"]["name"], "-o", "json"
            ).stdout
        )
        assert (cm["data"]["chartName"], cm["data"]["chartVersion"], cm["metadata"]["uid"]) == (
            "moved-device-plugin",
            "0.21.0",
            uid,
        )
    finally:
        stack.destroy(on_output=None, run_program=True)
        stack.workspace.remove_stack(stack.name, force=True)
        server.shutdown()


@pytest.mark.engine
def test_the_image_prepuller_lands_on_a_joining_gpu_node_before_its_gpus_are_advertised(simulator):
    """On the real DaemonSet controller and scheduler, the h100-disagg stack's GPU nodes as they join, before their
    device plugin advertises nvidia.com/gpu and vpc.amazonaws.com/efa (none in their allocatable yet): the DGD's GPU
    workers stay Pending for the GPUs, while the image pre-puller (stacks/serving/prepull.py) gets one pod bound on
    every GPU node - the pod whose init container has the kubelet pull the workers' image - and none on the system
    nodes. So the image pull overlaps the device plugins' start (the timeline's pre-pull path)."""
    import time
    from urllib.parse import quote

    from stacks.cli.simulate import RUN_LABEL, eks_groups, node_objects, operator_pod_intents
    from stacks.program.render import program_for_stack
    from stacks.serving.prepull import PREPULL_LABEL

    run = "prepull"
    program = program_for_stack("h100-disagg")
    plan = program.entries[0].plan
    ds = copy.deepcopy(plan.image_prepuller)
    assert ds is not None, "the EKS stack's entry has no image pre-puller"
    groups = eks_groups(program.cluster_plan)
    gpu = next(g for g in groups if g.name == "gpu")
    for resource in ("nvidia.com/gpu", "vpc.amazonaws.com/efa"):  # the plugins' pods have not run yet
        gpu.allocatable.pop(resource, None)
    simulator.ensure_namespace()
    simulator.create_nodes(node_objects(groups, run), run)
    gpu_nodes = {f"sim-gpu-{i}" for i in range(gpu.count)}
    workers = [i for i in operator_pod_intents(plan.dgd) if "nvidia.com/gpu" in json.dumps(i.pod["spec"]["containers"])]
    assert workers and not simulator.submit(workers, run)
    ds["metadata"]["namespace"] = simulator.namespace
    ds["spec"]["template"]["metadata"]["labels"][RUN_LABEL] = run  # the simulator's cleanup deletes its pods
    path = f"/apis/apps/v1/namespaces/{simulator.namespace}/daemonsets"
    simulator.request("POST", path, ds)
    sel = quote(f"{PREPULL_LABEL}={ds['spec']['selector']['matchLabels'][PREPULL_LABEL]}")
    seen: dict = {}
    try:
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            pods = simulator.request("GET", f"/api/v1/namespaces/{simulator.namespace}/pods?labelSelector={sel}")["items"]
            seen = {p["metadata"]["name"]: p["spec"].get("nodeName") for p in pods}
            if {n for n in seen.values() if n} >= gpu_nodes:
                break
            time.sleep(0.2)
        assert set(seen.values()) == gpu_nodes and len(seen) == len(gpu_nodes), f"pre-puller pods after 60 s: {seen}"
        pending = simulator.wait_decided(run, len(workers), sum(g.count for g in groups))
        worker_pods = [p for p in pending if p["metadata"]["name"] in {w.pod["metadata"]["name"] for w in workers}]
        assert worker_pods and not any(p["spec"].get("nodeName") for p in worker_pods), "a worker bound without GPUs"
        reasons = [c.get("message", "") for p in worker_pods for c in p["status"].get("conditions") or []]
        assert all("Insufficient nvidia.com/gpu" in r for r in reasons if r), reasons
    finally:
        simulator.request("DELETE", f"{path}/{ds['metadata']['name']}", ok_missing=True)
