"""Why the front door removes Dynamo's routing headers and has the frontend drop a client's ``nvext``, shown on the
real Dynamo 1.6.1 frontend and mocker (the serving rig, tests/rig.py), two workers each time:

- with ``frontDoor.clientNvext: true`` (the frontend as upstream runs it), a client that names a worker in
  ``x-worker-instance-id`` (or its alias ``x-dynamo-worker-instance-id``) gets every request served there, and the same
  requests after the route's header filter (what Envoy does with the HTTPRoute's ``RequestHeaderModifier.remove``) are
  routed by the frontend again; but the same choice made in the JSON body (``nvext.backend_instance_id``,
  ``nvext.decode_worker_id``) passes any header filter and pins the worker just as well;
- with the door's default (``clientNvext`` false: the DGD's frontend carries ``DYN_DISABLE_FRONTEND_NVEXT``), neither
  the body nor the header pins a worker, and answers carry no ``nvext``;
- without the door anyone on the frontend's port may ``POST /busy_threshold`` (the load at which it refuses every
  request); behind it the frontend runs with ``DYN_DISABLE_FRONTEND_ADMIN_API`` and the route is gone.

With nvext on, the worker that served is read from the answer (``nvext.extra_fields: ["worker_id"]``, as
frontDoorSmokeTest does); with it off, from the workers' own request counters (``dynamo_component_requests_total`` of
each mocker's system server, whose ``worker_id`` label is the worker's id in hex)."""

from __future__ import annotations

import collections
import json
import re
import urllib.error
import urllib.request

import pytest

from rig import start_rig
from stacks.program import build_program

AGG = "lightning-vllm-agg-h100-dspark"
REQUESTS = 12


def _rig(tmp_path_factory, name: str, door: dict):
    cfg = {
        "target": AGG,
        "namespace": "llm",
        "hfTokenSecretName": "hf",
        "createNamespace": False,
        "replicas": {"agg": 2},
        "frontDoor": door,
    }
    program = build_program(cfg, "t")
    return program, start_rig(program.entries[0].plan.dgd, tmp_path_factory.mktemp(name))


@pytest.fixture(scope="module")
def nvext_allowed(tmp_path_factory):
    program, rig = _rig(tmp_path_factory, "door-rig-nvext", {"enabled": True, "clientNvext": True})
    with rig as r:
        yield program, r


@pytest.fixture(scope="module")
def door_default(tmp_path_factory):
    program, rig = _rig(tmp_path_factory, "door-rig-default", {"enabled": True})
    with rig as r:
        yield program, r


@pytest.fixture(scope="module")
def no_door(tmp_path_factory):
    program, rig = _rig(tmp_path_factory, "door-rig-none", {"enabled": False})
    with rig as r:
        yield program, r


def _busy_threshold(rig, method: str) -> int:
    body = json.dumps({"model": rig.model, "active_decode_blocks_threshold": 0.01}).encode() if method == "POST" else None
    req = urllib.request.Request(
        rig.frontend_url + "/busy_threshold", data=body, method=method, headers={"Content-Type": "application/json"}
    )
    try:
        with urllib.request.urlopen(req, timeout=30) as r:
            return r.status
    except urllib.error.HTTPError as e:
        return e.code


def test_behind_the_door_no_client_reaches_the_frontend_admin_api(no_door, door_default, nvext_allowed):
    """Without the door the 1.6.1 frontend lets anyone on its port set the load at which it refuses every request
    (POST /busy_threshold); behind the door (either nvext setting) that route does not exist, and the door's routes
    pass only /v1 to it."""
    _, open_rig = no_door
    assert _busy_threshold(open_rig, "POST") == 200 and _busy_threshold(open_rig, "GET") == 200
    for program, rig in (door_default, nvext_allowed):
        assert _frontend_env(program).get("DYN_DISABLE_FRONTEND_ADMIN_API") == "1"
        assert _busy_threshold(rig, "POST") == 404 and _busy_threshold(rig, "GET") == 404
        route = next(o for layer in program.layers for o in layer.objects if o["kind"] == "HTTPRoute")
        assert [m["path"] for m in route["spec"]["rules"][0]["matches"]] == [{"type": "PathPrefix", "value": "/v1"}]


def _frontend_env(program) -> dict:
    """The env the program gives the DGD's frontend containers (name -> value)."""
    frontend = next(c for c in program.entries[0].plan.dgd["spec"]["components"] if c["type"] == "frontend")
    return {e["name"]: e.get("value") for c in frontend["podTemplate"]["spec"]["containers"] for e in c.get("env") or []}


def _ask(rig, headers: dict, nvext: dict) -> dict:
    body = {
        "model": rig.model,
        "messages": [{"role": "user", "content": "hi"}],
        "max_tokens": 4,
        "nvext": {"extra_fields": ["worker_id"], **nvext},
    }
    req = urllib.request.Request(
        rig.frontend_url + "/v1/chat/completions",
        data=json.dumps(body).encode(),
        headers={"Content-Type": "application/json", **headers},
    )
    with urllib.request.urlopen(req, timeout=60) as r:
        assert r.status == 200
        return json.loads(r.read())


def _served_by(rig, headers: dict, nvext: dict | None = None) -> int:
    return _ask(rig, headers, nvext or {})["nvext"]["worker_id"]["decode_worker_id"]


def _through_the_route(program, headers: dict) -> dict:
    """The request headers after the route's header filter (names compare case-insensitively, as in HTTP)."""
    route = next(o for layer in program.layers for o in layer.objects if o["kind"] == "HTTPRoute")
    removed = {
        h.lower()
        for f in route["spec"]["rules"][0]["filters"]
        if f["type"] == "RequestHeaderModifier"
        for h in f["requestHeaderModifier"]["remove"]
    }
    return {k: v for k, v in headers.items() if k.lower() not in removed}


def _served_counts(rig) -> dict[int, float]:
    """Worker id -> generate requests it has served, from each mocker's own /metrics."""
    out: dict[int, float] = {}
    for pod in rig.pods:
        if pod.component_type == "frontend":
            continue
        with urllib.request.urlopen(f"http://127.0.0.1:{pod.ports['system']}/metrics", timeout=10) as r:
            text = r.read().decode()
        for m in re.finditer(r"^dynamo_component_requests_total\{([^}]*)\} (\S+)$", text, re.M):
            labels = dict(re.findall(r'(\w+)="([^"]*)"', m[1]))
            if labels.get("dynamo_endpoint") == "generate":
                wid = int(labels["worker_id"], 16)
                out[wid] = out.get(wid, 0) + float(m[2])
    return out


@pytest.mark.parametrize("header", ["x-worker-instance-id", "X-Dynamo-Worker-Instance-Id"])
def test_a_routing_header_pins_a_worker_and_the_route_filter_takes_that_away(nvext_allowed, header):
    program, rig = nvext_allowed
    free = collections.Counter(_served_by(rig, {}) for _ in range(REQUESTS))
    assert len(free) == 2, f"the frontend used {dict(free)}: two workers were expected to share {REQUESTS} requests"
    target = min(free, key=free.get)  # the less used worker
    pinned = collections.Counter(_served_by(rig, {header: str(target)}) for _ in range(REQUESTS))
    assert pinned == {target: REQUESTS}, f"{header}: {dict(pinned)}"
    filtered = _through_the_route(program, {header: str(target)})
    assert filtered == {}
    again = collections.Counter(_served_by(rig, filtered) for _ in range(REQUESTS))
    assert len(again) == 2, f"after the filter the frontend still sent every request to one worker: {dict(again)}"


@pytest.mark.parametrize("field", ["backend_instance_id", "decode_worker_id"])
def test_a_worker_named_in_the_body_passes_every_header_filter(nvext_allowed, field):
    """What the header filter cannot reach: with nvext on, the body's choice pins the worker behind any route."""
    program, rig = nvext_allowed
    assert "DYN_DISABLE_FRONTEND_NVEXT" not in _frontend_env(program)
    free = collections.Counter(_served_by(rig, {}) for _ in range(REQUESTS))
    target = min(free, key=free.get)
    pinned = collections.Counter(_served_by(rig, _through_the_route(program, {}), {field: target}) for _ in range(REQUESTS))
    assert pinned == {target: REQUESTS}, f"nvext.{field}: {dict(pinned)}"


def test_behind_the_door_neither_body_nor_header_picks_the_worker(door_default):
    program, rig = door_default
    env = _frontend_env(program)
    # Dynamo's value: "set DYN_DISABLE_FRONTEND_NVEXT=1" (its security guide); the rig passes the DGD's DYN_* env on
    assert env.get("DYN_DISABLE_FRONTEND_NVEXT") == "1"
    assert next(p for p in rig.pods if p.component_type == "frontend").env.get("DYN_DISABLE_FRONTEND_NVEXT") == "1"
    workers = sorted(_served_counts(rig))
    assert len(workers) == 2, f"the workers' metrics name {workers}: two workers expected"
    target = workers[0]
    attempts = [
        ({}, {"backend_instance_id": target}),
        ({}, {"decode_worker_id": target}),
        ({"x-worker-instance-id": str(target)}, {}),
    ]
    for headers, nvext in attempts:
        before = _served_counts(rig)
        answers = [_ask(rig, headers, nvext) for _ in range(REQUESTS)]
        after = _served_counts(rig)
        served = {w: after.get(w, 0) - before.get(w, 0) for w in workers}
        assert sum(served.values()) == REQUESTS, served
        assert all(n > 0 for n in served.values()), f"{headers or nvext}: every request went to one worker: {served}"
        assert all("nvext" not in a or not a["nvext"] for a in answers), (
            f"{headers or nvext}: an answer disclosed {answers[0].get('nvext')}"
        )


def _run_smoke_test(program, rig) -> tuple[str, dict]:
    """frontDoorSmokeTest as a user runs it, with the gateway's URL replaced by the rig frontend's (no gateway runs
    here: the 401 step needs one, tests/test_front_door_gateway.py checks authentication in Envoy's configuration)."""
    import subprocess

    snippet = program.layer_outputs()["frontDoorSmokeTest"]
    steps = [f"URL={rig.frontend_url}/v1" if step.startswith("URL=") else step for step in snippet.split(" && ")]
    assert len(steps) == len(snippet.split(" && ")) and any(s.startswith("URL=") for s in steps)
    body = json.loads(re.search(r"-d '(\{.*?\})' \|", snippet)[1])
    done = subprocess.run(["bash", "-c", " && ".join(steps)], capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    return done.stdout, body


def test_the_smoke_test_streams_the_whole_answer_without_worker_ids_behind_the_door(door_default):
    program, rig = door_default
    out, body = _run_smoke_test(program, rig)
    assert "with the key: 200" in out
    assert body["ignore_eos"] is True and "nvext" not in body  # the whole max_tokens, whatever the model would stop at
    chunks = int(re.search(r"^(\d+) streamed chunks", out, re.M)[1])
    assert chunks >= 0.9 * body["max_tokens"], out  # several tokens may share a chunk


def test_the_smoke_test_names_the_workers_when_clients_may_use_nvext(nvext_allowed):
    program, rig = nvext_allowed
    out, body = _run_smoke_test(program, rig)
    lines = re.findall(r'^\s*(\d+) "worker_id":\{"prefill_worker_id":(\d+),"decode_worker_id":(\d+)\}$', out, re.M)
    assert lines, out
    workers = set(_served_counts(rig))
    assert {int(d) for _, _, d in lines} <= workers
    assert sum(int(n) for n, _, _ in lines) >= body["max_tokens"]  # every chunk of the answer names its worker
