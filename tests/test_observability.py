"""Issue 13: the optional observability layer (stacks/observability.py, components/observability.py)."""
import json
from pathlib import Path

import pytest
import yaml

from harness import run_program
from stacks.config import ConfigError, ObservabilityConfig, parse
from stacks.observability import (
    COMPONENT_TYPE_LABEL, DASHBOARD_LABEL, DGD_NAME_LABEL, METRICS_ENABLED_LABEL, build_observability, dcgm_for,
)
from stacks.versions import versions

REF = Path(__file__).resolve().parents[2] / "shared" / "reference"
TARGET = "lightning-vllm-disagg-h100-dspark"
EKS = {"target": TARGET, "namespace": "serve", "cluster": {"mode": "eks"}}


def _obs(**kw) -> ObservabilityConfig:
    return ObservabilityConfig.model_validate({"enabled": True, **kw})


# --------------------------------------------------------------------------- pure builder


def test_dcgm_source_matches_the_nvidia_stack():
    assert dcgm_for("gpu-operator") == "gpu-operator"  # its own exporter: never install a second one
    assert dcgm_for("device-plugin") == "dcgm-exporter"
    assert dcgm_for(None) == "none"
    assert dcgm_for("gpu-operator", "none") == "none"


def test_gpu_operator_gets_a_service_monitor_and_no_second_exporter():
    plan = build_observability(_obs(), serving_namespace="serve", dgd_name="g", nvidia_stack="gpu-operator")
    assert [c.chart for c in plan.charts] == ["kube-prometheus-stack"]
    sm = next(m for m in plan.monitors if m["kind"] == "ServiceMonitor")
    assert sm["spec"]["namespaceSelector"] == {"matchNames": ["gpu-operator"]}
    assert sm["spec"]["selector"]["matchLabels"] == {"app": "nvidia-dcgm-exporter"}
    assert sm["metadata"]["labels"]["release"] == "kube-prometheus-stack"


def test_device_plugin_installs_the_dcgm_exporter_chart_labelled_for_our_prometheus():
    plan = build_observability(_obs(), serving_namespace="serve", dgd_name="g", nvidia_stack="device-plugin")
    kps, dcgm = plan.charts
    assert (kps.chart, kps.version) == ("kube-prometheus-stack", versions()["charts"]["kube-prometheus-stack"]["version"])
    assert dcgm.chart == "dcgm-exporter" and dcgm.namespace == "monitoring"
    assert dcgm.values["serviceMonitor"] == {"enabled": True, "interval": "15s", "additionalLabels": {"release": "kube-prometheus-stack"}}
    assert {"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"} in dcgm.values["tolerations"]
    assert not any(m["kind"] == "ServiceMonitor" for m in plan.monitors)
    # Prometheus selects monitors by the release label in every namespace; Grafana's sidecar finds dashboards everywhere.
    spec = kps.values["prometheus"]["prometheusSpec"]
    assert spec["podMonitorSelectorNilUsesHelmValues"] is True and spec["podMonitorNamespaceSelector"] == {}
    assert kps.values["grafana"]["sidecar"]["dashboards"]["label"] == DASHBOARD_LABEL


def test_pod_monitors_follow_the_platform_convention():
    """Same selectors, ports, paths and interval as the platform chart's dynamo-frontend/dynamo-worker PodMonitors,
    narrowed to this DGD in the serving namespace."""
    plan = build_observability(_obs(), serving_namespace="serve", dgd_name="vllm-disagg", nvidia_stack=None)
    fe, wk = (m for m in plan.monitors if m["kind"] == "PodMonitor")
    for m, comp, port in ((fe, "frontend", "http"), (wk, "worker", "system")):
        assert m["metadata"]["namespace"] == "serve"
        assert m["spec"]["namespaceSelector"] == {"matchNames": ["serve"]}
        assert m["spec"]["selector"]["matchLabels"] == {METRICS_ENABLED_LABEL: "true", COMPONENT_TYPE_LABEL: comp, DGD_NAME_LABEL: "vllm-disagg"}
        ep = m["spec"]["podMetricsEndpoints"][0]
        assert (ep["port"], ep["path"], ep["interval"]) == (port, "/metrics", "5s")
    assert fe["spec"]["podMetricsEndpoints"][0]["honorLabels"] is True


def test_dashboards_are_sidecar_configmaps_with_the_serving_panels():
    plan = build_observability(_obs(), serving_namespace="serve", dgd_name="g", nvidia_stack="device-plugin")
    assert [d["metadata"]["name"] for d in plan.dashboards] == ["dynamo-serving-dashboard", "dynamo-gpu-dashboard"]
    for cm in plan.dashboards:
        assert cm["metadata"]["labels"][DASHBOARD_LABEL] == "1" and cm["metadata"]["namespace"] == "monitoring"
    serving = json.loads(next(iter(plan.dashboards[0]["data"].values())))
    exprs = " ".join(t["expr"] for p in serving["panels"] for t in p["targets"])
    for metric in ("dynamo_frontend_requests_total", "dynamo_frontend_time_to_first_token_seconds_bucket",
                   "dynamo_frontend_inter_token_latency_seconds_bucket", "dynamo_frontend_output_tokens_total",
                   "dynamo_component_kvstats_gpu_cache_usage_percent", "dynamo_frontend_queued_requests"):
        assert metric in exprs, metric
    gpu = json.loads(next(iter(plan.dashboards[1]["data"].values())))
    assert "DCGM_FI_DEV_GPU_UTIL" in json.dumps(gpu)


def test_existing_prometheus_installs_no_chart_and_uses_its_labels_and_url():
    obs = _obs(prometheus="existing", prometheusEndpoint="http://prom.obs.svc:9090", monitorLabels={"team": "ml"}, dcgm="none")
    plan = build_observability(obs, serving_namespace="serve", dgd_name="g", nvidia_stack="device-plugin")
    assert plan.charts == [] and plan.prometheus_endpoint == "http://prom.obs.svc:9090"
    assert all(m["metadata"]["labels"]["team"] == "ml" and "release" not in m["metadata"]["labels"] for m in plan.monitors)


def test_monitors_are_valid_against_the_reference_crd_schema():
    """Every field we set exists in the Prometheus Operator v0.93.0 CRD schema (the pinned chart's CRD set)."""
    plan = build_observability(_obs(), serving_namespace="serve", dgd_name="g", nvidia_stack="gpu-operator")
    for m in plan.monitors:
        crd = yaml.safe_load((REF / "crds" / "monitoring" / f"monitoring.coreos.com_{m['kind'].lower()}s.yaml").read_text())
        schema = crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"]["spec"]

        def walk(value, sch, path):
            if isinstance(value, dict) and "properties" in sch:
                for k, v in value.items():
                    assert k in sch["properties"], f"{m['kind']}{path}.{k} not in the CRD schema"
                    walk(v, sch["properties"][k], f"{path}.{k}")
            elif isinstance(value, list) and "items" in sch:
                for v in value:
                    walk(v, sch["items"], path + "[]")

        walk(m["spec"], schema, ".spec")


# --------------------------------------------------------------------------- config errors


@pytest.mark.parametrize("obs, key", [
    ({"enabled": True, "prometheus": "existing"}, "observability.prometheusEndpoint"),
    ({"enabled": True, "prometheusEndpoint": "http://x:9090"}, "observability.prometheusEndpoint"),
    ({"dashboards": False}, "observability.dashboards"),  # a key under a switched-off section
    ({"enabled": True, "dcgm": "dcgm"}, "observability.dcgm"),
    ({"enabled": True, "namespace": "Mon"}, "observability.namespace"),
    ({"enabled": True, "prometheus": "existing", "prometheusEndpoint": "prom:9090"}, "observability.prometheusEndpoint"),
])
def test_bad_observability_config_names_the_key(obs, key):
    with pytest.raises(ConfigError, match=f"dynamo:{key}"):
        parse({"target": TARGET, "observability": obs})


# --------------------------------------------------------------------------- wiring (mocks)


@pytest.fixture(scope="module")
def eks_run():
    return run_program({**EKS, "observability": {"enabled": True}}, {"hfToken": "hf_x"})


def test_off_by_default_registers_nothing():
    run = run_program(EKS, {"hfToken": "hf_x"})
    assert not [r for r in run.resources if r.type.startswith("dynamo:observability")]
    assert not [r for r in run.by_type("kubernetes:helm.sh/v3:Release") if r.inputs.get("chart") == "kube-prometheus-stack"]


def test_charts_monitors_and_dashboards_are_registered_under_the_component(eks_run):
    comp = eks_run.one("dynamo:observability:Observability")
    releases = {r.inputs["chart"]: r for r in eks_run.by_type("kubernetes:helm.sh/v3:Release")}
    kps, dcgm = releases["kube-prometheus-stack"], releases["dcgm-exporter"]  # EKS default nvidiaStack: device-plugin
    assert kps.parent == comp.urn and dcgm.parent == comp.urn
    assert kps.inputs["namespace"] == "monitoring" and kps.inputs["version"] == "88.0.0"
    assert kps.urn in dcgm.dependencies  # its ServiceMonitor needs the CRDs kube-prometheus-stack brings
    ns = eks_run.by_type("kubernetes:core/v1:Namespace")
    assert any(n.inputs["metadata"]["name"] == "monitoring" and n.parent == comp.urn for n in ns)

    pms = eks_run.by_type("kubernetes:monitoring.coreos.com/v1:PodMonitor")
    assert len(pms) == 2
    for pm in pms:
        assert pm.parent == comp.urn
        assert pm.inputs["metadata"]["namespace"] == "serve"  # next to the DGD's pods
        assert pm.inputs["metadata"]["labels"]["release"] == "kube-prometheus-stack"
        assert pm.inputs["spec"]["selector"]["matchLabels"][DGD_NAME_LABEL] == "vllm-disagg-h100-dspark"
        assert kps.urn in pm.dependencies  # the CRDs come with the chart

    dashboards = [c for c in eks_run.by_type("kubernetes:core/v1:ConfigMap") if c.parent == comp.urn]
    assert {d.inputs["metadata"]["name"] for d in dashboards} == {"dynamo-serving-dashboard", "dynamo-gpu-dashboard"}
    assert all(d.inputs["metadata"]["labels"][DASHBOARD_LABEL] == "1" and d.inputs["metadata"]["namespace"] == "monitoring" for d in dashboards)


def test_platform_operator_gets_the_prometheus_url(eks_run):
    platform = next(r for r in eks_run.by_type("kubernetes:helm.sh/v3:Release") if r.inputs["chart"] == "dynamo-platform")
    url = platform.inputs["values"]["dynamo-operator"]["dynamo"]["metrics"]["prometheusEndpoint"]
    assert url == "http://kube-prometheus-stack-prometheus.monitoring.svc.cluster.local:9090"


def test_bad_monitor_label_names_the_key():
    with pytest.raises(ConfigError, match=r"dynamo:observability.monitorLabels.release: 'a b' is not a valid Kubernetes label value"):
        parse({"target": TARGET, "observability": {"enabled": True, "monitorLabels": {"release": "a b"}}})


def test_gpu_operator_stack_gets_its_exporter_monitored_not_a_second_exporter():
    run = run_program({**EKS, "cluster": {"mode": "eks", "nvidiaStack": "gpu-operator"}, "observability": {"enabled": True}}, {"hfToken": "hf_x"})
    charts = [r.inputs["chart"] for r in run.by_type("kubernetes:helm.sh/v3:Release")]
    assert "dcgm-exporter" not in charts and "gpu-operator" in charts
    sm = run.one("kubernetes:monitoring.coreos.com/v1:ServiceMonitor")
    assert sm.inputs["spec"]["namespaceSelector"] == {"matchNames": ["gpu-operator"]}


def test_render_mode_shows_dashboards_and_monitors_without_charts():
    run = run_program({"target": TARGET, "cluster": {"mode": "render", "renderDir": "/tmp/dynamo-obs-render"},
                       "observability": {"enabled": True}}, {"hfToken": "hf_x"})
    assert run.by_type("kubernetes:helm.sh/v3:Release") == []
    assert len(run.by_type("kubernetes:monitoring.coreos.com/v1:PodMonitor")) == 2
