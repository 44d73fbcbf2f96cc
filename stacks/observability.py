"""Pure builder for the optional observability layer (``dynamo:observability``).

No Pulumi here: ``components/observability.py`` registers what ``build_observability`` returns.

What it builds, and why each choice:

- **Prometheus and Grafana**: the kube-prometheus-stack chart (pinned in ``stacks/versions.yaml``,
  ``charts.kube-prometheus-stack``; 88.0.0 bumps the Prometheus Operator to v0.93.0, the CRD set
  of ``shared/reference/crds/monitoring``: prometheus-community/helm-charts release
  kube-prometheus-stack-88.0.0). Or ``prometheus: existing``: no chart, monitors carry the labels
  the existing Prometheus selects (``monitorLabels``), and its URL (``prometheusEndpoint``) is
  the platform chart's ``dynamo-operator.dynamo.metrics.prometheusEndpoint``
  (shared/reference/platform/dynamo-operator-values.yaml).
- **Which monitors Prometheus picks up**: the chart's Prometheus selects PodMonitors and
  ServiceMonitors labelled ``release: <release name>`` (``*SelectorNilUsesHelmValues: true``, the
  chart default), in every namespace (``*NamespaceSelector: {}``). Our monitors carry that label.
  The Dynamo platform 1.5.0 chart also creates cluster-wide PodMonitors ``dynamo-frontend`` and
  ``dynamo-worker`` when the CRDs exist at install time, *without* labels
  (deploy/helm/charts/platform/components/operator/templates/prometheus.yaml at the reference
  commit), so this Prometheus does not scrape them twice.
- **Dynamo monitors follow the platform's convention** (same template): pods labelled
  ``nvidia.com/metrics-enabled: "true"`` and ``nvidia.com/dynamo-component-type: frontend`` are
  scraped on port ``http`` (``/metrics``, honorLabels, ``dynamo_namespace`` relabel); ``worker``
  pods on port ``system`` (``/metrics``). Ours are namespaced to the serving namespace and select
  the DGD's pods (``nvidia.com/dynamo-graph-deployment-name``), interval 5s as upstream.
- **GPU metrics (DCGM)**, matched to ``cluster.nvidiaStack``: the GPU Operator ships its own DCGM
  exporter (``dcgmExporter.enabled: true`` in gpu-operator v26.7.0 values), so with
  ``gpu-operator`` we only add a ServiceMonitor for its ``nvidia-dcgm-exporter`` Service
  (label ``app: nvidia-dcgm-exporter``, port ``gpu-metrics``, namespace ``gpu-operator``); with the
  plain device plugin there is no exporter, so the standalone ``dcgm-exporter`` chart is installed
  (its chart version equals the exporter version, deployment/Chart.yaml; 4.8.3 pairs with DCGM
  4.6.0 like the GPU Operator's ``4.6.0-4.8.3`` image), on the GPU nodes (GPU taint tolerated)
  with its ServiceMonitor labelled for our Prometheus. Installing both would double every series.
- **Dashboards** as ConfigMaps labelled ``grafana_dashboard: "1"`` (the Grafana chart sidecar's
  default label and value), in the observability namespace: Dynamo serving (request rate, TTFT,
  inter-token latency, output throughput, KV-cache usage, queue depth; metric names from the
  Dynamo metrics reference, docs/observability/metrics.md) and GPUs (DCGM_FI_DEV_* fields).
"""
from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any, Optional

from .platform import GPU_TOLERATION, HelmSpec, _helm

MONITORING_API = "monitoring.coreos.com/v1"
KPS_KEY = "kube-prometheus-stack"
KPS_RELEASE = "kube-prometheus-stack"
DCGM_KEY = "dcgm-exporter"
DCGM_RELEASE = "dcgm-exporter"
GPU_OPERATOR_NAMESPACE = "gpu-operator"  # stacks.platform.nvidia_gpu_stack installs the GPU Operator here
DASHBOARD_LABEL = "grafana_dashboard"
DASHBOARD_LABEL_VALUE = "1"
# Labels the Dynamo operator puts on every pod it manages (operator consts: KubeLabelMetricsEnabled ...).
METRICS_ENABLED_LABEL = "nvidia.com/metrics-enabled"
COMPONENT_TYPE_LABEL = "nvidia.com/dynamo-component-type"
DGD_NAME_LABEL = "nvidia.com/dynamo-graph-deployment-name"
SCRAPE_INTERVAL = "5s"  # the platform's PodMonitors scrape every 5s
DCGM_CHOICES = ("gpu-operator", "dcgm-exporter", "none")


@dataclass
class ObservabilityPlan:
    namespace: str
    monitor_labels: dict
    prometheus_endpoint: str
    charts: list[HelmSpec] = field(default_factory=list)  # in install order (kube-prometheus-stack first)
    monitors: list[dict] = field(default_factory=list)  # PodMonitors and ServiceMonitors (need the CRDs)
    dashboards: list[dict] = field(default_factory=list)  # ConfigMaps for the Grafana sidecar
    namespace_object: Optional[dict] = None
    dcgm: str = "none"

    def objects(self) -> list[dict]:
        """The plain Kubernetes objects (charts excluded), in apply order."""
        return ([self.namespace_object] if self.namespace_object else []) + self.dashboards + self.monitors


def dcgm_for(nvidia_stack: Optional[str], choice: Optional[str] = None) -> str:
    """Where GPU metrics come from: the explicit ``choice``, else matched to the NVIDIA stack
    (``gpu-operator``: its own exporter; ``device-plugin``: the standalone chart; no stack of ours: none)."""
    if choice is not None:
        if choice not in DCGM_CHOICES:
            raise ValueError(f"dcgm must be one of {', '.join(DCGM_CHOICES)}, not {choice!r}")
        return choice
    return {"gpu-operator": "gpu-operator", "device-plugin": "dcgm-exporter"}.get(nvidia_stack or "", "none")


def kube_prometheus_stack(namespace: str) -> HelmSpec:
    """The chart: Prometheus (operator-managed) selecting monitors labelled ``release`` in every
    namespace, Grafana with the dashboard sidecar searching every namespace, Alertmanager off."""
    selector_ns: dict = {}
    values = {
        "alertmanager": {"enabled": False},
        "prometheus": {"prometheusSpec": {
            "podMonitorSelectorNilUsesHelmValues": True,
            "serviceMonitorSelectorNilUsesHelmValues": True,
            "podMonitorNamespaceSelector": selector_ns,
            "serviceMonitorNamespaceSelector": dict(selector_ns),
            "retention": "15d",
        }},
        "grafana": {"sidecar": {"dashboards": {
            "enabled": True, "label": DASHBOARD_LABEL, "labelValue": DASHBOARD_LABEL_VALUE, "searchNamespace": "ALL",
        }}},
    }
    return _helm(KPS_KEY, KPS_RELEASE, namespace, values)


def prometheus_url(namespace: str) -> str:
    """The in-cluster URL of the chart's Prometheus (Service ``<release>-prometheus``, port 9090)."""
    return f"http://{KPS_RELEASE}-prometheus.{namespace}.svc.cluster.local:9090"


def dcgm_exporter_chart(namespace: str, monitor_labels: dict) -> HelmSpec:
    """The standalone dcgm-exporter chart on the GPU nodes, with its ServiceMonitor for our Prometheus."""
    values = {
        "tolerations": [dict(GPU_TOLERATION)],
        "nodeSelector": {"nvidia.com/gpu.present": "true"},
        "serviceMonitor": {"enabled": True, "interval": "15s", "additionalLabels": dict(monitor_labels)},
    }
    return _helm(DCGM_KEY, DCGM_RELEASE, namespace, values)


def _meta(name: str, namespace: str, labels: dict) -> dict:
    return {"name": name, "namespace": namespace,
            "labels": {"app.kubernetes.io/part-of": "dynamo-observability", "app.kubernetes.io/managed-by": "pulumi", **labels}}


def dynamo_pod_monitors(serving_namespace: str, dgd_name: str, monitor_labels: dict) -> list[dict]:
    """PodMonitors for the DGD's frontend (port ``http``) and workers (port ``system``), as the platform's."""
    base = {METRICS_ENABLED_LABEL: "true", DGD_NAME_LABEL: dgd_name}
    ns_sel = {"matchNames": [serving_namespace]}
    frontend = {
        "apiVersion": MONITORING_API, "kind": "PodMonitor",
        "metadata": _meta(f"{dgd_name}-frontend", serving_namespace, monitor_labels),
        "spec": {
            "namespaceSelector": ns_sel,
            "selector": {"matchLabels": {**base, COMPONENT_TYPE_LABEL: "frontend"}},
            "podMetricsEndpoints": [{
                "interval": SCRAPE_INTERVAL, "path": "/metrics", "port": "http", "honorLabels": True,
                "relabelings": [{"action": "replace", "sourceLabels": ["__meta_kubernetes_pod_label_nvidia_com_dynamo_namespace"],
                                 "targetLabel": "dynamo_namespace"}],
            }],
        },
    }
    worker = {
        "apiVersion": MONITORING_API, "kind": "PodMonitor",
        "metadata": _meta(f"{dgd_name}-worker", serving_namespace, monitor_labels),
        "spec": {
            "namespaceSelector": dict(ns_sel),
            "selector": {"matchLabels": {**base, COMPONENT_TYPE_LABEL: "worker"}},
            "podMetricsEndpoints": [{
                "interval": SCRAPE_INTERVAL, "path": "/metrics", "port": "system",
                "relabelings": [{"action": "replace", "sourceLabels": ["__meta_kubernetes_pod_label_nvidia_com_dynamo_component_type"],
                                 "targetLabel": "dynamo_component_type"}],
            }],
        },
    }
    return [frontend, worker]


def gpu_operator_dcgm_monitor(namespace: str, monitor_labels: dict) -> dict:
    """A ServiceMonitor for the GPU Operator's own DCGM exporter Service (its chart's monitor has no
    ``release`` label, so the chart's Prometheus would not select it)."""
    return {
        "apiVersion": MONITORING_API, "kind": "ServiceMonitor",
        "metadata": _meta("gpu-operator-dcgm-exporter", namespace, monitor_labels),
        "spec": {
            "namespaceSelector": {"matchNames": [GPU_OPERATOR_NAMESPACE]},
            "selector": {"matchLabels": {"app": "nvidia-dcgm-exporter"}},
            "endpoints": [{"port": "gpu-metrics", "path": "/metrics", "interval": "15s"}],
        },
    }


# --------------------------------------------------------------------------- dashboards

def _panel(pid: int, title: str, exprs: list[tuple[str, str]], unit: str, x: int, y: int) -> dict:
    return {
        "id": pid, "type": "timeseries", "title": title, "datasource": {"type": "prometheus", "uid": "${datasource}"},
        "gridPos": {"h": 8, "w": 12, "x": x, "y": y},
        "fieldConfig": {"defaults": {"unit": unit}, "overrides": []},
        "targets": [{"refId": chr(65 + i), "expr": e, "legendFormat": legend} for i, (e, legend) in enumerate(exprs)],
    }


def _dashboard(uid: str, title: str, panels: list[tuple[str, list[tuple[str, str]], str]], extra_vars: list[dict]) -> dict:
    return {
        "uid": uid, "title": title, "schemaVersion": 39, "version": 1, "editable": True, "refresh": "10s",
        "time": {"from": "now-1h", "to": "now"}, "tags": ["dynamo"],
        "templating": {"list": [{"name": "datasource", "type": "datasource", "query": "prometheus", "label": "Prometheus"}] + extra_vars},
        "panels": [_panel(i + 1, t, e, u, 12 * (i % 2), 8 * (i // 2)) for i, (t, e, u) in enumerate(panels)],
    }


def _q(metric: str, sel: str) -> str:
    return f'histogram_quantile({{q}}, sum by (le) (rate({metric}_bucket{{{{{sel}}}}}[1m])))'


def serving_dashboard(serving_namespace: str) -> dict:
    """Dynamo serving: request rate, TTFT and inter-token latency (p50/p95), output tokens/s,
    KV-cache usage, queued and in-flight requests. ``$namespace`` selects the serving namespace."""
    sel = 'namespace="$namespace"'
    ttft, itl = _q("dynamo_frontend_time_to_first_token_seconds", sel), _q("dynamo_frontend_inter_token_latency_seconds", sel)
    panels = [
        ("Request rate", [(f"sum(rate(dynamo_frontend_requests_total{{{sel}}}[1m]))", "req/s")], "reqps"),
        ("Time to first token", [(ttft.format(q="0.50"), "p50"), (ttft.format(q="0.95"), "p95")], "s"),
        ("Inter-token latency", [(itl.format(q="0.50"), "p50"), (itl.format(q="0.95"), "p95")], "s"),
        ("Output tokens/s", [(f"sum(rate(dynamo_frontend_output_tokens_total{{{sel}}}[1m]))", "tok/s")], "short"),
        ("KV-cache usage", [(f"max by (pod) (dynamo_component_kvstats_gpu_cache_usage_percent{{{sel}}})", "{{pod}}")], "percentunit"),
        ("Queue depth", [(f"sum(dynamo_frontend_queued_requests{{{sel}}})", "queued"),
                         (f"sum(dynamo_frontend_inflight_requests{{{sel}}})", "in flight")], "short"),
    ]
    ns_var = {"name": "namespace", "type": "custom", "query": serving_namespace, "current": {"text": serving_namespace, "value": serving_namespace}}
    return _dashboard("dynamo-serving", "Dynamo serving", panels, [ns_var])


def gpu_dashboard() -> dict:
    """GPUs from DCGM: utilisation, framebuffer memory used, power, temperature, per GPU."""
    legend = "{{Hostname}} {{gpu}}"
    panels = [
        ("GPU utilisation", [("DCGM_FI_DEV_GPU_UTIL", legend)], "percent"),
        ("GPU memory used", [("DCGM_FI_DEV_FB_USED * 1024 * 1024", legend)], "bytes"),
        ("Power", [("DCGM_FI_DEV_POWER_USAGE", legend)], "watt"),
        ("Temperature", [("DCGM_FI_DEV_GPU_TEMP", legend)], "celsius"),
    ]
    return _dashboard("dynamo-gpus", "Dynamo GPUs (DCGM)", panels, [])


def dashboard_configmap(name: str, namespace: str, dashboard: dict) -> dict:
    return {
        "apiVersion": "v1", "kind": "ConfigMap",
        "metadata": _meta(name, namespace, {DASHBOARD_LABEL: DASHBOARD_LABEL_VALUE}),
        "data": {f"{dashboard['uid']}.json": json.dumps(dashboard, indent=1, sort_keys=True)},
    }


# --------------------------------------------------------------------------- the plan

def build_observability(obs: Any, *, serving_namespace: str, dgd_name: str, nvidia_stack: Optional[str]) -> ObservabilityPlan:
    """Everything ``dynamo:observability`` asks for. ``obs``: ``stacks.config.ObservabilityConfig``;
    ``nvidia_stack``: the NVIDIA stack the program installs (None when it installs none)."""
    ns = obs.namespace
    install = obs.prometheus == "install"
    labels = dict(obs.monitor_labels) if obs.monitor_labels else ({"release": KPS_RELEASE} if install else {})
    dcgm = dcgm_for(nvidia_stack, obs.dcgm)
    charts: list[HelmSpec] = [kube_prometheus_stack(ns)] if install else []
    monitors = dynamo_pod_monitors(serving_namespace, dgd_name, labels)
    if dcgm == "dcgm-exporter":
        charts.append(dcgm_exporter_chart(ns, labels))
    elif dcgm == "gpu-operator":
        monitors.append(gpu_operator_dcgm_monitor(ns, labels))
    dashboards = []
    if obs.dashboards:
        dashboards = [dashboard_configmap("dynamo-serving-dashboard", ns, serving_dashboard(serving_namespace))]
        if dcgm != "none":
            dashboards.append(dashboard_configmap("dynamo-gpu-dashboard", ns, gpu_dashboard()))
    ns_obj = None
    if obs.create_namespace and ns != serving_namespace:
        ns_obj = {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": ns, "labels": {"app.kubernetes.io/part-of": "dynamo-observability"}}}
    return ObservabilityPlan(namespace=ns, monitor_labels=labels, prometheus_endpoint=obs.prometheus_endpoint or prometheus_url(ns),
                             charts=charts, monitors=monitors, dashboards=dashboards, namespace_object=ns_obj, dcgm=dcgm)
