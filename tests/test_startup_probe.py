"""GPU workers' startup probes every 5 s within upstream's own budget (stacks/serving/startup_probe.py).

The targets are the catalog's (``catalog.targets()``); the expected probes and budgets are read from each target's
upstream deploy file (``fidelity.snapshot_dir(t.reference) / t.upstream``), not from the step's constants: the budget a
startup probe allows is ``failureThreshold * periodSeconds`` (Kubernetes docs, "Configure Liveness, Readiness and
Startup Probes", "Protect slow starting containers with startup probes").
"""

from __future__ import annotations

import copy

import pytest

from stacks import catalog
from stacks.cli import fidelity
from stacks.program.render import render_config, render_target
from stacks.serving import startup_probe as sp
from stacks.config.keys import ConfigError

TARGETS = sorted(catalog.targets().values(), key=lambda t: t.id)
STORAGE_CLASS = "fsx-lustre"
PULL = ("ngc-pull",)
needs_reference = pytest.mark.needs_reference
FAST = {"enabled": True}  # the step is opt-in


def _dgd(objs):
    return next(o for o in objs if o["kind"] == "DynamoGraphDeployment")


def _gpu(c) -> bool:
    res = c.get("resources") or {}
    return any((res.get(part) or {}).get("nvidia.com/gpu") for part in ("limits", "requests"))


def _containers(dgd):
    """(component, container name) -> container, every container of the DGD."""
    return {(comp["name"], c["name"]): c for comp in dgd["spec"]["components"] for c in comp["podTemplate"]["spec"]["containers"]}


def _upstream_dgd(t):
    path = fidelity.snapshot_dir(t.reference) / t.upstream
    if not path.is_file():
        pytest.fail(f"{t.id}: no upstream file {path}")
    return _dgd(fidelity.load_docs(path))


def _render(t):
    """The render fidelity compares: the configured storage class and, where upstream names one, pull secret stand
    for upstream's placeholders (as tests/test_fidelity.py renders)."""
    path = fidelity.snapshot_dir(t.reference) / t.upstream
    pull = {"imagePullSecrets": list(PULL)} if "imagePullSecrets" in path.read_text() else {}
    return render_config({"target": t.id, "storage": {"className": STORAGE_CLASS}, "fastStartupProbe": FAST, **pull})


def _period(p):
    return p.get("periodSeconds", 10)  # the Probe API default (Kubernetes docs, "Configure Probes")


def _budget(p):
    return _period(p) * p.get("failureThreshold", 3)


@needs_reference
@pytest.mark.parametrize("tid", [t.id for t in TARGETS if t.upstream])
def test_gpu_worker_probes_poll_every_5s_with_upstreams_budget_and_frontends_are_upstreams(tid):
    t = catalog.targets()[tid]
    up = _containers(_upstream_dgd(t))
    got = _containers(_dgd(render_config({"target": tid, "fastStartupProbe": FAST})))
    assert set(got) == set(up)
    for key, uc in up.items():
        want, probe = uc.get("startupProbe"), got[key].get("startupProbe")
        if not _gpu(uc) or want is None or _period(want) <= 5:
            assert probe == want, (tid, key)  # frontends (and probes fast already) exactly upstream's
            continue
        assert probe["periodSeconds"] <= 5, (tid, key, probe)
        # each attempt ends within its period, so attempts start every period even when all of them time out
        assert probe["timeoutSeconds"] <= probe["periodSeconds"] and probe["timeoutSeconds"] <= want.get("timeoutSeconds", 1)
        assert probe["periodSeconds"] * probe["failureThreshold"] == _budget(want), (tid, key, probe, want)
        rest = {k: v for k, v in probe.items() if k not in ("periodSeconds", "timeoutSeconds", "failureThreshold")}
        assert rest == {k: v for k, v in want.items() if k not in ("periodSeconds", "timeoutSeconds", "failureThreshold")}


@needs_reference
def test_every_slow_upstream_gpu_probe_is_changed_and_counted_by_fidelity():
    """Across the catalog, the containers the fidelity check counts are exactly the upstream GPU containers whose
    startupProbe polls slower than every 5 s."""
    want = got = 0
    budgets = set()
    for t in TARGETS:
        if not t.upstream:
            continue
        path = fidelity.snapshot_dir(t.reference) / t.upstream
        up = fidelity.load_docs(path)
        slow = [
            c["startupProbe"]
            for c in _containers(_dgd(up)).values()
            if _gpu(c) and c.get("startupProbe") and _period(c["startupProbe"]) > 5
        ]
        budgets |= {_budget(p) for p in slow}
        rendered = _render(t)
        probed: dict = {}
        assert not fidelity.compare_file(up, rendered, storage_class=STORAGE_CLASS, pull_secrets=PULL, probed=probed), t.id
        want += len(slow)
        got += sum(probed.values())
    assert want and got == want and budgets  # every slow GPU probe is the step's and nothing else was taken out


@needs_reference
@pytest.mark.parametrize("tid", [t.id for t in TARGETS if t.upstream])
def test_default_and_opt_out_keep_upstreams_probes_exactly(tid):
    t = catalog.targets()[tid]
    up = _containers(_upstream_dgd(t))
    for off in (
        _containers(_dgd(render_target(tid))),
        _containers(_dgd(render_config({"target": tid, "fastStartupProbe": {"enabled": False}}))),
    ):
        assert {k: c.get("startupProbe") for k, c in off.items()} == {k: c.get("startupProbe") for k, c in up.items()}


@pytest.mark.parametrize(
    "value,message",
    [
        ({"enabled": "maybe"}, "dynamo:fastStartupProbe.enabled: 'maybe' is not a boolean; use true or false"),
        ({"enabled": 0}, "dynamo:fastStartupProbe.enabled: 0 is not a boolean; use true or false"),
        ({"enable": False}, "dynamo:fastStartupProbe.enable: unknown key; valid keys here: enabled; did you mean 'enabled'?"),
    ],
)
def test_bad_value_is_refused_naming_the_key(value, message):
    with pytest.raises(ConfigError) as e:
        render_config({"target": "lightning-vllm-agg-h100-dspark", "fastStartupProbe": value})
    assert message in str(e.value)


def test_not_a_mapping_is_refused_naming_the_key():
    with pytest.raises(ConfigError) as e:
        render_config({"target": "lightning-vllm-agg-h100-dspark", "fastStartupProbe": False})
    assert "dynamo:fastStartupProbe:" in str(e.value) and "False" in str(e.value)


# --------------------------------------------------------------------------- the pure function


@pytest.mark.parametrize(
    "probe",
    [
        {"httpGet": {"path": "/live", "port": 9090}, "periodSeconds": 30, "timeoutSeconds": 20, "failureThreshold": 120},
        {"httpGet": {"path": "/live", "port": 9090}, "periodSeconds": 60, "timeoutSeconds": 20, "failureThreshold": 30},
        {"httpGet": {"path": "/live", "port": 9090}, "periodSeconds": 7, "timeoutSeconds": 3, "failureThreshold": 4},  # 28 s
        {"exec": {"command": ["true"]}},  # every field at its API default: 10 s x 3
        {"tcpSocket": {"port": 1}, "periodSeconds": 12, "failureThreshold": 1, "initialDelaySeconds": 40, "successThreshold": 1},
    ],
)
def test_fast_probe_keeps_at_least_the_budget_within_one_period_and_the_rest(probe):
    fast = sp.fast_probe(probe)
    budget = probe.get("periodSeconds", 10) * probe.get("failureThreshold", 3)
    assert fast["periodSeconds"] == 5 and fast.get("timeoutSeconds", 1) <= 5
    assert budget <= fast["periodSeconds"] * fast["failureThreshold"] < budget + 5  # ceil: never shorter, under one period more
    assert fast.get("timeoutSeconds", 1) <= probe.get("timeoutSeconds", 1)
    keep = ("periodSeconds", "timeoutSeconds", "failureThreshold")
    assert {k: v for k, v in fast.items() if k not in keep} == {k: v for k, v in probe.items() if k not in keep}
    assert sp.fast_probe(fast) is None  # applied twice, the same


@pytest.mark.parametrize("period", [1, 5])
def test_a_probe_polling_every_5s_or_faster_is_left_alone(period):
    assert sp.fast_probe({"periodSeconds": period, "failureThreshold": 9}) is None


def _dgd_with(probe, gpu=True):
    res = {"limits": {"nvidia.com/gpu": "1"}} if gpu else {"limits": {"cpu": "1"}}
    return {
        "kind": "DynamoGraphDeployment",
        "spec": {
            "components": [
                {
                    "name": "Frontend",
                    "podTemplate": {"spec": {"containers": [{"name": "main", "startupProbe": copy.deepcopy(probe)}]}},
                },
                {
                    "name": "worker",
                    "podTemplate": {
                        "spec": {"containers": [{"name": "main", "resources": res, "startupProbe": copy.deepcopy(probe)}]}
                    },
                },
            ]
        },
    }


def test_apply_changes_gpu_containers_only_and_the_undo_restores_upstream_exactly():
    probe = {"httpGet": {"path": "/live", "port": 9090}, "periodSeconds": 30, "timeoutSeconds": 20, "failureThreshold": 120}
    up = _dgd_with(probe)
    dgd = copy.deepcopy(up)
    assert sp.apply_fast_startup_probe(dgd) == ["worker/main"]
    front, worker = (c["podTemplate"]["spec"]["containers"][0] for c in dgd["spec"]["components"])
    assert front["startupProbe"] == probe
    assert worker["startupProbe"] == {
        "httpGet": {"path": "/live", "port": 9090},
        "periodSeconds": 5,
        "timeoutSeconds": 5,
        "failureThreshold": 720,
    }
    back, n = sp.without_fast_startup_probe(dgd, up)
    assert n == 1 and back == up and dgd != up
    # anything but the step's exact probe stays a difference
    worker["startupProbe"]["failureThreshold"] = 719
    back, n = sp.without_fast_startup_probe(dgd, up)
    assert n == 0 and back is dgd
    # CPU containers are never the step's
    cpu = _dgd_with(probe, gpu=False)
    assert sp.apply_fast_startup_probe(cpu) == [] and cpu == _dgd_with(probe, gpu=False)


@needs_reference
def test_fidelity_names_a_changed_probe_beyond_the_step():
    t = next(t for t in TARGETS if t.id == "lightning-vllm-agg-h100-dspark")
    up = fidelity.load_docs(fidelity.snapshot_dir(t.reference) / t.upstream)
    got = _render(t)
    dgd = _dgd(got)
    worker = next(c for c in _containers(dgd).values() if _gpu(c) and c.get("startupProbe"))
    worker["startupProbe"]["timeoutSeconds"] = 4
    diffs = fidelity.compare_file(up, got, storage_class=STORAGE_CLASS, pull_secrets=PULL)
    assert diffs and all(".startupProbe." in d for d in diffs), diffs
