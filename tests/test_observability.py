"""The optional observability layer (stacks/observe/observability.py; its layer: stacks/layers/observability.py, components/layer.py)."""

import json
import re

import pytest

from harness import run_program
from stacks.config.keys import ConfigError, ObservabilityConfig, parse
from stacks.observe.observability import (
    COMPONENT_TYPE_LABEL,
    DASHBOARD_LABEL,
    DGD_NAME_LABEL,
    METRICS_ENABLED_LABEL,
    build_observability,
    dashboard_queries,
    dcgm_for,
    grafana_interpolate,
    pod_monitor_scrape_configs,
    selector_matches,
)
from stacks.registry.versions import versions
from conftest import reference_file  # the reference data: $DYNAMO_REFERENCE, else ../shared/reference
from stacks.registry import yaml_text

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
    assert dcgm.values["serviceMonitor"] == {
        "enabled": True,
        "interval": "15s",
        "additionalLabels": {"release": "kube-prometheus-stack"},
    }
    assert {"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"} in dcgm.values["tolerations"]
    assert not any(m["kind"] == "ServiceMonitor" for m in plan.monitors)
    # Prometheus selects monitors by the release label in every namespace; Grafana's sidecar reads this namespace's dashboards.
    spec = kps.values["prometheus"]["prometheusSpec"]
    assert spec["podMonitorSelectorNilUsesHelmValues"] is True and spec["podMonitorNamespaceSelector"] == {}
    assert kps.values["grafana"]["sidecar"]["dashboards"]["label"] == DASHBOARD_LABEL


def test_grafana_reads_configmaps_of_its_namespace_and_no_secret():
    """The Grafana chart's own rules give its sidecars every Secret of the cluster (charts/grafana/templates/
    clusterrole.yaml: ``resources: ["configmaps", "secrets"]`` whenever a sidecar is on): the chart creates no RBAC, and
    the plan's Role grants reading ConfigMaps of the observability namespace, where the dashboards are, to the service
    account the chart runs Grafana with."""
    plan = build_observability(_obs(), serving_namespace="serve", dgd_name="g", nvidia_stack="device-plugin")
    grafana = plan.charts[0].values["grafana"]
    assert grafana["rbac"]["create"] is False
    for sidecar in ("dashboards", "datasources"):
        assert grafana["sidecar"][sidecar]["resource"] == "configmap"
    assert grafana["sidecar"]["dashboards"]["searchNamespace"] == plan.namespace
    assert {d["metadata"]["namespace"] for d in plan.dashboards} == {plan.namespace}
    kinds = {o["kind"]: o for o in plan.rbac}
    assert set(kinds) == {"Role", "RoleBinding"} and all(o["metadata"]["namespace"] == plan.namespace for o in plan.rbac)
    granted = {
        (g, r, v) for rule in kinds["Role"]["rules"] for g in rule["apiGroups"] for r in rule["resources"] for v in rule["verbs"]
    }
    assert granted == {("", "configmaps", "get"), ("", "configmaps", "watch"), ("", "configmaps", "list")}
    assert kinds["RoleBinding"]["roleRef"] == {
        "apiGroup": "rbac.authorization.k8s.io",
        "kind": "Role",
        "name": kinds["Role"]["metadata"]["name"],
    }
    assert kinds["RoleBinding"]["subjects"] == [
        {"kind": "ServiceAccount", "name": grafana["serviceAccount"]["name"], "namespace": plan.namespace}
    ]
    assert kinds["Role"] in plan.objects() and kinds["RoleBinding"] in plan.objects()
    # With an existing Prometheus nothing of Grafana is installed, and no Role either.
    existing = build_observability(
        _obs(prometheus="existing", prometheus_endpoint="http://prom:9090"),
        serving_namespace="serve",
        dgd_name="g",
        nvidia_stack="device-plugin",
    )
    assert existing.rbac == [] and not [c for c in existing.charts if c.chart == "kube-prometheus-stack"]


def _upstream_worker_expressions() -> list[tuple[str, str, tuple[str, ...]]]:
    """The platform chart's newest ``dynamo-worker`` selector as the reference facts file records it
    (shared/reference/dynamo-next/OPERATOR-LABELS.md, section 3 table row, source P)."""
    row = next(
        line
        for line in reference_file("dynamo-next/OPERATOR-LABELS.md").read_text().splitlines()
        if line.startswith("| `dynamo-worker` |")
    )
    selector = row.split("|")[2]
    out = []
    for key, op, values in re.findall(r"`([\w./-]+) (In|NotIn) \[([^\]]*)\]`", selector):
        out.append((key, op, tuple(sorted(v.strip().strip('"') for v in values.split(",")))))
    assert out, row
    return sorted(out)


def test_pod_monitors_follow_the_platform_convention():
    """Same selectors, ports, paths and interval as the platform chart's dynamo-frontend/dynamo-worker PodMonitors,
    narrowed to this DGD in the serving namespace."""
    plan = build_observability(_obs(), serving_namespace="serve", dgd_name="vllm-disagg", nvidia_stack=None)
    fe, wk = (m for m in plan.monitors if m["kind"] == "PodMonitor")
    for m, port in ((fe, "http"), (wk, "system")):
        assert m["metadata"]["namespace"] == "serve"
        assert m["spec"]["namespaceSelector"] == {"matchNames": ["serve"]}
        ep = m["spec"]["podMetricsEndpoints"][0]
        assert (ep["port"], ep["path"], ep["interval"]) == (port, "/metrics", "5s")
    assert fe["spec"]["selector"] == {
        "matchLabels": {METRICS_ENABLED_LABEL: "true", COMPONENT_TYPE_LABEL: "frontend", DGD_NAME_LABEL: "vllm-disagg"}
    }
    assert fe["spec"]["podMetricsEndpoints"][0]["honorLabels"] is True
    # Workers: the platform's expressions (worker, decode, prefill; metrics enabled) plus this DGD's name.
    assert wk["spec"]["selector"] == {
        "matchLabels": {DGD_NAME_LABEL: "vllm-disagg"},
        "matchExpressions": [
            {"key": COMPONENT_TYPE_LABEL, "operator": "In", "values": ["worker", "decode", "prefill"]},
            {"key": METRICS_ENABLED_LABEL, "operator": "In", "values": ["true"]},
        ],
    }


def test_worker_pod_monitor_selects_every_worker_role_the_operator_labels():
    """The operator labels v1beta1 prefill/decode pods ``prefill``/``decode`` and converted v1alpha1 ones ``worker``
    (OPERATOR-LABELS.md): all three are scraped, frontends, planners, other DGDs and opted-out pods are not."""
    plan = build_observability(_obs(), serving_namespace="serve", dgd_name="g", nvidia_stack=None)
    fe, wk = (m["spec"]["selector"] for m in plan.monitors if m["kind"] == "PodMonitor")

    def pod(ctype, dgd="g", metrics="true"):
        return {COMPONENT_TYPE_LABEL: ctype, DGD_NAME_LABEL: dgd, METRICS_ENABLED_LABEL: metrics}

    for ctype in ("worker", "prefill", "decode"):
        assert selector_matches(wk, pod(ctype)) and not selector_matches(fe, pod(ctype)), ctype
    assert selector_matches(fe, pod("frontend")) and not selector_matches(wk, pod("frontend"))
    for other in (
        pod("planner"),
        pod("decode", dgd="other"),
        pod("prefill", metrics="false"),
        {DGD_NAME_LABEL: "g", METRICS_ENABLED_LABEL: "true"},
    ):
        assert not selector_matches(wk, other), other


def test_worker_selector_matches_the_platform_charts_newest_worker_pod_monitor():
    """Our expressions are the platform chart's own (as the reference facts file records them)."""
    plan = build_observability(_obs(), serving_namespace="serve", dgd_name="g", nvidia_stack=None)
    ours = next(m for m in plan.monitors if m["metadata"]["name"] == "g-worker")["spec"]["selector"]
    assert (
        sorted((e["key"], e["operator"], tuple(sorted(e["values"]))) for e in ours["matchExpressions"])
        == _upstream_worker_expressions()
    )


@pytest.mark.parametrize(
    "expr, labels, expected",
    [
        ({"key": "a", "operator": "In", "values": ["x", "y"]}, {"a": "y"}, True),
        ({"key": "a", "operator": "In", "values": ["x"]}, {}, False),
        ({"key": "a", "operator": "NotIn", "values": ["x"]}, {}, True),  # absent label: NotIn holds (Kubernetes semantics)
        ({"key": "a", "operator": "NotIn", "values": ["x"]}, {"a": "x"}, False),
        ({"key": "a", "operator": "Exists"}, {"a": ""}, True),
        ({"key": "a", "operator": "Exists"}, {"b": "x"}, False),
        ({"key": "a", "operator": "DoesNotExist"}, {"b": "x"}, True),
        ({"key": "a", "operator": "DoesNotExist"}, {"a": "x"}, False),
    ],
)
def test_selector_operators(expr, labels, expected):
    assert selector_matches({"matchExpressions": [expr]}, labels) is expected
    # matchLabels and matchExpressions are ANDed
    assert selector_matches({"matchLabels": {"c": "1"}, "matchExpressions": [expr]}, {**labels, "c": "2"}) is False


def test_unknown_selector_operator_is_an_error():
    with pytest.raises(ValueError, match="'Gt'.*In, NotIn, Exists, DoesNotExist"):
        selector_matches({"matchExpressions": [{"key": "a", "operator": "Gt", "values": ["1"]}]}, {"a": "2"})


class _Pod:
    def __init__(self, name, ctype, ports, dgd="g"):
        self.name, self.ports = name, ports
        self.labels = {
            COMPONENT_TYPE_LABEL: ctype,
            DGD_NAME_LABEL: dgd,
            METRICS_ENABLED_LABEL: "true",
            "nvidia.com/dynamo-namespace": "serve-g",
        }


def test_scrape_configs_follow_the_pod_monitors():
    """One job per endpoint as the Prometheus Operator names it; a static target per selected pod with the port;
    the operator's selection, namespace/pod/job/endpoint relabelings and then the endpoint's own."""
    plan = build_observability(_obs(), serving_namespace="serve", dgd_name="g", nvidia_stack="gpu-operator")
    pods = [
        _Pod("g-frontend-1", "frontend", {"http": 18000}),
        _Pod("g-prefill-1", "prefill", {"system": 19001}),
        _Pod("g-decode-1", "decode", {"system": 19002}),
        _Pod("h-decode-1", "decode", {"system": 19003}, dgd="h"),
        _Pod("g-planner-1", "planner", {"metrics": 19004}),
    ]
    cfgs = {c["job_name"]: c for c in pod_monitor_scrape_configs(plan.monitors, pods, "serve", interval="1s")}
    assert set(cfgs) == {"podMonitor/serve/g-frontend/0", "podMonitor/serve/g-worker/0"}  # the ServiceMonitor is not a PodMonitor
    fe, wk = cfgs["podMonitor/serve/g-frontend/0"], cfgs["podMonitor/serve/g-worker/0"]
    assert [g["targets"] for g in fe["static_configs"]] == [["127.0.0.1:18000"]]
    assert [g["targets"] for g in wk["static_configs"]] == [["127.0.0.1:19001"], ["127.0.0.1:19002"]]
    assert fe["honor_labels"] is True and wk["honor_labels"] is False
    assert (wk["metrics_path"], wk["scrape_interval"]) == ("/metrics", "1s")
    meta = wk["static_configs"][0]["labels"]
    assert meta["__meta_kubernetes_pod_name"] == "g-prefill-1" and meta["__meta_kubernetes_namespace"] == "serve"
    assert meta["__meta_kubernetes_pod_label_nvidia_com_dynamo_component_type"] == "prefill"
    rl = wk["relabel_configs"]
    assert {
        "action": "keep",
        "source_labels": [
            "__meta_kubernetes_pod_label_nvidia_com_dynamo_component_type",
            "__meta_kubernetes_pod_labelpresent_nvidia_com_dynamo_component_type",
        ],
        "regex": "(worker|decode|prefill);true",
    } in rl
    assert {"target_label": "job", "replacement": "serve/g-worker"} in rl
    assert rl[-1] == {
        "action": "replace",
        "source_labels": ["__meta_kubernetes_pod_label_nvidia_com_dynamo_component_type"],
        "target_label": "dynamo_component_type",
    }
    # Another namespace is not selected (namespaceSelector.matchNames).
    assert all(not c["static_configs"] for c in pod_monitor_scrape_configs(plan.monitors, pods, "elsewhere"))


def test_dashboard_queries_are_what_grafana_sends():
    plan = build_observability(_obs(), serving_namespace="serve", dgd_name="g", nvidia_stack="device-plugin")
    queries = [q for cm in plan.dashboards for q in dashboard_queries(cm)]
    assert {d for d, *_ in queries} == {"Dynamo serving", "Dynamo GPUs (DCGM)"}
    assert all("$" not in q and "[[" not in q for *_, q in queries)
    kv = [q for _, panel, _, q in queries if panel == "KV-cache usage"]
    assert kv == [
        'max by (pod) (dynamo_component_gpu_cache_usage_percent{namespace="serve"})'
        ' or max by (pod) (vllm:kv_cache_usage_perc{namespace="serve"})'
    ]
    assert len(queries) == sum(
        len(p["targets"]) for cm in plan.dashboards for p in json.loads(next(iter(cm["data"].values())))["panels"]
    )


def test_grafana_variables_are_substituted_in_every_syntax():
    assert (
        grafana_interpolate('m{a="$ns",b="${ns}",c="[[ns]]",d="${ns:raw}"}', {"ns": "serve"})
        == 'm{a="serve",b="serve",c="serve",d="serve"}'
    )
    with pytest.raises(KeyError, match=r"\$job"):
        grafana_interpolate('m{job="$job"}', {"ns": "serve"})
    with pytest.raises(ValueError, match="escaping"):
        grafana_interpolate('m{a=~"$ns"}', {"ns": "a|b"})


def test_dashboards_are_sidecar_configmaps_with_the_serving_panels():
    plan = build_observability(_obs(), serving_namespace="serve", dgd_name="g", nvidia_stack="device-plugin")
    assert [d["metadata"]["name"] for d in plan.dashboards] == ["dynamo-serving-dashboard", "dynamo-gpu-dashboard"]
    for cm in plan.dashboards:
        assert cm["metadata"]["labels"][DASHBOARD_LABEL] == "1" and cm["metadata"]["namespace"] == "monitoring"
    serving = json.loads(next(iter(plan.dashboards[0]["data"].values())))
    exprs = " ".join(t["expr"] for p in serving["panels"] for t in p["targets"])
    for metric in (
        "dynamo_frontend_requests_total",
        "dynamo_frontend_time_to_first_token_seconds_bucket",
        "dynamo_frontend_inter_token_latency_seconds_bucket",
        "dynamo_frontend_output_tokens_total",
        "dynamo_component_gpu_cache_usage_percent",
        "dynamo_frontend_queued_requests",
    ):
        assert metric in exprs, metric
    assert "kvstats" not in exprs  # the worker exports dynamo_component_gpu_cache_usage_percent (no kvstats_ part)
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
        crd = yaml_text.load(reference_file(f"crds/monitoring/monitoring.coreos.com_{m['kind'].lower()}s.yaml").read_text())
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


@pytest.mark.parametrize(
    "obs, key",
    [
        ({"enabled": True, "prometheus": "existing"}, "observability.prometheusEndpoint"),
        ({"enabled": True, "prometheusEndpoint": "http://x:9090"}, "observability.prometheusEndpoint"),
        ({"dashboards": False}, "observability.dashboards"),  # a key under a switched-off section
        ({"enabled": True, "dcgm": "dcgm"}, "observability.dcgm"),
        ({"enabled": True, "namespace": "Mon"}, "observability.namespace"),
        ({"enabled": True, "prometheus": "existing", "prometheusEndpoint": "prom:9090"}, "observability.prometheusEndpoint"),
    ],
)
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
    assert (
        kps.inputs["namespace"] == "monitoring"
        and kps.inputs["version"] == versions()["charts"]["kube-prometheus-stack"]["version"] == "88.5.4"
    )
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
    assert all(
        d.inputs["metadata"]["labels"][DASHBOARD_LABEL] == "1" and d.inputs["metadata"]["namespace"] == "monitoring"
        for d in dashboards
    )


def test_platform_operator_gets_the_prometheus_url(eks_run):
    platform = next(r for r in eks_run.by_type("kubernetes:helm.sh/v3:Release") if r.inputs["chart"] == "dynamo-platform")
    url = platform.inputs["values"]["dynamo-operator"]["dynamo"]["metrics"]["prometheusEndpoint"]
    assert url == "http://kube-prometheus-stack-prometheus.monitoring.svc.cluster.local:9090"


def test_bad_monitor_label_names_the_key():
    with pytest.raises(
        ConfigError, match=r"dynamo:observability.monitorLabels.release: 'a b' is not a valid Kubernetes label value"
    ):
        parse({"target": TARGET, "observability": {"enabled": True, "monitorLabels": {"release": "a b"}}})


def test_gpu_operator_stack_gets_its_exporter_monitored_not_a_second_exporter():
    run = run_program(
        {**EKS, "cluster": {"mode": "eks", "nvidiaStack": "gpu-operator"}, "observability": {"enabled": True}},
        {"hfToken": "hf_x"},
    )
    charts = [r.inputs["chart"] for r in run.by_type("kubernetes:helm.sh/v3:Release")]
    assert "dcgm-exporter" not in charts and "gpu-operator" in charts
    sm = run.one("kubernetes:monitoring.coreos.com/v1:ServiceMonitor")
    assert sm.inputs["spec"]["namespaceSelector"] == {"matchNames": ["gpu-operator"]}


def test_render_mode_shows_dashboards_and_monitors_without_charts():
    run = run_program(
        {
            "target": TARGET,
            "cluster": {"mode": "render", "renderDir": "/tmp/dynamo-obs-render"},
            "observability": {"enabled": True},
        },
        {"hfToken": "hf_x"},
    )
    assert run.by_type("kubernetes:helm.sh/v3:Release") == []
    assert len(run.by_type("kubernetes:monitoring.coreos.com/v1:PodMonitor")) == 2
