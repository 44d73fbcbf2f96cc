"""The Prometheus metric names Dynamo's frontend and workers export, as the observability layer's dashboards and alerts
and the serving layer's autoscaling queries read them (one list: a renamed metric is fixed in one place)."""

# The metric names the dashboards, the alerts and the autoscaling queries read. Source: ai-dynamo/dynamo
# lib/runtime/src/metrics/prometheus_names.rs @ 04070c75b52f33346a2d5723eed93a0093e77bad (prefixes
# ``name_prefix::FRONTEND = "dynamo_frontend"`` and ``COMPONENT = "dynamo_component"``, the latter prepended by
# ``build_component_metric_name``), and the same constants as shipped in the ai-dynamo-runtime 1.5.0 and 1.6.1
# wheels on PyPI (dynamo/prometheus_names.py, generated from that file): ``frontend_service::REQUESTS_TOTAL``,
# ``TIME_TO_FIRST_TOKEN_SECONDS``, ``INTER_TOKEN_LATENCY_SECONDS``, ``OUTPUT_TOKENS_TOTAL``, ``QUEUED_REQUESTS``,
# ``INFLIGHT_REQUESTS``; ``kvstats::GPU_CACHE_USAGE_PERCENT = "gpu_cache_usage_percent"`` ("GPU cache usage as a
# percentage (0.0-1.0)", hence the ``percentunit`` panel unit). The kvstats constants sit in a module named
# ``kvstats`` but the name has no ``kvstats_`` part: the worker exports ``dynamo_component_gpu_cache_usage_percent``
# (a query for ``dynamo_component_kvstats_gpu_cache_usage_percent`` finds no series).
DYNAMO_METRICS = {
    "requests": "dynamo_frontend_requests_total",
    "ttft": "dynamo_frontend_time_to_first_token_seconds",
    "itl": "dynamo_frontend_inter_token_latency_seconds",
    "output_tokens": "dynamo_frontend_output_tokens_total",
    "queued": "dynamo_frontend_queued_requests",
    "inflight": "dynamo_frontend_inflight_requests",
    "kv_cache_usage": "dynamo_component_gpu_cache_usage_percent",
}
