"""Alerts of the observability layer (``dynamo:observability.alerts``): one PrometheusRule per stack, a group per
served DGD and one for the GPUs, evaluated by the stack's Prometheus and sent to Alertmanager.

What fires (each rule's ``for`` keeps a blip from paging; tests/test_alerts.py runs every rule through the pinned
Prometheus's ``promtool test rules``, firing and not firing, on series named as the installed Dynamo 1.6.1 names them):

Where they go: Alertmanager (stacks/observe/observability.py ``alertmanager_values``) posts them to the webhook in
``observability.alerts.webhookUrlSecret``, or holds them when none is named (``up`` warns).

- ``DynamoFrontendDown``: the frontend's scrape target is down or gone for 2 min.
- ``DynamoFrontendErrors``: more than ``errorRatio`` (default 5%) of the frontend's requests end in error over 5 min.
- ``DynamoNoReadyWorkers``: the frontend reports no model it can route (``model_ready`` < 1), or no worker target is
  up, for 2 min.
- ``DynamoTimeToFirstTokenHigh``: the frontend's TTFT p99 over 10 min above the target's bound for 10 min: 4 x the p50
  of the target's published row (stacks/catalog, from upstream's perf tables; a p99 several times the p50 is the
  usual tail), else 10 s where upstream published none; ``ttftP99Seconds`` sets it.
- ``DynamoRequestsQueued``: more than ``queuedRequests`` (default 32) requests waiting in the frontend's queue for
  5 min.
- ``DynamoKvCacheSaturated``: a worker's KV cache above 95% for 10 min (Dynamo's gauge, or vLLM's own).
- ``GpuXidError``, ``GpuUncorrectableMemoryErrors``: DCGM reports an XID error, or rows remapped for uncorrectable
  errors (or a failed remap), on any GPU (only where the stack scrapes DCGM).

Metric names: the Dynamo ones are stacks/serving/metrics.py ``DYNAMO_METRICS`` plus the frontend's
``model_ready`` and the ``status`` label's ``error`` value (ai-dynamo-runtime 1.6.1 ``dynamo/prometheus_names.py``:
``frontend_service.MODEL_READY``, ``frontend_service.status.ERROR``); the DCGM ones are dcgm-exporter's default
counters (NVIDIA/dcgm-exporter etc/default-counters.csv: ``DCGM_FI_DEV_XID_ERRORS``,
``DCGM_FI_DEV_UNCORRECTABLE_REMAPPED_ROWS``, ``DCGM_FI_DEV_ROW_REMAP_FAILURE``; its ECC counters are commented out
there). Series are selected by the scrape job the project's PodMonitors give them (``<namespace>/<monitor name>``).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Iterable, Optional

from stacks.observe.observability import MONITORING_API, VLLM_KV_CACHE_USAGE
from stacks.serving.metrics import DYNAMO_METRICS

MODEL_READY = "dynamo_frontend_model_ready"
STATUS_ERROR = 'status="error"'
TTFT_P50_FACTOR = 4
TTFT_UNPUBLISHED_SECONDS = 10.0
KV_CACHE_SATURATED = 0.95
DCGM_XID = "DCGM_FI_DEV_XID_ERRORS"
DCGM_REMAPPED_UNCORRECTABLE = "DCGM_FI_DEV_UNCORRECTABLE_REMAPPED_ROWS"
DCGM_REMAP_FAILURE = "DCGM_FI_DEV_ROW_REMAP_FAILURE"


@dataclass(frozen=True)
class ServedGraph:
    """One DGD the alerts watch: the scrape jobs of its frontend and worker PodMonitors, and its TTFT bound."""

    name: str  # the group's name (the entry or the DGD)
    namespace: str
    frontend_job: str
    worker_job: str
    ttft_p99_seconds: float


def ttft_bound(published_p50_ms: Optional[float], override_seconds: Optional[float]) -> float:
    """The TTFT p99 above which ``DynamoTimeToFirstTokenHigh`` fires (see the module docstring)."""
    if override_seconds is not None:
        return float(override_seconds)
    if published_p50_ms:
        return round(TTFT_P50_FACTOR * published_p50_ms / 1000.0, 3)
    return TTFT_UNPUBLISHED_SECONDS


def _alert(name: str, expr: str, for_: str, severity: str, summary: str, labels: Optional[dict] = None) -> dict:
    return {
        "alert": name,
        "expr": expr,
        "for": for_,
        "labels": {"severity": severity, **(labels or {})},
        "annotations": {"summary": summary},
    }


def graph_rules(g: ServedGraph, error_ratio: float, queued: int) -> dict:
    m, fe, wk = DYNAMO_METRICS, f'job="{g.frontend_job}"', f'job="{g.worker_job}"'
    where = {"namespace": g.namespace, "dynamo_graph": g.name}
    return {
        "name": f"dynamo-{g.name}",
        "rules": [
            _alert(
                "DynamoFrontendDown",
                f"sum(up{{{fe}}}) == 0 or absent(up{{{fe}}})",
                "2m",
                "critical",
                f"{g.namespace}/{g.name}: the frontend is not scraped as up: no request is served",
                where,
            ),
            _alert(
                "DynamoFrontendErrors",
                f"sum(rate({m['requests']}{{{fe},{STATUS_ERROR}}}[5m])) / sum(rate({m['requests']}{{{fe}}}[5m])) > {error_ratio}",
                "5m",
                "critical",
                f"{g.namespace}/{g.name}: more than {error_ratio:.0%} of requests fail",
                where,
            ),
            _alert(
                "DynamoNoReadyWorkers",
                f"max({MODEL_READY}{{{fe}}}) < 1 or sum(up{{{wk}}}) == 0 or absent(up{{{wk}}})",
                "2m",
                "critical",
                f"{g.namespace}/{g.name}: the frontend has no worker it can route to",
                where,
            ),
            _alert(
                "DynamoTimeToFirstTokenHigh",
                f"histogram_quantile(0.99, sum by (le) (rate({m['ttft']}_bucket{{{fe}}}[10m]))) > {g.ttft_p99_seconds}",
                "10m",
                "warning",
                f"{g.namespace}/{g.name}: time to first token p99 above {g.ttft_p99_seconds} s",
                where,
            ),
            _alert(
                "DynamoRequestsQueued",
                f"sum({m['queued']}{{{fe}}}) > {queued}",
                "5m",
                "warning",
                f"{g.namespace}/{g.name}: more than {queued} requests wait in the frontend's queue",
                where,
            ),
            _alert(
                "DynamoKvCacheSaturated",
                f"max by (pod) ({m['kv_cache_usage']}{{{wk}}}) > {KV_CACHE_SATURATED} "
                f'or max by (pod) ({{__name__="{VLLM_KV_CACHE_USAGE}",{wk}}}) > {KV_CACHE_SATURATED}',
                "10m",
                "warning",
                f"{g.namespace}/{g.name}: a worker's KV cache is above {KV_CACHE_SATURATED:.0%}",
                where,
            ),
        ],
    }


def gpu_rules() -> dict:
    return {
        "name": "dynamo-gpus",
        "rules": [
            _alert(
                "GpuXidError",
                f"max by (Hostname, gpu) ({DCGM_XID}) > 0",
                "0m",
                "critical",
                "a GPU reported an XID error (DCGM_FI_DEV_XID_ERRORS holds the last one's code)",
            ),
            _alert(
                "GpuUncorrectableMemoryErrors",
                f"max by (Hostname, gpu) (increase({DCGM_REMAPPED_UNCORRECTABLE}[15m])) > 0 "
                f"or max by (Hostname, gpu) ({DCGM_REMAP_FAILURE}) > 0",
                "0m",
                "critical",
                "a GPU remapped memory rows for uncorrectable errors, or failed to: drain the node",
            ),
        ],
    }


def prometheus_rule(
    namespace: str, labels: dict, graphs: Iterable[ServedGraph], gpus: bool, error_ratio: float = 0.05, queued: int = 32
) -> dict:
    """The stack's PrometheusRule, labelled as its Prometheus selects rules (kube-prometheus-stack: the release label)."""
    groups = [graph_rules(g, error_ratio, queued) for g in graphs] + ([gpu_rules()] if gpus else [])
    return {
        "apiVersion": MONITORING_API,
        "kind": "PrometheusRule",
        "metadata": {"name": "dynamo-alerts", "namespace": namespace, "labels": dict(labels)},
        "spec": {"groups": groups},
    }
