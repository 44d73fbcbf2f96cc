"""Pure builder for the optional observability layer (``dynamo:observability``).

No Pulumi here: ``stacks/layers/observability.py`` makes what ``build_observability`` returns a layer in the one
layer shape (``stacks.layers.LayerPlan``), which components/layer.py registers.

What it builds, and why each choice:

- **Prometheus and Grafana**: the kube-prometheus-stack chart (pinned in ``stacks/registry/versions.yaml``,
  ``charts.kube-prometheus-stack``, 88.5.4: its Prometheus Operator v0.93.1 has the CRDs of
  ``shared/reference/crds/monitoring`` (v0.93.0, which 88.0.0 brought) except the version annotation;
  sources in the manifest's comment). Or ``prometheus: existing``: no chart, monitors carry the labels
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
- **Dynamo monitors follow the platform's convention**, as its newest PodMonitor template has it
  (ai-dynamo/dynamo deploy/helm/charts/platform/components/operator/templates/prometheus.yaml @
  14947dfa985a93c2fba3a6e3a1abcc667163422c): pods labelled ``nvidia.com/metrics-enabled: "true"``
  and ``nvidia.com/dynamo-component-type: frontend`` are scraped on port ``http`` (``/metrics``,
  honorLabels, ``dynamo_namespace`` relabel); worker pods, selected by
  ``nvidia.com/dynamo-component-type In [worker, decode, prefill]`` (matchExpressions), on port
  ``system`` (``/metrics``, ``dynamo_component_type`` relabel). All three types matter: the operator
  labels the pods of a v1beta1 ``type: prefill|decode`` component ``prefill``/``decode`` and only
  DCDs converted from v1alpha1 keep ``worker`` (operator consts.go comment on
  KubeLabelDynamoComponentType and ``GetDCDWorkloadComponentType``;
  shared/reference/dynamo-next/OPERATOR-LABELS.md), so a ``worker``-only selector (the older
  template, same path @ b7f730feb6b2ac8da2200631a3dec0732a6231a1) scrapes no disaggregated worker.
  Ours are namespaced to the serving namespace and also select the DGD's pods
  (``nvidia.com/dynamo-graph-deployment-name``), interval 5s as upstream.
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
  inter-token latency, output throughput, KV-cache usage, queue depth) and GPUs (DCGM_FI_DEV_*
  fields). Dynamo metric names are those of the Dynamo the platform runs (``DYNAMO_METRICS``, stacks/serving/metrics.py
  says where each comes from); tests/test_prometheus.py evaluates every query through a real
  Prometheus scraping the real Dynamo frontend and mocker workers, so a rename upstream fails a test.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from typing import Any, Iterable, Optional

from stacks.registry.charts import GPU_TOLERATION, HelmSpec, helm_spec as _helm
from stacks.serving.metrics import DYNAMO_METRICS
from stacks.serving import least_strict, pod_security_labels
from stacks.serving.operator import LABEL_COMPONENT_TYPE, LABEL_DGD_NAME, LABEL_METRICS_ENABLED

MONITORING_API = "monitoring.coreos.com/v1"
KPS_KEY = "kube-prometheus-stack"
KPS_RELEASE = "kube-prometheus-stack"
DCGM_KEY = "dcgm-exporter"
DCGM_RELEASE = "dcgm-exporter"
GPU_OPERATOR_NAMESPACE = "gpu-operator"  # stacks.cluster.platform.nvidia_gpu_stack installs the GPU Operator here
DASHBOARD_LABEL = "grafana_dashboard"
DASHBOARD_LABEL_VALUE = "1"
# The Grafana subchart's service account (its default name, ``<release>-grafana``, set explicitly) and our Role for it.
GRAFANA_SERVICE_ACCOUNT = f"{KPS_RELEASE}-grafana"
GRAFANA_SIDECAR_ROLE = "grafana-sidecar-configmaps"
# Labels the Dynamo operator puts on every pod it manages: stacks.serving.operator holds them, with their sources.
METRICS_ENABLED_LABEL = LABEL_METRICS_ENABLED
COMPONENT_TYPE_LABEL = LABEL_COMPONENT_TYPE
DGD_NAME_LABEL = LABEL_DGD_NAME
# The component types the platform's worker PodMonitor selects, in its order (prometheus.yaml @ 14947dfa...).
WORKER_COMPONENT_TYPES = ("worker", "decode", "prefill")
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
    rbac: list[dict] = field(default_factory=list)  # the Role and RoleBinding the Grafana sidecars read ConfigMaps with
    namespace_object: Optional[dict] = None
    dcgm: str = "none"
    warnings: list[str] = field(default_factory=list)  # what `up` logs about the layer

    def objects(self) -> list[dict]:
        """The plain Kubernetes objects (charts excluded), in apply order."""
        return ([self.namespace_object] if self.namespace_object else []) + self.rbac + self.dashboards + self.monitors


def dcgm_for(nvidia_stack: Optional[str], choice: Optional[str] = None) -> str:
    """Where GPU metrics come from: the explicit ``choice``, else matched to the NVIDIA stack
    (``gpu-operator``: its own exporter; ``device-plugin``: the standalone chart; no stack of ours: none)."""
    if choice is not None:
        if choice not in DCGM_CHOICES:
            raise ValueError(f"dcgm must be one of {', '.join(DCGM_CHOICES)}, not {choice!r}")
        return choice
    return {"gpu-operator": "gpu-operator", "device-plugin": "dcgm-exporter"}.get(nvidia_stack or "", "none")


# Alertmanager's receivers (kube-prometheus-stack values ``alertmanager.config``): the chart's default route sends
# its Watchdog alert to a receiver named "null", which must stay; the stack's alerts go to ``dynamo``, a webhook when
# observability.alerts.webhookUrlSecret names one (read from the mounted Secret: Alertmanager webhook_config
# ``url_file``; kube-prometheus-stack ``alertmanager.alertmanagerSpec.secrets`` mounts each listed Secret at
# /etc/alertmanager/secrets/<name>/), else no integration: the alerts are held in Alertmanager, not sent.
ALERT_RECEIVER = "dynamo"
ALERTMANAGER_SECRETS = "/etc/alertmanager/secrets"


def alertmanager_values(alerts: Any) -> dict:
    if alerts is None or not alerts.enabled:
        return {"enabled": False}
    receiver: dict = {"name": ALERT_RECEIVER}
    spec: dict = {}
    ref = alerts.webhook_url_secret
    if ref is not None:
        receiver["webhook_configs"] = [{"url_file": f"{ALERTMANAGER_SECRETS}/{ref.name}/{ref.key}", "send_resolved": True}]
        spec["secrets"] = [ref.name]
    out = {
        "enabled": True,
        "config": {
            "route": {
                "receiver": ALERT_RECEIVER,
                "group_by": ["alertname", "namespace", "dynamo_graph"],
                "group_wait": "30s",
                "group_interval": "5m",
                "repeat_interval": "4h",
            },
            "receivers": [{"name": "null"}, receiver],
        },
    }
    if spec:
        out["alertmanagerSpec"] = spec
    return out


def kube_prometheus_stack(namespace: str, alerts: Any = None) -> HelmSpec:
    """The chart: Prometheus (operator-managed) selecting monitors labelled ``release`` in every
    namespace, Grafana with the dashboard sidecar reading ConfigMaps of this namespace only, Alertmanager with the stack's alerts
    (``alertmanager_values``) or off."""
    selector_ns: dict = {}
    values = {
        "alertmanager": alertmanager_values(alerts),
        "prometheus": {
            "prometheusSpec": {
                "podMonitorSelectorNilUsesHelmValues": True,
                "serviceMonitorSelectorNilUsesHelmValues": True,
                "podMonitorNamespaceSelector": selector_ns,
                "serviceMonitorNamespaceSelector": dict(selector_ns),
                "retention": "15d",
            }
        },
        # The Grafana chart's own RBAC grants its sidecars get/watch/list on every ConfigMap *and Secret*, cluster-wide
        # unless ``rbac.namespaced`` (grafana/helm-charts charts/grafana/templates/clusterrole.yaml and role.yaml: the
        # rule ``resources: ["configmaps", "secrets"]`` whenever a sidecar is on). Our dashboards live in this namespace,
        # so the chart creates no RBAC (``rbac.create: false``), the sidecars read ConfigMaps only (``resource:
        # configmap``; kube-prometheus-stack's datasource is a ConfigMap too) in this namespace, and
        # ``grafana_sidecar_rbac`` grants exactly that to the chart's service account.
        "grafana": {
            "rbac": {"create": False},
            "serviceAccount": {"create": True, "name": GRAFANA_SERVICE_ACCOUNT},
            "sidecar": {
                "dashboards": {
                    "enabled": True,
                    "label": DASHBOARD_LABEL,
                    "labelValue": DASHBOARD_LABEL_VALUE,
                    "searchNamespace": namespace,
                    "resource": "configmap",
                },
                "datasources": {"resource": "configmap"},
            },
        },
    }
    return _helm(KPS_KEY, KPS_RELEASE, namespace, values)


def grafana_sidecar_rbac(namespace: str) -> list[dict]:
    """A Role reading ConfigMaps (nothing else) in the observability namespace, bound to Grafana's service account:
    all the dashboard and datasource sidecars need, where the chart's own rules would let Grafana read every Secret."""
    meta = {
        "name": GRAFANA_SIDECAR_ROLE,
        "namespace": namespace,
        "labels": {"app.kubernetes.io/part-of": "dynamo-observability", "app.kubernetes.io/managed-by": "pulumi"},
    }
    role = {
        "apiVersion": "rbac.authorization.k8s.io/v1",
        "kind": "Role",
        "metadata": dict(meta),
        "rules": [{"apiGroups": [""], "resources": ["configmaps"], "verbs": ["get", "watch", "list"]}],
    }
    binding = {
        "apiVersion": "rbac.authorization.k8s.io/v1",
        "kind": "RoleBinding",
        "metadata": dict(meta),
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": GRAFANA_SIDECAR_ROLE},
        "subjects": [{"kind": "ServiceAccount", "name": GRAFANA_SERVICE_ACCOUNT, "namespace": namespace}],
    }
    return [role, binding]


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
    return {
        "name": name,
        "namespace": namespace,
        "labels": {"app.kubernetes.io/part-of": "dynamo-observability", "app.kubernetes.io/managed-by": "pulumi", **labels},
    }


def dynamo_pod_monitors(serving_namespace: str, dgd_name: str, monitor_labels: dict) -> list[dict]:
    """PodMonitors for the DGD's frontend (port ``http``) and its worker, prefill and decode pods (port
    ``system``), as the platform's newest ``dynamo-frontend``/``dynamo-worker`` (selectors and endpoints
    as upstream, plus this DGD's name)."""
    base = {METRICS_ENABLED_LABEL: "true", DGD_NAME_LABEL: dgd_name}
    ns_sel = {"matchNames": [serving_namespace]}
    frontend = {
        "apiVersion": MONITORING_API,
        "kind": "PodMonitor",
        "metadata": _meta(f"{dgd_name}-frontend", serving_namespace, monitor_labels),
        "spec": {
            "namespaceSelector": ns_sel,
            "selector": {"matchLabels": {**base, COMPONENT_TYPE_LABEL: "frontend"}},
            "podMetricsEndpoints": [
                {
                    "interval": SCRAPE_INTERVAL,
                    "path": "/metrics",
                    "port": "http",
                    "honorLabels": True,
                    "relabelings": [
                        {
                            "action": "replace",
                            "sourceLabels": ["__meta_kubernetes_pod_label_nvidia_com_dynamo_namespace"],
                            "targetLabel": "dynamo_namespace",
                        }
                    ],
                }
            ],
        },
    }
    worker = {
        "apiVersion": MONITORING_API,
        "kind": "PodMonitor",
        "metadata": _meta(f"{dgd_name}-worker", serving_namespace, monitor_labels),
        "spec": {
            "namespaceSelector": dict(ns_sel),
            # Upstream's two expressions verbatim; the DGD name narrows them to this deployment.
            "selector": {
                "matchLabels": {DGD_NAME_LABEL: dgd_name},
                "matchExpressions": [
                    {"key": COMPONENT_TYPE_LABEL, "operator": "In", "values": list(WORKER_COMPONENT_TYPES)},
                    {"key": METRICS_ENABLED_LABEL, "operator": "In", "values": ["true"]},
                ],
            },
            "podMetricsEndpoints": [
                {
                    "interval": SCRAPE_INTERVAL,
                    "path": "/metrics",
                    "port": "system",
                    "relabelings": [
                        {
                            "action": "replace",
                            "sourceLabels": ["__meta_kubernetes_pod_label_nvidia_com_dynamo_component_type"],
                            "targetLabel": "dynamo_component_type",
                        }
                    ],
                }
            ],
        },
    }
    return [frontend, worker]


def gpu_operator_dcgm_monitor(namespace: str, monitor_labels: dict) -> dict:
    """A ServiceMonitor for the GPU Operator's own DCGM exporter Service (its chart's monitor has no
    ``release`` label, so the chart's Prometheus would not select it)."""
    return {
        "apiVersion": MONITORING_API,
        "kind": "ServiceMonitor",
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
        "id": pid,
        "type": "timeseries",
        "title": title,
        "datasource": {"type": "prometheus", "uid": "${datasource}"},
        "gridPos": {"h": 8, "w": 12, "x": x, "y": y},
        "fieldConfig": {"defaults": {"unit": unit}, "overrides": []},
        "targets": [{"refId": chr(65 + i), "expr": e, "legendFormat": legend} for i, (e, legend) in enumerate(exprs)],
    }


def _dashboard(uid: str, title: str, panels: list[tuple[str, list[tuple[str, str]], str]], extra_vars: list[dict]) -> dict:
    return {
        "uid": uid,
        "title": title,
        "schemaVersion": 39,
        "version": 1,
        "editable": True,
        "refresh": "10s",
        "time": {"from": "now-1h", "to": "now"},
        "tags": ["dynamo"],
        "templating": {
            "list": [{"name": "datasource", "type": "datasource", "query": "prometheus", "label": "Prometheus"}] + extra_vars
        },
        "panels": [_panel(i + 1, t, e, u, 12 * (i % 2), 8 * (i // 2)) for i, (t, e, u) in enumerate(panels)],
    }


def _q(metric: str, sel: str) -> str:
    return f"histogram_quantile({{q}}, sum by (le) (rate({metric}_bucket{{{{{sel}}}}}[1m])))"


# Who exports the KV-cache gauge (ai-dynamo 1.5.0 wheel): the vLLM and SGLang workers set
# ``dynamo_component_gpu_cache_usage_percent`` from their scheduler stats (dynamo/vllm/publisher.py,
# dynamo/sglang/publisher.py via ``LLMBackendMetrics``), and the vLLM worker also forwards vLLM's own ``vllm:*``
# metrics on the same /metrics (dynamo/vllm/main.py, ``engine_metric_prefixes = ["vllm:", ...]``), among them
# ``vllm:kv_cache_usage_perc`` (vLLM "Production Metrics", https://docs.vllm.ai/en/stable/usage/metrics/). Dynamo's
# GPU-free mocker engine imitates vLLM's native metrics (``vllm:kv_cache_usage_perc``, "KV-cache usage as a fraction
# of available cache blocks", in ai-dynamo-runtime's mocker) and does not set the ``dynamo_component_`` gauge. The
# panel shows the Dynamo gauge per pod, else vLLM's: same 0.0-1.0 fraction, one series per pod either way.
VLLM_KV_CACHE_USAGE = "vllm:kv_cache_usage_perc"


def serving_dashboard(serving_namespace: str) -> dict:
    """Dynamo serving: request rate, TTFT and inter-token latency (p50/p95), output tokens/s,
    KV-cache usage, queued and in-flight requests. ``$namespace`` selects the serving namespace."""
    sel, m = 'namespace="$namespace"', DYNAMO_METRICS
    ttft, itl = _q(m["ttft"], sel), _q(m["itl"], sel)
    panels = [
        ("Request rate", [(f"sum(rate({m['requests']}{{{sel}}}[1m]))", "req/s")], "reqps"),
        ("Time to first token", [(ttft.format(q="0.50"), "p50"), (ttft.format(q="0.95"), "p95")], "s"),
        ("Inter-token latency", [(itl.format(q="0.50"), "p50"), (itl.format(q="0.95"), "p95")], "s"),
        ("Output tokens/s", [(f"sum(rate({m['output_tokens']}{{{sel}}}[1m]))", "tok/s")], "short"),
        (
            "KV-cache usage",
            [(f"max by (pod) ({m['kv_cache_usage']}{{{sel}}}) or max by (pod) ({VLLM_KV_CACHE_USAGE}{{{sel}}})", "{{pod}}")],
            "percentunit",
        ),
        ("Queue depth", [(f"sum({m['queued']}{{{sel}}})", "queued"), (f"sum({m['inflight']}{{{sel}}})", "in flight")], "short"),
    ]
    ns_var = {
        "name": "namespace",
        "type": "custom",
        "query": serving_namespace,
        "current": {"text": serving_namespace, "value": serving_namespace},
    }
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
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": _meta(name, namespace, {DASHBOARD_LABEL: DASHBOARD_LABEL_VALUE}),
        "data": {f"{dashboard['uid']}.json": json.dumps(dashboard, indent=1, sort_keys=True)},
    }


# --------------------------------------------------------------------------- what Prometheus makes of them
# Pure translations used by tests/test_prometheus.py to run a real Prometheus against local processes standing in
# for the DGD's pods: label-selector matching, the scrape configuration the Prometheus Operator generates for a
# PodMonitor (with static targets instead of Kubernetes service discovery), and the queries Grafana sends.


def selector_matches(selector: Optional[dict], labels: dict) -> bool:
    """Kubernetes ``LabelSelector`` semantics (k8s.io/apimachinery pkg/labels ``Requirement.Matches``): every
    ``matchLabels`` pair equal; ``In``: label present with a listed value; ``NotIn``: label absent or not listed;
    ``Exists`` / ``DoesNotExist``: present / absent. An empty selector matches every pod."""
    selector = selector or {}
    for k, v in (selector.get("matchLabels") or {}).items():
        if labels.get(k) != v:
            return False
    for e in selector.get("matchExpressions") or []:
        key, op, values = e["key"], e["operator"], e.get("values") or []
        if op == "In":
            ok = key in labels and labels[key] in values
        elif op == "NotIn":
            ok = key not in labels or labels[key] not in values
        elif op == "Exists":
            ok = key in labels
        elif op == "DoesNotExist":
            ok = key not in labels
        else:
            raise ValueError(f"label selector operator {op!r} (key {key!r}) is not one of In, NotIn, Exists, DoesNotExist")
        if not ok:
            return False
    return True


def _sanitize(name: str) -> str:
    return re.sub(r"[^a-zA-Z0-9_]", "_", name)  # the operator's sanitizeLabelName


_RELABEL_KEYS = {
    "sourceLabels": "source_labels",
    "targetLabel": "target_label",
    "separator": "separator",
    "regex": "regex",
    "modulus": "modulus",
    "replacement": "replacement",
    "action": "action",
}


def _relabel(r: dict) -> dict:
    """A PodMonitor ``RelabelConfig`` (CRD camelCase) as Prometheus ``relabel_config`` (snake_case, lower-case action)."""
    unknown = set(r) - set(_RELABEL_KEYS)
    if unknown:
        raise ValueError(f"relabeling fields {sorted(unknown)} are not translated")
    out = {_RELABEL_KEYS[k]: v for k, v in r.items()}
    if "action" in out:
        out["action"] = out["action"].lower()
    return out


def pod_monitor_scrape_configs(
    monitors: Iterable[dict], pods: Iterable[Any], namespace: str, *, host: str = "127.0.0.1", interval: Optional[str] = None
) -> list[dict]:
    """Prometheus ``scrape_configs`` for ``monitors`` (PodMonitors) over ``pods`` in ``namespace`` (objects with
    ``name``, ``labels`` and ``ports`` = container port name -> port on ``host``).

    Follows the Prometheus Operator's ``generatePodMonitorConfig`` (prometheus-operator/prometheus-operator
    pkg/prometheus/promcfg.go @ 002266347d12f6ee0ef0b4a774dfcc613d2d9547): one scrape config per
    ``podMetricsEndpoints`` entry, ``job_name: podMonitor/<ns>/<name>/<i>``, ``honor_labels``, interval and path
    from the endpoint; relabelings: ``job`` -> ``__tmp_prometheus_job_name``, a keep rule per selector term on
    ``__meta_kubernetes_pod_label_<key>``/``labelpresent`` (``(<values>);true``; drop for NotIn/DoesNotExist), a
    keep on ``__meta_kubernetes_pod_container_port_name`` = the endpoint's port, ``namespace``/``container``/
    ``pod`` from the meta labels, ``job = <ns>/<name>``, ``endpoint = <port>``, then the endpoint's own
    relabelings. Kubernetes service discovery is replaced by one static target per selected pod that has the
    endpoint's port (the selector evaluated here by ``selector_matches``), carrying the ``__meta_kubernetes_*``
    labels pod discovery would give it, so Prometheus's own relabeling re-checks the selection and produces the
    target labels. Left out: the operator's running-phase filter (every pod here runs) and sharding.
    ``interval`` overrides the endpoints' scrape interval (tests scrape faster)."""
    pods = list(pods)
    out = []
    for m in monitors:
        if m.get("kind") != "PodMonitor":
            continue
        meta, spec = m["metadata"], m["spec"]
        ns_sel = spec.get("namespaceSelector") or {}
        if not ns_sel.get("any") and namespace not in (ns_sel.get("matchNames") or [meta["namespace"]]):
            continue
        selector = spec.get("selector") or {}
        selected = [p for p in pods if selector_matches(selector, p.labels)]
        keep = [
            {
                "action": "keep",
                "source_labels": [
                    f"__meta_kubernetes_pod_label_{_sanitize(k)}",
                    f"__meta_kubernetes_pod_labelpresent_{_sanitize(k)}",
                ],
                "regex": f"({v});true",
            }
            for k, v in sorted((selector.get("matchLabels") or {}).items())
        ]
        for e in selector.get("matchExpressions") or []:
            k, op = _sanitize(e["key"]), e["operator"]
            if op in ("In", "NotIn"):
                keep.append(
                    {
                        "action": "keep" if op == "In" else "drop",
                        "source_labels": [f"__meta_kubernetes_pod_label_{k}", f"__meta_kubernetes_pod_labelpresent_{k}"],
                        "regex": f"({'|'.join(e.get('values') or [])});true",
                    }
                )
            else:
                keep.append(
                    {
                        "action": "keep" if op == "Exists" else "drop",
                        "source_labels": [f"__meta_kubernetes_pod_labelpresent_{k}"],
                        "regex": "true",
                    }
                )
        for i, ep in enumerate(spec.get("podMetricsEndpoints") or []):
            port = ep["port"]
            groups = []
            for p in selected:
                if port not in p.ports:
                    continue
                labels = {
                    "__meta_kubernetes_namespace": namespace,
                    "__meta_kubernetes_pod_name": p.name,
                    "__meta_kubernetes_pod_container_port_name": port,
                }
                for k, v in p.labels.items():
                    labels[f"__meta_kubernetes_pod_label_{_sanitize(k)}"] = v
                    labels[f"__meta_kubernetes_pod_labelpresent_{_sanitize(k)}"] = "true"
                groups.append({"targets": [f"{host}:{p.ports[port]}"], "labels": labels})
            relabel = (
                [{"source_labels": ["job"], "target_label": "__tmp_prometheus_job_name"}]
                + keep
                + [
                    {"action": "keep", "source_labels": ["__meta_kubernetes_pod_container_port_name"], "regex": port},
                    {"source_labels": ["__meta_kubernetes_namespace"], "target_label": "namespace"},
                    {"source_labels": ["__meta_kubernetes_pod_container_name"], "target_label": "container"},
                    {"source_labels": ["__meta_kubernetes_pod_name"], "target_label": "pod"},
                    {"target_label": "job", "replacement": f"{meta['namespace']}/{meta['name']}"},
                    {"target_label": "endpoint", "replacement": port},
                ]
                + [_relabel(r) for r in ep.get("relabelings") or []]
            )
            out.append(
                {
                    "job_name": f"podMonitor/{meta['namespace']}/{meta['name']}/{i}",
                    "honor_labels": bool(ep.get("honorLabels", False)),
                    "scrape_interval": interval or ep.get("interval") or SCRAPE_INTERVAL,
                    "metrics_path": ep.get("path") or "/metrics",
                    "static_configs": groups,
                    "relabel_configs": relabel,
                }
            )
    return out


# Grafana's template-variable syntax: $var, [[var]] / [[var:fmt]], ${var} / ${var.field} / ${var:fmt}
# (grafana/grafana public/app/features/variables/utils.ts @ 03692907fef7b02d0fba1daae2140d09f7d33082, variableRegex).
_GRAFANA_VARIABLE = re.compile(r"\$(\w+)|\[\[(\w+?)(?::(\w+))?\]\]|\$\{(\w+)(?:\.([^:^\}]+))?(?::([^\}]+))?\}")


def grafana_interpolate(expr: str, variables: dict[str, str]) -> str:
    """``expr`` with every Grafana variable reference replaced by its value in ``variables`` (single values:
    what the Prometheus data source sends for a single-valued custom variable is the value itself; a value
    that would need escaping, or an unknown variable, is an error rather than a silently wrong query)."""

    def sub(m: re.Match) -> str:
        name = m.group(1) or m.group(2) or m.group(4)
        if name not in variables:
            raise KeyError(f"Grafana variable ${name} in {expr!r} has no value (known: {sorted(variables)})")
        value = variables[name]
        if re.search(r"[\\'\"|.*+?()\[\]{}^$]", value):
            raise ValueError(f"Grafana variable ${name} = {value!r} would need escaping")
        return value

    return _GRAFANA_VARIABLE.sub(sub, expr)


def dashboard_queries(configmap: dict) -> list[tuple[str, str, str, str]]:
    """Every query of a dashboard ConfigMap, as Grafana sends it: (dashboard title, panel title, refId, PromQL),
    with the dashboard's custom/constant variables substituted by their current values."""
    out = []
    for text in configmap["data"].values():
        dash = json.loads(text)
        variables = {}
        for v in (dash.get("templating") or {}).get("list") or []:
            if v.get("type") in ("custom", "constant", "textbox"):
                cur = (v.get("current") or {}).get("value", v.get("query"))
                if isinstance(cur, list):
                    raise ValueError(f"dashboard {dash['title']!r}: multi-value variable {v['name']!r} is not handled")
                variables[v["name"]] = cur
        panels = list(dash.get("panels") or [])
        while panels:
            panel = panels.pop(0)
            panels.extend(panel.get("panels") or [])  # collapsed rows keep their panels inside
            for t in panel.get("targets") or []:
                if "expr" in t:
                    out.append((dash["title"], panel["title"], t["refId"], grafana_interpolate(t["expr"], variables)))
    return out


# --------------------------------------------------------------------------- the plan


def observability_pod_security(charts: list[HelmSpec]) -> str:
    """The Pod Security level the observability namespace enforces (stacks.serving.pod_security_labels; warn and audit
    stay ``restricted``). Its pods are the charts' (the objects this plan renders are ConfigMaps and monitors, no pod):
    kube-prometheus-stack runs the prometheus-node-exporter DaemonSet, which by that chart's defaults (kept here: the
    values above leave ``nodeExporter`` alone) shares the node's network and PID namespaces and mounts the host's
    /proc, /sys and / (hostNetwork, hostPID, hostPath: outside ``baseline``); the dcgm-exporter chart's exporter adds
    SYS_ADMIN and mounts the kubelet's pod-resources socket from the host. Either chart needs ``privileged``; with
    neither, no pod of this program runs there and ``restricted`` admits everything the plan puts in it. The charts
    are not rendered by this program, so this rests on their documented defaults, not on a check of their output."""
    return "privileged" if any(c.chart in (KPS_KEY, DCGM_KEY) for c in charts) else least_strict([])


def build_observability(obs: Any, *, serving_namespace: str, dgd_name: str, nvidia_stack: Optional[str]) -> ObservabilityPlan:
    """Everything ``dynamo:observability`` asks for. ``obs``: ``stacks.config.keys.ObservabilityConfig``;
    ``nvidia_stack``: the NVIDIA stack the program installs (None when it installs none)."""
    ns = obs.namespace
    install = obs.prometheus == "install"
    labels = dict(obs.monitor_labels) if obs.monitor_labels else ({"release": KPS_RELEASE} if install else {})
    dcgm = dcgm_for(nvidia_stack, obs.dcgm)
    charts: list[HelmSpec] = [kube_prometheus_stack(ns, getattr(obs, "alerts", None))] if install else []
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
        ns_obj = {
            "apiVersion": "v1",
            "kind": "Namespace",
            "metadata": {
                "name": ns,
                "labels": {
                    "app.kubernetes.io/part-of": "dynamo-observability",
                    **pod_security_labels(observability_pod_security(charts)),
                },
            },
        }
    warnings = []
    alerts = getattr(obs, "alerts", None)
    if install and alerts is not None and alerts.enabled and alerts.webhook_url_secret is None:
        warnings.append(
            f"dynamo:observability.alerts: no webhookUrlSecret, so alerts are held in Alertmanager and sent nowhere: see "
            f"them with `kubectl -n {ns} port-forward svc/{KPS_RELEASE}-alertmanager 9093`, or name the Secret "
            f'holding your webhook URL (docs/operating.md, "Metrics, benchmark and time to serving")'
        )
    return ObservabilityPlan(
        namespace=ns,
        monitor_labels=labels,
        prometheus_endpoint=obs.prometheus_endpoint or prometheus_url(ns),
        charts=charts,
        monitors=monitors,
        dashboards=dashboards,
        namespace_object=ns_obj,
        dcgm=dcgm,
        rbac=grafana_sidecar_rbac(ns) if install else [],
        warnings=warnings,
    )
