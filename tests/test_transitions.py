"""Day-2 changes a team makes to a running stack, each applied as a transition on the real Pulumi engine and a real
kube-apiserver: the old config is up, then the new one, and the assertions read the API server, not only the state.

After every step, every object the current config asks for is live, and an object live before the step is the same
object after it (its uid) unless the step changed what it is. What a step leaves behind (a retained namespace and
model cache) is named by the engine's output, with the namespace it really is in.

The steps run as the Automation API's ``up`` runs them (``pulumi up --yes --skip-preview``, what ``make local-up``
does), where a create under a new URN adopts the live object (server-side apply) and the delete of the old URN then
removes it; a preview runs first where a step's preview could fail on its own.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from stacks.program import build_program
from test_engine import (
    KEPT,
    RESOURCE,
    TOKEN,
    kube,  # noqa: F401  (a pytest fixture)
    kubectl,
    live_many,
    make_stack,
    project_copy,
    set_config,  # noqa: F401  (fixtures)
    workspace,  # noqa: F401  (a pytest fixture)
)
from stacks.registry import yaml_text

pytestmark = pytest.mark.engine
ROOT = Path(__file__).resolve().parent.parent

AGG, DISAGG, OTHER = (
    "lightning-vllm-agg-h100-dspark",
    "lightning-vllm-disagg-h100-dspark",
    "motif3-vllm-disagg-b200-chat-generic-2p1d-kv",
)


def cluster(kube) -> dict:
    return {"wait": {"enabled": False}, "cluster": {"mode": "kubeconfig", "kubeconfigPath": kube["kubeconfig"]}}


def asked_for(raw: dict) -> list[dict]:
    """The Kubernetes objects the config asks for: what the program plans (``build_program``, what `up` runs)."""
    return build_program(raw, "t", frozenset({"hfToken"})).objects()


def uid(kube, kind: str, name: str, ns: str = "") -> str | None:
    args = ["get", RESOURCE.get(kind, kind.lower()), name, "-o", "jsonpath={.metadata.uid}", *(["-n", ns] if ns else [])]
    r = kubectl(kube, *args, check=False)
    return r.stdout.strip() or None if r.returncode == 0 else None


def live_uids(kube, raw: dict) -> dict[tuple[str, str, str], str | None]:
    """(kind, namespace, name) -> uid on the server (None: not there) of every object the config asks for, read with
    one ``kubectl get`` per namespace (test_engine.live_many)."""
    return {k: o["metadata"]["uid"] if o else None for k, o in live_many(kube, asked_for(raw)).items()}


def apply(stack, kube, raw: dict, before: dict | None = None, preview: bool = False) -> tuple[dict, str]:
    """Set the stack's config to ``raw`` (keys not in it are removed), preview if asked, up; then check on the server that
    every object ``raw`` asks for is live and that each of them live in ``before`` is still the same object.
    Returns the live uids and the engine's output."""
    current = {
        k.split(":", 1)[1]
        for k in stack.get_all_config()
        if k.startswith("dynamo:") and k not in ("dynamo:hfToken", "dynamo:frontDoorApiKeys")
    }  # secrets: set apart
    if current - set(raw):
        stack.remove_all_config([f"dynamo:{key}" for key in sorted(current - set(raw))])
    set_config(stack, raw)
    if preview:
        stack.preview(on_output=None)
    printed: list[str] = []
    stack.up(on_output=printed.append)
    out = "\n".join(printed)
    now = live_uids(kube, raw)
    missing = sorted(k for k, v in now.items() if v is None)
    assert not missing, (missing, out[-3000:])
    changed = sorted(k for k, v in now.items() if before and k in before and before[k] and before[k] != v)
    assert not changed, (changed, out[-3000:])
    return now, out


def kept(out: str) -> set[tuple[str, str]]:
    return {(m["kind"], m["name"]) for m in KEPT.finditer(out)}


def resource_changes(stack) -> dict:
    changes = stack.history(page_size=1)[0].resource_changes
    assert changes and changes.get("same"), f"the last update recorded no resource changes: {changes!r}"
    return changes


# Each test starts from a stack an earlier version of the program last updated (tests/fixtures/serving-names-v1/: this
# project's own components/serving.py, serving_layer.py and cluster_source.py from before the serving layer's names
# became one per object: a single-target stack's Serving was ``serving``, a serve entry's graph was named by the entry,
# each kept object had its own hook ``<resource>-kept``). One `up` of today's program with the config unchanged
# upgrades it without a create, replace or delete; then come the changes. The control plane is this module's and goes
# with it, so no test spends a destroy.


def _upgraded(stack, kube, workspace, raw: dict) -> dict:
    """Up with the earlier components, then with today's and the same config; returns the live uids."""
    _use_components(workspace, legacy=True)
    live, _ = apply(stack, kube, raw)
    _use_components(workspace, legacy=False)
    live, out = apply(stack, kube, raw, before=live)
    changes = resource_changes(stack)
    assert not {k for k in changes if k in ("create", "delete", "replace")}, (changes, out[-2000:])
    return live


def _gateway_crds(kube) -> None:
    """The CRDs the managed front door's charts install (tests/test_front_door_gateway.py: Envoy Gateway's bundle and
    cert-manager's), applied into this module's control plane."""
    from test_front_door_gateway import cert_manager_crd_files, envoy_gateway_crd_files

    files = [*envoy_gateway_crd_files(), *cert_manager_crd_files()]
    kubectl(kube, "apply", "--server-side", *[a for f in files for a in ("-f", str(f))])
    kubectl(kube, "wait", "--for=condition=Established", "--timeout=120s", "crd", "--all")


def _forget(stack, *namespaces, kube) -> None:
    stack.workspace.remove_stack(stack.name, force=True)
    for ns in namespaces:
        kubectl(kube, "delete", "namespace", ns, "--wait=false", check=False)


def test_single_to_serve_and_back_keeps_every_live_object_and_checks_credentials(kube, legacy_workspace, tmp_path):
    """single -> serve (a named entry) -> single: one name per object in both forms, so no step creates, replaces or
    deletes anything and the DGD, its ConfigMap, the Job, the cache and the namespace stay the same objects. Then, with
    nothing to change, a bogus token fails `preview` and `up` before any resource, naming the kubeconfig."""
    import yaml
    from pulumi import automation as auto

    ns = "t-forms"
    single = {"target": AGG, "namespace": ns, **cluster(kube)}
    serve = {"serve": [{"name": "chat", "target": AGG, "namespace": ns}], **cluster(kube)}
    stack = make_stack(legacy_workspace, ns, single)
    try:
        first = _upgraded(stack, kube, legacy_workspace, single)
        for raw in (serve, single):
            _, out = apply(stack, kube, raw, before=first, preview=True)
            changes = resource_changes(stack)
            assert set(changes) <= {"same"}, (changes, out[-2000:])

        config = yaml_text.load(Path(kube["kubeconfig"]).read_text())
        for user in config["users"]:
            user["user"] = {"token": "not-a-valid-token"}  # an expired or revoked token
        bogus = tmp_path / "kubeconfig"
        bogus.write_text(yaml.safe_dump(config))
        set_config(stack, {"cluster": {"mode": "kubeconfig", "kubeconfigPath": str(bogus)}})
        for run in (stack.preview, stack.up):
            with pytest.raises(auto.CommandError) as err:
                run(on_output=None)
            msg = str(err.value)
            assert "the cluster credentials of" in msg and str(bogus) in msg, msg[-2000:]
            assert re.search(r"Unauthorized|[Ff]orbidden", msg), msg[-2000:]
        assert live_uids(kube, single) == first
    finally:
        _forget(stack, ns, kube=kube)


def test_entries_added_renamed_removed_and_moved_keep_what_the_config_asks_for(kube, legacy_workspace):
    """A serve stack through the changes of its first months, each one `up`: add an entry, rename one, remove the one
    that owns its namespace (one run; what it keeps is named), move an entry to another namespace (the warning names
    the namespace left behind, not the live one), change an entry's target (the cache and namespace stay), rotate the
    HF token (the Secret is updated in place: never a moment without it)."""
    import base64

    from pulumi import automation as auto

    a, b, c = "t-entries-a", "t-entries-b", "t-entries-c"
    base = cluster(kube)
    one = {"serve": [{"name": "chat", "target": AGG, "namespace": a}], **base}
    two = {"serve": [{"name": "chat", "target": AGG, "namespace": a}, {"target": OTHER, "namespace": b}], **base}
    renamed = {"serve": [{"name": "talk", "target": AGG, "namespace": a}, {"target": OTHER, "namespace": b}], **base}
    removed = {"serve": [{"name": "talk", "target": AGG, "namespace": a}], **base}
    moved = {"serve": [{"name": "talk", "target": AGG, "namespace": c}], **base}
    retargeted = {"serve": [{"name": "talk", "target": DISAGG, "namespace": c}], **base}
    stack = make_stack(legacy_workspace, "t-entries", one)
    try:
        live = _upgraded(stack, kube, legacy_workspace, one)
        live, _ = apply(stack, kube, two, before=live)
        live, _ = apply(stack, kube, renamed, before=live)
        assert set(resource_changes(stack)) <= {"same"}, resource_changes(stack)

        # Removing the entry that owns namespace b: one run, and it says what it kept there.
        b_ns, b_claim = uid(kube, "Namespace", b), uid(kube, "PersistentVolumeClaim", "shared-model-cache", b)
        live, out = apply(stack, kube, removed, before=live, preview=True)
        assert kept(out) == {("Namespace", b), ("PersistentVolumeClaim", f"{b}/shared-model-cache")}, out[-3000:]
        assert uid(kube, "Namespace", b) == b_ns and uid(kube, "PersistentVolumeClaim", "shared-model-cache", b) == b_claim
        assert uid(kube, "DynamoGraphDeployment", "motif3-disagg-b200", b) is None  # no longer asked for

        # Moving the entry to namespace c (a's objects were recorded by the earlier program): a's namespace and cache are
        # left (kept) and named as a's; c's objects are live.
        a_claim = uid(kube, "PersistentVolumeClaim", "shared-model-cache", a)
        live, out = apply(stack, kube, moved)
        assert kept(out) == {("Namespace", a), ("PersistentVolumeClaim", f"{a}/shared-model-cache")}, out[-3000:]
        assert f"kubectl delete namespace {a} " in out and f"kubectl delete namespace {c}" not in out
        assert uid(kube, "PersistentVolumeClaim", "shared-model-cache", a) == a_claim

        # A new target in c: a new DGD; the namespace and the model cache (same model) are the same objects.
        before = dict(live)
        live, _ = apply(stack, kube, retargeted)
        for key in (("Namespace", "", c), ("PersistentVolumeClaim", c, "shared-model-cache")):
            assert live[key] == before[key], key
        assert uid(kube, "DynamoGraphDeployment", "vllm-agg-h100-dspark", c) is None

        # Rotating the HF token: the Secret is updated in place (same uid), holding the new token.
        secret_uid = uid(kube, "Secret", "hf-token-secret", c)
        stack.set_config("dynamo:hfToken", auto.ConfigValue(value=TOKEN + "rotated", secret=True))
        apply(stack, kube, retargeted, before=live)
        assert uid(kube, "Secret", "hf-token-secret", c) == secret_uid
        data = kubectl(kube, "get", "secret", "hf-token-secret", "-n", c, "-o", "jsonpath={.data.HF_TOKEN}").stdout
        assert base64.b64decode(data).decode() == TOKEN + "rotated"
        assert not {k for k in resource_changes(stack) if k in ("delete", "replace", "create")}, resource_changes(stack)
    finally:
        _forget(stack, a, b, c, kube=kube)


def _children(pid: int) -> list[int]:
    out = []
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        if int(fields[1]) == pid:
            out.append(int(stat.parent.name))
    return out


def _alive(pid: int) -> bool:
    """Running (a zombie, exited but not yet reaped by its new parent, counts as gone)."""
    try:
        return (Path("/proc") / str(pid) / "stat").read_text().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False


def _cmdline(pid: int) -> str:
    try:
        return (Path("/proc") / str(pid) / "cmdline").read_bytes().replace(b"\0", b" ").decode()
    except OSError:
        return ""


def _name(pid: int) -> str:
    try:
        return (Path("/proc") / str(pid) / "cmdline").read_bytes().split(b"\0")[0].decode()
    except OSError:
        return ""


def test_a_killed_up_leaves_no_language_host_behind(kube, workspace):
    """SIGKILL the engine while the program runs: the language host (and the program it runs) exit by themselves
    within seconds, instead of running on with nothing to report to."""
    import os
    import signal
    import subprocess
    import time

    ns = "t-killed"
    # Waits on: the download Job never completes on a cluster without nodes, so the program is still running when killed.
    raw = {"target": AGG, "namespace": ns, **cluster(kube), "wait": {"enabled": True}}
    stack = make_stack(workspace, ns, raw)
    env = {**os.environ, **stack.workspace.env_vars}
    proc = subprocess.Popen(
        ["pulumi", "up", "--stack", ns, "--yes", "--skip-preview", "--non-interactive"],
        cwd=workspace["dir"],
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        # The language host that runs the program (the engine may start others briefly, e.g. to list plugins): the
        # one with a child process, the Python program.
        host, program, deadline = None, None, time.monotonic() + 90
        while program is None and time.monotonic() < deadline:
            for c in _children(proc.pid):
                if _name(c).endswith("pulumi-language-python") and _alive(c):
                    # the program runs through the SDK's executor (other children, e.g. a plugin scan, end at once)
                    kids = [k for k in _children(c) if _alive(k) and "pulumi-language-python-exec" in _cmdline(k)]
                    if kids:
                        host, program = c, kids[0]
            time.sleep(0.2)
        assert program is not None, "the engine started no program within 90 s"
        # Killed mid-run: the stack's namespace is live, so the engine is applying what the program registered, and the
        # program is still waiting (on the cache and the download Job, which cannot complete here).
        live, deadline = False, time.monotonic() + 90
        while not live and time.monotonic() < deadline and proc.poll() is None:
            live = kubectl(kube, "get", "namespace", ns, "-o", "name", check=False).returncode == 0
            if not live:
                time.sleep(0.5)
        assert live, (
            f"namespace {ns} did not become live within 90 s (the up {'ended' if proc.poll() is not None else 'still runs'})"
        )
        assert proc.poll() is None and _alive(host) and _alive(program), "the up ended before it could be killed"
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait()
        t0 = time.monotonic()
        while _alive(host) and time.monotonic() - t0 < 30:
            time.sleep(0.2)
        left = _alive(host) and "pulumi-language-python" in _name(host)
        assert not left, f"the language host (pid {host}) still runs {time.monotonic() - t0:.0f} s after the engine was killed"
        while _alive(program) and time.monotonic() - t0 < 30:
            time.sleep(0.2)
        assert not _alive(program), f"the program (pid {program}) still runs after the engine and its host are gone"
        print(f"language host exited {time.monotonic() - t0:.1f} s after the engine was killed")
    finally:
        if proc.poll() is None:
            proc.kill()
        # What docs/operating.md says to do after a killed `up`: `pulumi cancel` deletes the stack's lock files (the
        # file backend too: pulumi/pulumi pkg/backend/diy CancelCurrentUpdate), and the stack can be used again.
        subprocess.run(
            ["pulumi", "cancel", "--yes", "--stack", ns], cwd=workspace["dir"], env=env, capture_output=True, check=True
        )
        # ...then `pulumi refresh --clear-pending-creates` drops the creates the killed engine never saw finish.
        r = subprocess.run(
            ["pulumi", "refresh", "--clear-pending-creates", "--yes", "--skip-preview", "--non-interactive", "--stack", ns],
            cwd=workspace["dir"],
            env=env,
            capture_output=True,
            text=True,
        )
        assert r.returncode == 0, r.stdout[-1500:] + r.stderr[-1500:]
        assert not stack.export_stack().deployment.get("pending_operations"), "pending operations left after the refresh"
        stack.workspace.remove_stack(stack.name, force=True)
        kubectl(kube, "delete", "namespace", ns, "--wait=false", check=False)


# ---------------------------------------------------------------------------------------------------------------
# The earlier components.

LEGACY = Path(__file__).resolve().parent / "fixtures" / "serving-names-v1"


def _use_components(workspace, legacy: bool) -> None:
    import shutil

    src = Path(__file__).resolve().parent.parent / "components"
    for name in ("serving.py", "serving_layer.py", "cluster_source.py"):
        target = Path(workspace["dir"]) / "components" / name
        shutil.copy(LEGACY / f"{name}.txt" if legacy else src / name, target)


@pytest.fixture
def legacy_workspace(tmp_path_factory):
    """A workspace of its own (the other tests' workspace keeps today's components)."""
    return project_copy(tmp_path_factory, "project-legacy")


def test_the_front_door_opens_rotates_its_keys_and_closes_without_touching_serving(kube, workspace):
    """A serving stack gains the committed public door (Pulumi.h100-public.yaml's ``frontDoor``: internet exposure
    from its source ranges, API keys, TLS from cert-manager, a rate limit, NetworkPolicies; the charts' controllers are
    not run here, their CRDs are), its keys are rotated, and the door is closed again: each step one `up`. The door's
    objects are live as planned, the key Secret holds the keys and is updated in place, no key is in the state or the
    outputs, and the serving objects stay the same objects throughout."""
    import base64
    import json
    from pulumi import automation as auto

    _gateway_crds(kube)
    ns = "t-door"
    serving = {"target": AGG, "namespace": ns, "networkPolicy": {"enabled": True}, **cluster(kube)}
    public = yaml_text.load((ROOT / "Pulumi.h100-public.yaml").read_text())["config"]["dynamo:frontDoor"]
    assert (public["exposure"], public["auth"]["mode"], public["tls"]["mode"]) == ("internet", "apiKeys", "certManager")
    door = {**serving, "frontDoor": {**public, "installControllers": False}}
    keys = {"team-a": "k" * 20 + "first-key-a-0001", "team-b": "k" * 20 + "first-key-b-0002"}
    stack = make_stack(workspace, ns, serving)
    try:
        before, _ = apply(stack, kube, serving)
        stack.set_config("dynamo:frontDoorApiKeys", auto.ConfigValue(value=json.dumps(keys), secret=True))
        live, out = apply(stack, kube, door, before=before)
        planned = [
            o for layer in build_program(door, "t", frozenset({"hfToken", "frontDoorApiKeys"})).layers for o in layer.objects
        ]
        kinds = {o["kind"] for o in planned}
        assert {
            "Gateway",
            "GatewayClass",
            "HTTPRoute",
            "SecurityPolicy",
            "BackendTrafficPolicy",
            "ClientTrafficPolicy",
            "Secret",
            "NetworkPolicy",
            "Certificate",
            "EnvoyProxy",
        } <= kinds
        on_server = live_many(kube, planned)  # every object of the committed door is live
        assert [k for k, v in on_server.items() if v is None] == []
        (proxy,) = [v for (kind, _, _), v in on_server.items() if kind == "EnvoyProxy"]
        assert proxy["spec"]["provider"]["kubernetes"]["envoyService"]["loadBalancerSourceRanges"] == public["sourceRanges"]
        (cert,) = [v["spec"] for (kind, _, _), v in on_server.items() if kind == "Certificate"]
        assert cert["dnsNames"] == [public["hostname"]] and cert["issuerRef"]["name"] == public["tls"]["issuer"]["name"]
        (secret,) = [o for o in planned if o["kind"] == "Secret"]
        name = secret["metadata"]["name"]
        data = json.loads(kubectl(kube, "get", "secret", name, "-n", ns, "-o", "json").stdout)["data"]
        assert {k: base64.b64decode(v).decode() for k, v in data.items()} == keys
        route = json.loads(kubectl(kube, "get", "httproute", f"{name[: -len('-api-keys')]}", "-n", ns, "-o", "json").stdout)
        assert route["spec"]["rules"][0]["timeouts"]["request"].endswith("s")
        state = json.dumps(stack.export_stack().deployment) + json.dumps(
            {k: v.value for k, v in stack.outputs().items()}, default=str
        )
        assert not any(k in state or k in out for k in keys.values()), "an API key in plain text in the state, outputs or log"
        assert stack.outputs()["frontDoorUrl"].value == f"https://{public['hostname']}/v1"

        rotated = {"team-a": "r" * 20 + "second-key-a-003", "team-c": "r" * 20 + "second-key-c-004"}
        uid_before = uid(kube, "Secret", name, ns)
        stack.set_config("dynamo:frontDoorApiKeys", auto.ConfigValue(value=json.dumps(rotated), secret=True))
        live, out = apply(stack, kube, door, before=live)
        data = json.loads(kubectl(kube, "get", "secret", name, "-n", ns, "-o", "json").stdout)["data"]
        assert {k: base64.b64decode(v).decode() for k, v in data.items()} == rotated
        assert uid(kube, "Secret", name, ns) == uid_before  # updated in place: no moment without the Secret

        stack.remove_config("dynamo:frontDoorApiKeys")
        closed, out = apply(stack, kube, serving, before={k: v for k, v in live.items() if k in before})
        for o in planned:
            kind = RESOURCE.get(o["kind"], o["kind"].lower())
            md = o["metadata"]
            if o["kind"] == "Namespace":
                continue
            assert uid(kube, o["kind"], md["name"], md.get("namespace", "")) is None, (kind, md["name"], out[-1500:])
        assert closed == before

        # The committed serving stack's door (Pulumi.h100-serving.yaml: gateway: existing, routes on the platform
        # team's Gateway) on the same serving objects: its route attaches to the Gateway the file names, with a timeout
        # and the header removals, and the serving objects stay the same objects.
        committed = yaml_text.load((ROOT / "Pulumi.h100-serving.yaml").read_text())["config"]["dynamo:frontDoor"]
        existing = {**serving, "frontDoor": committed}
        attached, out = apply(stack, kube, existing, before=closed)
        routes = [
            o
            for layer in build_program(existing, "t", frozenset({"hfToken"})).layers
            for o in layer.objects
            if o["kind"] == "HTTPRoute"
        ]
        assert routes, "the committed door plans no HTTPRoute"
        for r in routes:
            got = json.loads(kubectl(kube, "get", "httproute", r["metadata"]["name"], "-n", ns, "-o", "json").stdout)
            gw = committed["existingGateway"]
            assert [(p["namespace"], p["name"], p.get("sectionName")) for p in got["spec"]["parentRefs"]] == [
                (gw["namespace"], gw["name"], gw.get("sectionName"))
            ]
            for rule in got["spec"]["rules"]:
                assert rule["timeouts"]["request"].endswith("s") and rule["timeouts"]["request"] != "0s"
                removed = [
                    h
                    for f in rule.get("filters") or []
                    if f["type"] == "RequestHeaderModifier"
                    for h in f["requestHeaderModifier"].get("remove") or []
                ]
                assert "x-worker-instance-id" in [h.lower() for h in removed], rule
        assert {k: v for k, v in attached.items() if k in closed} == closed
    finally:
        _forget(stack, ns, "dynamo-gateway", kube=kube)
