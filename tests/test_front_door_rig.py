"""Why every front-door route removes Dynamo's routing headers, shown on the real Dynamo 1.6.1 frontend and mocker
(the serving rig, tests/rig.py): a client that names a worker in ``x-worker-instance-id`` (or its alias
``x-dynamo-worker-instance-id``) gets every request served there, and the same requests with the route's header
filter applied (what Envoy does with the HTTPRoute's ``RequestHeaderModifier.remove``) are routed by the frontend again.
The worker that served is read from the response (``nvext.extra_fields: ["worker_id"]``), as frontDoorSmokeTest does."""
from __future__ import annotations

import collections
import json
import urllib.request

import pytest

from rig import start_rig
from stacks.program import build_program

AGG = "lightning-vllm-agg-h100-dspark"
REQUESTS = 12


@pytest.fixture(scope="module")
def two_workers(tmp_path_factory):
    cfg = {"target": AGG, "namespace": "llm", "hfTokenSecretName": "hf", "replicas": {"agg": 2}, "frontDoor": {"enabled": True}}
    program = build_program(cfg, "t")
    with start_rig(program.entries[0].plan.dgd, tmp_path_factory.mktemp("door-rig")) as rig:
        yield program, rig


def _served_by(rig, headers: dict) -> int:
    body = {"model": rig.model, "messages": [{"role": "user", "content": "hi"}], "max_tokens": 4,
            "nvext": {"extra_fields": ["worker_id"]}}
    req = urllib.request.Request(rig.frontend_url + "/v1/chat/completions", data=json.dumps(body).encode(),
                                 headers={"Content-Type": "application/json", **headers})
    with urllib.request.urlopen(req, timeout=60) as r:
        return json.loads(r.read())["nvext"]["worker_id"]["decode_worker_id"]


def _through_the_route(program, headers: dict) -> dict:
    """The request headers after the route's header filter (names compare case-insensitively, as in HTTP)."""
    route = next(o for layer in program.layers for o in layer.objects if o["kind"] == "HTTPRoute")
    removed = {h.lower() for f in route["spec"]["rules"][0]["filters"] if f["type"] == "RequestHeaderModifier"
               for h in f["requestHeaderModifier"]["remove"]}
    return {k: v for k, v in headers.items() if k.lower() not in removed}


@pytest.mark.parametrize("header", ["x-worker-instance-id", "X-Dynamo-Worker-Instance-Id"])
def test_a_routing_header_pins_a_worker_and_the_route_filter_takes_that_away(two_workers, header):
    program, rig = two_workers
    free = collections.Counter(_served_by(rig, {}) for _ in range(REQUESTS))
    assert len(free) == 2, f"the frontend used {dict(free)}: two workers were expected to share {REQUESTS} requests"
    target = min(free, key=free.get)  # the less used worker
    pinned = collections.Counter(_served_by(rig, {header: str(target)}) for _ in range(REQUESTS))
    assert pinned == {target: REQUESTS}, f"{header}: {dict(pinned)}"
    filtered = _through_the_route(program, {header: str(target)})
    assert filtered == {}
    again = collections.Counter(_served_by(rig, filtered) for _ in range(REQUESTS))
    assert len(again) == 2, f"after the filter the frontend still sent every request to one worker: {dict(again)}"
