"""A real Prometheus scrapes the real Dynamo (GPU-free serving rig) the way the project's PodMonitors say, and every
dashboard query is evaluated through Prometheus's HTTP API.

- Prometheus: the pinned server built by tools/prometheus.sh (stacks/registry/versions.yaml ``toolchain.prometheus``), on
  loopback with a temporary data directory and a 1 s scrape interval.
- Scrape configuration: generated from the rendered PodMonitors (``stacks.observe.observability.build_observability``) by
  ``pod_monitor_scrape_configs``: one static target per rig pod the monitor's selector matches, on the loopback port
  of the container port the endpoint names, with the endpoint's path and the Prometheus Operator's relabelings, so
  the ``pod``/``namespace``/``job``/``endpoint`` labels and the monitors' own relabelings are Prometheus's doing.
- Rig: tests/rig.py, the real Dynamo frontend and mocker workers started from two catalog targets' DGDs, one
  aggregated and one disaggregated (prefill + decode), each in its own namespace.
- Traffic: two short waves of streamed chat completions (bounded ``max_tokens``: the mocker refuses requests without
  one) with scrapes in between, so ``rate()`` and ``histogram_quantile()`` see counters increase.

A metric renamed upstream leaves its panel empty, and the test then fails naming the panel and the query.

The KEDA autoscaling triggers are evaluated the same way: for every metric the autoscaling module knows
(``stacks.serving.autoscaling.METRICS``) the program renders each target's ScaledObjects with that metric, and every
trigger query must select the series of exactly that DGD's frontend pods (a renamed metric or a wrong
``namespace``/``dynamo_namespace`` filter selects nothing), the gauges must rise under load, and the TTFT quantile must
have a value after requests. The rig runs its processes with the operator's env (tests/rig.py ``operator_env``:
``DYN_NAMESPACE=<namespace>-<dgd>``, the workers' suffix), so the labels are those a cluster would show.
"""

from __future__ import annotations

import concurrent.futures
import contextlib
import http.server
import json
import math
import os
import re
import socket
import subprocess
import threading
import time
import typing
import urllib.error
import urllib.parse
import urllib.request
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Iterator, Optional

import pytest
import yaml

import conftest
from stacks import catalog
from stacks.config.keys import ObservabilityConfig, parse
from stacks.observe.observability import (
    COMPONENT_TYPE_LABEL,
    DGD_NAME_LABEL,
    DYNAMO_METRICS,
    METRICS_ENABLED_LABEL,
    build_observability,
    dashboard_queries,
    pod_monitor_scrape_configs,
    selector_matches,
)
from stacks.program import build_program
from stacks.serving import autoscaling, build_plan
from stacks.serving.operator import LABEL_NAMESPACE

ROOT = Path(__file__).resolve().parent.parent
PROMETHEUS_BIN = ROOT / ".tools" / "bin" / "prometheus"
HOST = "127.0.0.1"
SCRAPE = 1.0  # seconds; the PodMonitors' 5s, shortened for the test

# Panels that need GPUs: their series come only from a DCGM exporter on a GPU node (the GPU Operator's, or the
# dcgm-exporter chart's), which the GPU-free rig cannot run. Exactly these may return no data; every other query must.
GPU_ONLY = {
    ("Dynamo GPUs (DCGM)", "GPU utilisation"): "DCGM_FI_DEV_GPU_UTIL comes from the DCGM exporter on GPU nodes",
    ("Dynamo GPUs (DCGM)", "GPU memory used"): "DCGM_FI_DEV_FB_USED comes from the DCGM exporter on GPU nodes",
    ("Dynamo GPUs (DCGM)", "Power"): "DCGM_FI_DEV_POWER_USAGE comes from the DCGM exporter on GPU nodes",
    ("Dynamo GPUs (DCGM)", "Temperature"): "DCGM_FI_DEV_GPU_TEMP comes from the DCGM exporter on GPU nodes",
}


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind((HOST, 0))
        return s.getsockname()[1]


def wait_for(
    what: str,
    probe: Callable[[], tuple[bool, object]],
    timeout: float,
    interval: float = 0.25,
    extra: Callable[[], str] = lambda: "",
):
    """Poll ``probe() -> (done, seen)`` until done; at the deadline fail with what was seen last."""
    deadline = time.monotonic() + timeout
    seen: object = "nothing yet"
    while True:
        try:
            done, seen = probe()
        except (OSError, urllib.error.URLError, ValueError) as e:
            done, seen = False, f"{type(e).__name__}: {e}"
        if done:
            return seen
        if time.monotonic() > deadline:
            pytest.fail(f"timed out after {timeout:.0f}s waiting for {what}; last seen: {seen}\n{extra()}", pytrace=False)
        time.sleep(interval)


# --------------------------------------------------------------------------- Prometheus


class Prometheus:
    """The pinned Prometheus server on loopback, with ``scrape_configs``, a temporary TSDB and its log."""

    def __init__(self, workdir: Path, scrape_configs: list[dict]):
        self.workdir = workdir
        workdir.mkdir(parents=True, exist_ok=True)
        self.config = workdir / "prometheus.yml"
        self.config.write_text(
            yaml.safe_dump(
                {
                    "global": {"scrape_interval": f"{SCRAPE:g}s", "evaluation_interval": f"{SCRAPE:g}s"},
                    "scrape_configs": scrape_configs,
                },
                sort_keys=False,
            )
        )
        self.port = _free_port()
        self.url = f"http://{HOST}:{self.port}"
        self.log = workdir / "prometheus.log"
        self.proc: Optional[subprocess.Popen] = None

    def log_tail(self, n: int = 30) -> str:
        try:
            return "--- prometheus log:\n" + "\n".join(self.log.read_text(errors="replace").splitlines()[-n:])
        except OSError as e:
            return f"<{e}>"

    def __enter__(self) -> "Prometheus":
        with open(self.log, "wb") as out:
            self.proc = subprocess.Popen(
                [
                    str(PROMETHEUS_BIN),
                    f"--config.file={self.config}",
                    f"--storage.tsdb.path={self.workdir / 'data'}",
                    f"--web.listen-address={HOST}:{self.port}",
                    "--log.level=warn",
                ],
                stdout=out,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                cwd=self.workdir,
            )

        def ready():
            if self.proc.poll() is not None:
                pytest.fail(f"prometheus exited with {self.proc.returncode}\n{self.log_tail()}", pytrace=False)
            with urllib.request.urlopen(f"{self.url}/-/ready", timeout=2) as r:
                return r.status == 200, f"HTTP {r.status}"

        wait_for(f"{self.url}/-/ready", ready, 30, extra=self.log_tail)
        return self

    def __exit__(self, *exc) -> None:
        if self.proc and self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(timeout=5)

    def api(self, path: str, **params) -> dict:
        url = f"{self.url}/api/v1/{path}" + (("?" + urllib.parse.urlencode(params)) if params else "")
        try:
            with urllib.request.urlopen(url, timeout=10) as r:
                body = json.loads(r.read())
        except urllib.error.HTTPError as e:
            body = json.loads(e.read() or b"{}")
        if body.get("status") != "success":
            raise AssertionError(f"{url}: {body.get('errorType')}: {body.get('error')}")
        return body["data"]

    def query(self, expr: str) -> list[dict]:
        data = self.api("query", query=expr)
        assert data["resultType"] == "vector", (expr, data["resultType"])
        return data["result"]

    def targets(self) -> dict:
        return self.api("targets")


@pytest.fixture(scope="module")
def prometheus_bin() -> Path:
    if not os.access(PROMETHEUS_BIN, os.X_OK):
        conftest.missing(f"{PROMETHEUS_BIN} is not built", "run `make setup` (tools/prometheus.sh builds the pinned Prometheus)")
    out = subprocess.run([str(PROMETHEUS_BIN), "--version"], capture_output=True, text=True, timeout=30)
    from stacks.registry.versions import versions

    pin = versions()["toolchain"]["prometheus"]  # module v0.3XY.Z = release 3.XY.Z
    release = "3.{}.{}".format(int(pin.split(".")[1]) % 100, pin.split(".")[2])
    assert f"version {release}" in out.stdout + out.stderr, (pin, out.stdout, out.stderr)
    return PROMETHEUS_BIN


# --------------------------------------------------------------------------- the scrape configuration on real Prometheus


class _Exporter:
    """A loopback /metrics endpoint serving fixed Prometheus text, standing in for one pod's port."""

    def __init__(self, text: str):
        body = text.encode()

        class Handler(http.server.BaseHTTPRequestHandler):
            def do_GET(self):  # noqa: N802
                code = 200 if self.path == "/metrics" else 404
                self.send_response(code)
                self.send_header("Content-Type", "text/plain; version=0.0.4; charset=utf-8")
                self.end_headers()
                if code == 200:
                    self.wfile.write(body)

            def log_message(self, *a):
                pass

        self.server = http.server.ThreadingHTTPServer((HOST, 0), Handler)
        self.port = self.server.server_address[1]
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def close(self):
        self.server.shutdown()
        self.server.server_close()


@dataclass
class _Pod:
    name: str
    labels: dict
    ports: dict


def test_generated_scrape_config_selects_and_labels_like_the_prometheus_operator(prometheus_bin, tmp_path):
    """Real Prometheus on the generated configuration: the selected frontend, prefill and decode pods are scraped
    and carry pod/namespace/job/endpoint and the monitors' relabeled labels; a pod the selector does not match,
    smuggled into the worker job, is dropped by Prometheus's own copy of the selector (the operator's keep rules)."""
    plan = build_observability(
        ObservabilityConfig.model_validate({"enabled": True}), serving_namespace="serve", dgd_name="g", nvidia_stack=None
    )
    exporters = []
    try:

        def pod(name, ctype, port_name, dgd="g"):
            exporters.append(_Exporter(f'probe_metric{{from="{name}"}} 1\n'))
            return _Pod(
                name,
                {
                    COMPONENT_TYPE_LABEL: ctype,
                    DGD_NAME_LABEL: dgd,
                    METRICS_ENABLED_LABEL: "true",
                    "nvidia.com/dynamo-namespace": "serve-g",
                },
                {port_name: exporters[-1].port},
            )

        pods = [
            pod("g-frontend-a", "frontend", "http"),
            pod("g-prefill-a", "prefill", "system"),
            pod("g-decode-a", "decode", "system"),
            pod("g-decode-b", "decode", "system"),
            pod("other-decode-a", "decode", "system", dgd="other"),
            pod("g-planner-a", "planner", "system"),
        ]
        cfgs = pod_monitor_scrape_configs(plan.monitors, pods, "serve", interval="1s")
        worker = next(c for c in cfgs if c["job_name"] == "podMonitor/serve/g-worker/0")
        outsider = next(p for p in pods if p.name == "g-planner-a")
        assert not selector_matches(plan.monitors[1]["spec"]["selector"], outsider.labels)
        worker["static_configs"].append(
            {
                "targets": [f"{HOST}:{outsider.ports['system']}"],
                "labels": {
                    "__meta_kubernetes_namespace": "serve",
                    "__meta_kubernetes_pod_name": outsider.name,
                    "__meta_kubernetes_pod_container_port_name": "system",
                    **{
                        f"__meta_kubernetes_pod_label_{k.replace('.', '_').replace('/', '_').replace('-', '_')}": v
                        for k, v in outsider.labels.items()
                    },
                    **{
                        f"__meta_kubernetes_pod_labelpresent_{k.replace('.', '_').replace('/', '_').replace('-', '_')}": "true"
                        for k in outsider.labels
                    },
                },
            }
        )
        with Prometheus(tmp_path / "prom", cfgs) as prom:

            def scraped():
                r = prom.query("up == 1")
                return len(r) == 4, sorted(x["metric"].get("pod", "?") for x in r)

            wait_for("4 targets up", scraped, 20, extra=prom.log_tail)
            t = prom.targets()
            active = {a["labels"]["pod"]: a["labels"] for a in t["activeTargets"]}
            assert set(active) == {"g-frontend-a", "g-prefill-a", "g-decode-a", "g-decode-b"}
            assert [d["discoveredLabels"]["__meta_kubernetes_pod_name"] for d in t["droppedTargets"]] == ["g-planner-a"]
            for name, labels in active.items():
                assert labels["namespace"] == "serve" and labels["instance"].startswith(f"{HOST}:")
                if name == "g-frontend-a":
                    assert (labels["job"], labels["endpoint"], labels["dynamo_namespace"]) == (
                        "serve/g-frontend",
                        "http",
                        "serve-g",
                    )
                else:
                    assert (labels["job"], labels["endpoint"]) == ("serve/g-worker", "system")
                    assert labels["dynamo_component_type"] == name.split("-")[1]
            samples = {s["metric"]["pod"]: s["metric"]["from"] for s in prom.query("probe_metric")}
            assert samples == {p: p for p in active}  # each target is the pod it claims to be
    finally:
        for e in exporters:
            e.close()


# --------------------------------------------------------------------------- the rig


def _target_ids() -> tuple[str, str]:
    """One aggregated and one disaggregated catalog target: the first whose DGD's workers are ``worker`` only, and
    the first with ``prefill`` and ``decode`` components (catalog order)."""
    agg = disagg = None
    for tid in catalog.targets():
        try:
            dgd = build_plan(parse({"target": tid})).dgd
        except Exception:  # noqa: BLE001 - a target this rig cannot render here is simply not chosen
            continue
        types = {c.get("type") for c in dgd["spec"].get("components") or []}
        if not types <= {"frontend", "worker", "prefill", "decode"} or "frontend" not in types:
            continue
        if agg is None and types == {"frontend", "worker"}:
            agg = tid
        if disagg is None and {"prefill", "decode"} <= types and "worker" not in types:
            disagg = tid
        if agg and disagg:
            return agg, disagg
    raise AssertionError(f"the catalog has no aggregated and disaggregated target pair (found {agg}, {disagg})")


def autoscaling_queries(target: str, namespace: str, dgd: dict) -> dict[str, list[str]]:
    """For every metric of the autoscaling module (``METRICS``, which must be what ``autoscaling.<component>.metric``
    accepts), the Prometheus queries of the KEDA triggers the program renders when every GPU component of ``target``
    autoscales on it: ``build_program`` with ``observability`` on, the entry's ``autoscalers``."""
    # The field is optional (the Planner picks its own signals): the metrics are the Literal inside the Optional.
    annotation = autoscaling.ComponentAutoscaling.model_fields["metric"].annotation
    accepted = {
        arg for lit in typing.get_args(annotation) if typing.get_origin(lit) is typing.Literal for arg in typing.get_args(lit)
    }
    assert set(autoscaling.METRICS) == set(accepted), (autoscaling.METRICS, accepted)
    comps = autoscaling.gpu_components(dgd)
    assert comps, f"{target}: no GPU component to autoscale"
    out = {}
    for metric in autoscaling.METRICS:
        raw = {
            "target": target,
            "namespace": namespace,
            "observability": {"enabled": True},
            "autoscaling": {c: {"maxReplicas": 2, "metric": metric, "target": 1} for c in comps},
        }
        plan = build_program(raw, "prom").entries[0].plan
        assert (plan.dgd["metadata"]["name"], plan.dgd["metadata"]["namespace"]) == (
            dgd["metadata"]["name"],
            dgd["metadata"]["namespace"],
        ), "the program renders another DGD than the rig runs"
        queries = [t["metadata"]["query"] for so in plan.autoscalers for t in so["spec"]["triggers"] if t["type"] == "prometheus"]
        assert len(queries) == len(comps), (metric, plan.autoscalers)
        out[metric] = sorted(set(queries))
    return out


@dataclass
class Served:
    target: str
    namespace: str
    dgd: dict
    rig: object  # tests.rig.Rig
    dashboards: list[dict]
    monitors: list[dict]
    autoscaling: dict  # metric -> the trigger queries of the ScaledObjects the program renders for it (autoscaling_queries)


def _chat(rig, i: int, words: int = 0, max_tokens: int = 24) -> tuple[int, str]:
    content = " ".join(["word"] * words + [f"Say something about the number {i}."])
    body = json.dumps(
        {"model": rig.model, "messages": [{"role": "user", "content": content}], "max_tokens": max_tokens, "stream": True}
    ).encode()
    req = urllib.request.Request(
        rig.frontend_url + "/v1/chat/completions", data=body, headers={"Content-Type": "application/json"}, method="POST"
    )
    try:
        with urllib.request.urlopen(req, timeout=60) as r:
            return r.status, r.read().decode(errors="replace")[-300:]
    except urllib.error.HTTPError as e:
        return e.code, e.read().decode(errors="replace")[:300]


@contextlib.contextmanager
def _rigs(specs: list[tuple[str, str]], workdir: Path) -> Iterator[list[Served]]:
    """Start one rig per (target, namespace), in parallel; stop all at exit."""
    try:
        from rig import start_rig
    except ImportError as e:  # the rig module ships with the project; its absence is a set-up problem
        conftest.missing(f"tests/rig.py cannot be imported ({e})", "the serving rig (tests/rig.py, tools/rig.sh)")
    obs = ObservabilityConfig.model_validate({"enabled": True})
    served, cms = [], []
    for tid, ns in specs:
        dgd = build_plan(parse({"target": tid, "namespace": ns})).dgd
        # gpu-operator: the plan then also renders the GPU (DCGM) dashboard, so every dashboard the product can
        # render is evaluated.
        oplan = build_observability(obs, serving_namespace=ns, dgd_name=dgd["metadata"]["name"], nvidia_stack="gpu-operator")
        served.append(Served(tid, ns, dgd, None, oplan.dashboards, oplan.monitors, autoscaling_queries(tid, ns, dgd)))
        cms.append(start_rig(dgd, workdir / ns))
    entered: list = []
    with concurrent.futures.ThreadPoolExecutor(len(cms)) as ex:
        futures = [ex.submit(cm.__enter__) for cm in cms]
        errors = []
        for s, cm, f in zip(served, cms, futures):
            try:
                s.rig = f.result()
                entered.append(cm)
            except BaseException as e:  # noqa: BLE001 - stop the others, then report
                errors.append(f"{s.target}: {type(e).__name__}: {e}")
    try:
        if errors:
            pytest.fail("serving rig did not start:\n" + "\n".join(errors), pytrace=False)
        yield served
    finally:
        for cm in entered:
            cm.__exit__(None, None, None)


@dataclass
class Scraped:
    served: list[Served]
    prom: Prometheus
    timings: dict


@pytest.fixture(scope="module")
def scraped(prometheus_bin, tmp_path_factory) -> Iterator[Scraped]:
    t0 = time.monotonic()
    timings: dict[str, float] = {}
    agg, disagg = _target_ids()
    workdir = tmp_path_factory.mktemp("prom-rig")
    with _rigs([(agg, "rig-agg"), (disagg, "rig-disagg")], workdir) as served:
        timings["rigs up"] = time.monotonic() - t0
        cfgs = [
            c for s in served for c in pod_monitor_scrape_configs(s.monitors, s.rig.pods, s.namespace, interval=f"{SCRAPE:g}s")
        ]
        with Prometheus(workdir / "prometheus", cfgs) as prom:
            timings["prometheus ready"] = time.monotonic() - t0
            expected = sum(len(g["targets"]) for c in cfgs for g in c["static_configs"])

            def all_up():
                r = prom.query("up")
                return len(r) == expected and all(x["value"][1] == "1" for x in r), sorted(
                    (x["metric"].get("pod"), x["value"][1]) for x in r
                )

            wait_for(f"{expected} targets up", all_up, 30, extra=prom.log_tail)
            # Two waves of requests with scrapes in between: counters and histogram buckets then increase inside
            # the dashboards' [1m] windows (a series first scraped after all traffic would show no increase).
            sent = 0
            for wave in range(2):
                with concurrent.futures.ThreadPoolExecutor(8) as ex:
                    results = list(ex.map(lambda a: _chat(*a), [(s.rig, sent + i) for s in served for i in range(4)]))
                bad = [r for r in results if r[0] != 200]
                assert not bad, f"wave {wave}: {len(bad)} of {len(results)} requests failed: {bad[:3]}"
                sent += 4
                for s in served:
                    wait_for(
                        f"{s.namespace}: {sent} requests counted by Prometheus",
                        lambda s=s: (lambda r: (bool(r) and float(r[0]["value"][1]) >= sent, r))(
                            prom.query(f'sum(dynamo_frontend_requests_total{{namespace="{s.namespace}"}})')
                        ),
                        30,
                        interval=SCRAPE / 2,
                        extra=prom.log_tail,
                    )
                timings[f"wave {wave + 1} scraped"] = time.monotonic() - t0
            for s in served:  # the workers' own counters of the last wave scraped too (the gauges are scraped with them)
                wait_for(
                    f"{s.namespace}: {sent} requests counted on its workers by Prometheus",
                    lambda s=s: (lambda r: (bool(r) and float(r[0]["value"][1]) >= sent, r))(
                        prom.query(
                            f'sum(dynamo_component_requests_total{{namespace="{s.namespace}",dynamo_endpoint="generate"}})'
                        )
                    ),
                    30,
                    interval=SCRAPE / 2,
                    extra=prom.log_tail,
                )
            yield Scraped(served, prom, timings)


def _evaluate(prom: Prometheus, served: list[Served]) -> list[tuple[str, str, str, str, list]]:
    out = []
    for s in served:
        for cm in s.dashboards:
            for dash, panel, ref, expr in dashboard_queries(cm):
                out.append((s.namespace, dash, panel, expr, prom.query(expr)))
    return out


def test_every_dashboard_query_returns_data_on_the_rig(scraped):
    """Every query of every rendered dashboard, for an aggregated and a disaggregated target, returns data through
    Prometheus's HTTP API (finite values; rates above zero after the traffic), except the listed GPU-only panels."""
    results = _evaluate(scraped.prom, scraped.served)
    assert {(d, p) for _, d, p, _, _ in results} >= set(GPU_ONLY)  # the list names panels that exist
    problems = []
    for ns, dash, panel, expr, result in results:
        if (dash, panel) in GPU_ONLY:
            assert "DCGM_" in expr, f"{dash}/{panel} is listed as GPU-only but queries no DCGM metric: {expr}"
            assert result == [], f"{dash}/{panel}: a GPU-only panel returned data without GPUs: {result}"
            continue
        values = [float(r["value"][1]) for r in result]
        if not values:
            problems.append(f"[{ns}] {dash} / {panel}: no data for {expr}")
        elif not all(math.isfinite(v) for v in values):
            problems.append(f"[{ns}] {dash} / {panel}: non-finite {values} for {expr}")
        elif "rate(" in expr and not any(v > 0 for v in values):
            problems.append(f"[{ns}] {dash} / {panel}: rate is 0 after the traffic ({values}) for {expr}")
    assert not problems, "\n".join(problems) + f"\n(timings: {scraped.timings})"
    print(f"\n{len(results)} queries evaluated; timings { ({k: round(v, 1) for k, v in scraped.timings.items()}) }")


def test_worker_pod_monitor_scrapes_prefill_and_decode_pods_of_the_disaggregated_target(scraped):
    """The worker PodMonitor yields a target for every prefill and decode pod of the disaggregated DGD, up == 1,
    labelled with the pod, the namespace, the monitor's job and the relabeled component type."""
    s = next(s for s in scraped.served if s.namespace == "rig-disagg")
    dgd = s.dgd["metadata"]["name"]
    roles = {p.name: p.component_type for p in s.rig.pods if p.component_type != "frontend"}
    assert sorted(set(roles.values())) == ["decode", "prefill"], roles
    up = scraped.prom.query(f'up{{namespace="{s.namespace}", job="{s.namespace}/{dgd}-worker"}}')
    got = {r["metric"]["pod"]: (r["metric"].get("dynamo_component_type"), r["value"][1]) for r in up}
    assert got == {pod: (role, "1") for pod, role in roles.items()}
    # ... and the workers' own metrics arrive under those targets: the KV-cache panel's series are worker pods.
    kv = next(q for cm in s.dashboards for _, panel, _, q in dashboard_queries(cm) if panel == "KV-cache usage")
    pods = {r["metric"].get("pod") for r in scraped.prom.query(kv)}
    assert pods and pods <= set(roles), (kv, pods)


def test_dashboard_metric_names_are_those_of_the_dynamo_the_rig_runs():
    """The Dynamo names the serving dashboard queries, derived from the constants module of the Dynamo the rig
    installs (dynamo/prometheus_names.py, generated from lib/runtime/src/metrics/prometheus_names.rs): the
    KV-cache gauge too, which the mocker engine does not export (its panel falls back to vLLM's own gauge)."""
    import importlib.util

    try:
        from rig import rig_env_dir
    except ImportError as e:
        conftest.missing(f"tests/rig.py cannot be imported ({e})", "the serving rig (tests/rig.py, tools/rig.sh)")
    found = sorted(rig_env_dir().glob("lib/python3*/site-packages/dynamo/prometheus_names.py"))
    assert found, f"no dynamo/prometheus_names.py in {rig_env_dir()}"
    spec = importlib.util.spec_from_file_location("installed_prometheus_names", found[0])
    names = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(names)
    fe, comp = names.name_prefix.FRONTEND, names.name_prefix.COMPONENT
    svc = names.frontend_service
    exported = {
        f"{fe}_{svc.REQUESTS_TOTAL}",
        f"{fe}_{svc.TIME_TO_FIRST_TOKEN_SECONDS}",
        f"{fe}_{svc.INTER_TOKEN_LATENCY_SECONDS}",
        f"{fe}_{svc.OUTPUT_TOKENS_TOTAL}",
        f"{fe}_{svc.QUEUED_REQUESTS}",
        f"{fe}_{svc.INFLIGHT_REQUESTS}",
        f"{comp}_{names.kvstats.GPU_CACHE_USAGE_PERCENT}",
    }
    assert set(DYNAMO_METRICS.values()) == exported


def test_aggregated_target_scrapes_its_frontend_and_workers(scraped):
    s = next(s for s in scraped.served if s.namespace == "rig-agg")
    dgd = s.dgd["metadata"]["name"]
    up = scraped.prom.query(f'up{{namespace="{s.namespace}"}}')
    got = {(r["metric"]["job"], r["metric"]["pod"]) for r in up if r["value"][1] == "1"}
    want = {
        (f"{s.namespace}/{dgd}-frontend" if p.component_type == "frontend" else f"{s.namespace}/{dgd}-worker", p.name)
        for p in s.rig.pods
    }
    assert got == want and {p.component_type for p in s.rig.pods} == {"frontend", "worker"}


# --------------------------------------------------------------------------- the autoscaling triggers on the rig

# A vector selector with label matchers in PromQL: metric name, then {matchers}.
SELECTOR = re.compile(r"([A-Za-z_:][A-Za-z0-9_:]*)\{([^{}]*)\}")
# Load for the gauges: streams per rig, each sending requests back to back with a long prompt (the mocker's prefill of
# ~1000 tokens keeps a request queued until its first token; the frontend counts it inflight until its last).
LOAD_STREAMS, LOAD_PROMPT_WORDS, LOAD_MAX_TOKENS = 8, 1000, 64


def _frontends(s: Served) -> dict:
    return {p.name: p for p in s.rig.pods if p.component_type == "frontend"}


def _load(rig, stop: threading.Event, first: int) -> list:
    """Requests back to back until ``stop``; returns the failed ones."""
    failed, i = [], first
    while not stop.is_set():
        code, tail = _chat(rig, i, words=LOAD_PROMPT_WORDS, max_tokens=LOAD_MAX_TOKENS)
        if code != 200:
            failed.append((code, tail))
        i += 1
    return failed


def _value(prom: Prometheus, expr: str) -> Optional[float]:
    r = prom.query(expr)
    return float(r[0]["value"][1]) if len(r) == 1 else None


def test_every_autoscaling_query_selects_the_dgds_frontend_and_follows_its_load(scraped):
    """Every KEDA trigger query the program renders (every metric of ``autoscaling.METRICS``, aggregated and
    disaggregated target), evaluated by the real Prometheus on the rig:

    - each of its selectors returns the series of every frontend pod of that DGD and of nothing else (labels
      ``namespace``, ``pod``, ``job`` and ``dynamo_namespace`` = the operator's ``DYN_NAMESPACE`` of the pod), while the
      same metric has series of the other rig too, so the filter is what selects; a renamed metric or a wrong label
      value selects nothing and fails here;
    - the query has a finite value; a query over gauges (no ``rate()``: queue depth, inflight) has a value at idle,
      rises above it while requests stream in, and falls back once they end;
    - a query over a histogram or counter (``rate()``: TTFT p95) is above 0 after the requests."""
    prom, served = scraped.prom, scraped.served
    problems, gauges, rates = [], [], []
    for s in served:
        fronts = _frontends(s)
        dgd = s.dgd["metadata"]["name"]
        assert set(s.autoscaling) == set(autoscaling.METRICS)
        for metric, queries in s.autoscaling.items():
            for q in queries:
                where = f"[{s.namespace}] {metric}: {q}"
                selectors = SELECTOR.findall(q)
                if not selectors:
                    problems.append(f"{where}: no vector selector in the query")
                for name, matchers in selectors:
                    own = prom.query(f"{name}{{{matchers}}}")
                    pods = {r["metric"].get("pod") for r in own}
                    if pods != set(fronts):
                        problems.append(
                            f"{where}: {name}{{{matchers}}} selects pods {sorted(map(str, pods))}, "
                            f"want the DGD's frontend pods {sorted(fronts)}"
                        )
                    for r in own:
                        m, pod = r["metric"], fronts.get(r["metric"].get("pod"))
                        want = {
                            "namespace": s.namespace,
                            "job": f"{s.namespace}/{dgd}-frontend",
                            "dynamo_namespace": pod.env["DYN_NAMESPACE"] if pod else "?",
                        }
                        got = {k: m.get(k) for k in want}
                        if got != want:
                            problems.append(f"{where}: series {m} has {got}, want {want}")
                    others = {r["metric"].get("namespace") for r in prom.query(name)} - {s.namespace}
                    if not others:
                        problems.append(f"{where}: no series of {name} outside {s.namespace}: the filter is not shown to select")
                v = _value(prom, q)
                if v is None or not math.isfinite(v):
                    problems.append(f"{where}: value {prom.query(q)}")
                elif "rate(" in q:
                    rates.append((where, q))
                else:
                    gauges.append((where, q, v))
    assert not problems, "\n".join(problems)
    assert gauges and rates, (gauges, rates)  # both kinds are rendered, so both checks below run

    # Under load: every gauge query rises above its idle value while the streams run.
    stop = threading.Event()
    peak = {q: v for _, q, v in gauges}
    t0 = time.monotonic()
    with concurrent.futures.ThreadPoolExecutor(LOAD_STREAMS * len(served)) as ex:
        futures = [ex.submit(_load, s.rig, stop, 1000 * (k + 1)) for s in served for k in range(LOAD_STREAMS)]
        try:

            def risen():
                for _, q, _idle in gauges:
                    v = _value(prom, q)
                    if v is not None:
                        peak[q] = max(peak[q], v)
                return all(peak[q] > idle for _, q, idle in gauges), {w: peak[q] for w, q, _ in gauges}

            wait_for(
                "every autoscaling gauge query above its idle value under load",
                risen,
                30,
                interval=SCRAPE / 2,
                extra=prom.log_tail,
            )
        finally:
            stop.set()
            failed = [f for fut in futures for f in fut.result()]
    scraped.timings["autoscaling load"] = time.monotonic() - t0
    assert not failed, f"{len(failed)} requests failed under load: {failed[:3]}"

    def settled():
        now = {w: _value(prom, q) for w, q, _ in gauges}
        return all(now[w] is not None and now[w] <= idle for w, _, idle in gauges), now

    wait_for(
        "every autoscaling gauge query back at its idle value after the load",
        settled,
        20,
        interval=SCRAPE / 2,
        extra=prom.log_tail,
    )
    bad = [(w, _value(prom, q)) for w, q in rates]
    assert all(v is not None and math.isfinite(v) and v > 0 for _, v in bad), bad
    print(
        f"\nautoscaling queries: {len(gauges)} over gauges (peaks {sorted(set(peak.values()))}), {len(rates)} over rates; "
        f"load {scraped.timings['autoscaling load']:.1f}s"
    )


def test_rig_processes_run_in_the_operators_dynamo_namespaces(scraped):
    """The rig's processes have the env the operator gives the pods (tests/rig.py ``operator_env``): the frontend's
    ``DYN_NAMESPACE``/``DYN_NAMESPACE_PREFIX`` is the pods' ``nvidia.com/dynamo-namespace`` label (``<namespace>-<dgd>``),
    and each worker's own metrics carry the Dynamo namespace it registered in, ``<DYN_NAMESPACE>-<worker hash>``
    (ai-dynamo 1.6.1 writes it with ``_`` for ``-``). Without that env every process would be in ``dynamo``."""
    for s in scraped.served:
        base = f"{s.namespace}-{s.dgd['metadata']['name']}"
        for pod in s.rig.pods:
            assert pod.env["DYN_NAMESPACE"] == pod.labels[LABEL_NAMESPACE] == base, (pod.name, pod.env, pod.labels)
            if pod.component_type == "frontend":
                assert pod.env["DYN_NAMESPACE_PREFIX"] == base, pod.env
                continue
            want = f"{base}-{pod.env['DYN_NAMESPACE_WORKER_SUFFIX']}"
            got = {
                r["metric"]["dynamo_namespace"]
                for r in scraped.prom.query(
                    f'group by (dynamo_namespace) ({{namespace="{s.namespace}", pod="{pod.name}", dynamo_namespace!=""}})'
                )
            }
            assert {g.replace("_", "-") for g in got} == {want}, (pod.name, got, want)
