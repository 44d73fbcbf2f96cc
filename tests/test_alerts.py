"""The alerts (stacks/observe/alerts.py) under the pinned Prometheus's own rule engine: ``promtool check rules`` accepts
the PrometheusRule's groups, and ``promtool test rules`` shows every alert firing on the series that should page and
staying quiet on healthy ones. The series are named from the installed Dynamo 1.6.1 (the rig's
``dynamo/prometheus_names.py``: metric names and the ``status`` label's error value) and from dcgm-exporter's default
counters, with the scrape jobs the project's PodMonitors give them; Alertmanager's receivers are checked in its values."""

from __future__ import annotations

import importlib.util
import subprocess
from pathlib import Path

import pytest
import yaml

import conftest
from stacks.program import build_program

ROOT = Path(__file__).resolve().parent.parent
DEVICE_PLUGINS = {"mode": "kubeconfig", "kubeconfigPath": "/dev/null", "installDevicePlugins": True}  # DCGM is scraped
TARGET = "lightning-vllm-disagg-h100-dspark"


def installed_names():
    try:
        from rig import rig_env_dir
    except ImportError as e:
        conftest.missing(f"tests/rig.py cannot be imported ({e})", "the serving rig (tests/rig.py, tools/rig.sh)")
    found = sorted(rig_env_dir().glob("lib/python3*/site-packages/dynamo/prometheus_names.py"))
    if not found:
        conftest.missing(f"no dynamo/prometheus_names.py in {rig_env_dir()}", "tools/rig.sh (make test builds it)")
    spec = importlib.util.spec_from_file_location("installed_prometheus_names", found[0])
    names = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(names)
    return names


@pytest.fixture(scope="module")
def promtool() -> str:
    return conftest.need_tool("promtool")


def _program(**obs):
    return build_program(
        {"target": TARGET, "cluster": DEVICE_PLUGINS, "observability": {"enabled": True, **obs}},
        "alerts",
        frozenset({"hfToken"}),
        env=None,
    )


def _rule(program) -> dict:
    return next(m for m in program.observability.monitors if m["kind"] == "PrometheusRule")


def _alerts(rule: dict) -> dict[str, dict]:
    return {r["alert"]: r for g in rule["spec"]["groups"] for r in g["rules"]}


def test_the_rule_is_labelled_for_the_stacks_prometheus_and_covers_each_signal():
    program = _program()
    rule = _rule(program)
    assert rule["metadata"]["namespace"] == program.observability.namespace
    assert rule["metadata"]["labels"] == program.observability.monitor_labels  # what the chart's Prometheus selects
    assert set(_alerts(rule)) == {
        "DynamoFrontendDown",
        "DynamoFrontendErrors",
        "DynamoNoReadyWorkers",
        "DynamoTimeToFirstTokenHigh",
        "DynamoRequestsQueued",
        "DynamoKvCacheSaturated",
        "GpuXidError",
        "GpuUncorrectableMemoryErrors",
    }
    # no DCGM scraped (render mode installs no NVIDIA stack): no GPU group
    render = build_program({"target": TARGET, "observability": {"enabled": True}}, "alerts", frozenset({"hfToken"}), env=None)
    assert "GpuXidError" not in _alerts(_rule(render))
    off = build_program(
        {"target": TARGET, "observability": {"enabled": True, "alerts": {"enabled": False}}},
        "alerts",
        frozenset({"hfToken"}),
        env=None,
    )
    assert not [m for m in off.observability.monitors if m["kind"] == "PrometheusRule"]


def test_the_ttft_bound_follows_the_targets_published_row():
    from stacks import catalog

    t = catalog.targets()[TARGET]
    assert t.perf is not None and t.perf.ttft_p50_ms
    want = round(4 * t.perf.ttft_p50_ms / 1000, 3)
    assert f"> {want}" in _alerts(_rule(_program()))["DynamoTimeToFirstTokenHigh"]["expr"]
    assert "> 2.5" in _alerts(_rule(_program(alerts={"ttftP99Seconds": 2.5})))["DynamoTimeToFirstTokenHigh"]["expr"]


def test_alertmanager_sends_to_the_named_webhook_or_holds_the_alerts():
    def values(program):
        kps = next(c for c in program.observability.charts if c.chart == "kube-prometheus-stack")
        return kps.values["alertmanager"]

    held = values(_program())
    assert held["enabled"] is True and held["config"]["route"]["receiver"] == "dynamo"
    receivers = {r["name"]: r for r in held["config"]["receivers"]}
    assert set(receivers) == {"null", "dynamo"} and set(receivers["dynamo"]) == {"name"}  # no integration: held
    # the webhook's Secret is the user's: in a namespace they made (a namespace this stack creates cannot hold it yet)
    sent = values(_program(alerts={"webhookUrlSecret": {"name": "pager", "key": "url"}}, createNamespace=False))
    hook = {r["name"]: r for r in sent["config"]["receivers"]}["dynamo"]["webhook_configs"][0]
    assert hook == {"url_file": "/etc/alertmanager/secrets/pager/url", "send_resolved": True}
    assert sent["alertmanagerSpec"]["secrets"] == ["pager"]
    assert values(_program(alerts={"enabled": False})) == {"enabled": False}


def _series(names) -> tuple[dict[str, str], str, str]:
    fe, comp, svc = names.name_prefix.FRONTEND, names.name_prefix.COMPONENT, names.frontend_service
    metric = {
        "requests": f"{fe}_{svc.REQUESTS_TOTAL}",
        "ttft": f"{fe}_{svc.TIME_TO_FIRST_TOKEN_SECONDS}",
        "queued": f"{fe}_{svc.QUEUED_REQUESTS}",
        "ready": f"{fe}_{svc.MODEL_READY}",
        "kv": f"{comp}_{names.kvstats.GPU_CACHE_USAGE_PERCENT}",
    }
    return metric, svc.status.ERROR, svc.status.SUCCESS


def _promtool_test(promtool: str, rule: dict, tests: list[dict], tmp_path: Path) -> subprocess.CompletedProcess:
    rules = tmp_path / "rules.yaml"
    rules.write_text(yaml.safe_dump({"groups": rule["spec"]["groups"]}))
    check = subprocess.run([promtool, "check", "rules", str(rules)], capture_output=True, text=True, timeout=60)
    assert check.returncode == 0, check.stdout + check.stderr
    spec = tmp_path / "tests.yaml"
    spec.write_text(yaml.safe_dump({"rule_files": [str(rules)], "evaluation_interval": "1m", "tests": tests}))
    return subprocess.run([promtool, "test", "rules", str(spec)], capture_output=True, text=True, timeout=120)


def test_every_alert_fires_on_trouble_and_stays_quiet_when_healthy(promtool, tmp_path):
    names = installed_names()
    m, error, success = _series(names)
    program = _program()
    rule = _rule(program)
    graph = rule["spec"]["groups"][0]["name"][len("dynamo-") :]
    ns = program.serving.dgd["metadata"]["namespace"]
    fj, wj = f'job="{ns}/{graph}-frontend"', f'job="{ns}/{graph}-worker"'
    bound = float(_alerts(rule)["DynamoTimeToFirstTokenHigh"]["expr"].rsplit("> ", 1)[1])
    labels = {"namespace": ns, "dynamo_graph": graph}

    def hist(value_s: float) -> list[dict]:  # 10 requests a minute, all with a TTFT of value_s
        out = []
        for le in (0.1, 0.5, 1, 2, 5, 10, 30, 60, "+Inf"):
            per_min = 10 if le == "+Inf" or float(le) >= value_s else 0
            out.append({"series": f'{m["ttft"]}_bucket{{{fj},le="{le}"}}', "values": f"0+{per_min}x40"})
        return out

    healthy = [
        {"series": f"up{{{fj}}}", "values": "1x40"},
        {"series": f'up{{{wj},pod="w-0"}}', "values": "1x40"},
        {"series": f'{m["requests"]}{{{fj},status="{success}"}}', "values": "0+100x40"},
        {"series": f'{m["requests"]}{{{fj},status="{error}"}}', "values": "0+1x40"},  # 1% errors
        {"series": f"{m['ready']}{{{fj}}}", "values": "1x40"},
        {"series": f"{m['queued']}{{{fj}}}", "values": "3x40"},
        {"series": f'{m["kv"]}{{{wj},pod="w-0"}}', "values": "0.6x40"},
        {"series": 'DCGM_FI_DEV_XID_ERRORS{Hostname="n1",gpu="0"}', "values": "0x40"},
        {"series": 'DCGM_FI_DEV_UNCORRECTABLE_REMAPPED_ROWS{Hostname="n1",gpu="0"}', "values": "0x40"},
        {"series": 'DCGM_FI_DEV_ROW_REMAP_FAILURE{Hostname="n1",gpu="0"}', "values": "0x40"},
    ] + hist(bound / 4)
    every = sorted(_alerts(rule))
    quiet = {
        "interval": "1m",
        "input_series": healthy,
        "alert_rule_test": [{"eval_time": "30m", "alertname": a, "exp_alerts": []} for a in every],
    }

    def trouble(replace: dict[str, str], extra: list[dict] = ()) -> list[dict]:
        out = [s for s in healthy if not any(s["series"].startswith(k) for k in replace)]
        return out + [{"series": k, "values": v} for k, v in replace.items()] + list(extra)

    g = {**labels}
    cases = {
        "DynamoFrontendDown": (trouble({f"up{{{fj}}}": "0x40"}), {"severity": "critical", **g}),
        "DynamoFrontendErrors": (
            trouble({f'{m["requests"]}{{{fj},status="{error}"}}': "0+20x40"}),
            {"severity": "critical", **g},
        ),
        "DynamoNoReadyWorkers": (trouble({f"{m['ready']}{{{fj}}}": "0x40"}), {"severity": "critical", **g}),
        "DynamoTimeToFirstTokenHigh": (
            [s for s in healthy if "_bucket" not in s["series"]] + hist(bound * 1.5),
            {"severity": "warning", **g},
        ),
        "DynamoRequestsQueued": (trouble({f"{m['queued']}{{{fj}}}": "50x40"}), {"severity": "warning", **g}),
        "DynamoKvCacheSaturated": (
            trouble({f'{m["kv"]}{{{wj},pod="w-0"}}': "0.99x40"}),
            {"severity": "warning", "pod": "w-0", **g},
        ),
        "GpuXidError": (
            trouble({'DCGM_FI_DEV_XID_ERRORS{Hostname="n1",gpu="0"}': "0 0 0 79x37"}),
            {"severity": "critical", "Hostname": "n1", "gpu": "0"},
        ),
        "GpuUncorrectableMemoryErrors": (
            trouble({'DCGM_FI_DEV_UNCORRECTABLE_REMAPPED_ROWS{Hostname="n1",gpu="0"}': "0x20 1x20"}),
            {"severity": "critical", "Hostname": "n1", "gpu": "0"},
        ),
    }
    assert set(cases) == set(every)  # every alert has its trouble
    tests = [quiet] + [
        {
            "interval": "1m",
            "input_series": series,
            "alert_rule_test": [
                {
                    "eval_time": "30m",
                    "alertname": a,
                    "exp_alerts": [{"exp_labels": want, "exp_annotations": _alerts(rule)[a]["annotations"]}],
                }
            ],
        }
        for a, (series, want) in cases.items()
    ]
    proc = _promtool_test(promtool, rule, tests, tmp_path)
    assert proc.returncode == 0, proc.stdout[-4000:] + proc.stderr[-2000:]
    # and the test itself can fail: the same trouble expected not to fire is reported by promtool
    wrong = [
        {
            "interval": "1m",
            "input_series": cases["DynamoFrontendErrors"][0],
            "alert_rule_test": [{"eval_time": "30m", "alertname": "DynamoFrontendErrors", "exp_alerts": []}],
        }
    ]
    assert _promtool_test(promtool, rule, wrong, tmp_path).returncode != 0


def test_the_status_label_value_the_error_rule_counts_is_the_installed_dynamos():
    names = installed_names()
    assert names.frontend_service.status.ERROR == "error"
    assert 'status="error"' in _alerts(_rule(_program()))["DynamoFrontendErrors"]["expr"]
    assert (
        f"{names.name_prefix.FRONTEND}_{names.frontend_service.MODEL_READY}"
        in _alerts(_rule(_program()))["DynamoNoReadyWorkers"]["expr"]
    )
