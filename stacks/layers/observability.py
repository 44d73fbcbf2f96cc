"""The observability layer (``dynamo:observability``) in the one layer shape: ``observability_layer`` turns the typed
``stacks.observe.observability.ObservabilityPlan`` (built by ``build_observability``, with the stack's alert rules)
into the ``LayerPlan`` that components/layer.py creates, component ``dynamo:observability:Observability``.

The typed plan stays the program's (``ProgramPlan.observability``): KEDA's ScaledObjects and the platform chart read
its Prometheus URL. Here only the order and the names are decided:

- the observability Namespace first; the Grafana sidecars' Role and RoleBinding (ConfigMaps of this namespace only)
  before the charts, so the sidecars never start without them; the charts install into the Namespace, which Helm does
  not create (``chart_namespaces``), kube-prometheus-stack first (it brings the monitoring CRDs the dcgm-exporter
  chart's ServiceMonitor needs);
- the monitors (PodMonitors, ServiceMonitors, the PrometheusRule) after kube-prometheus-stack, which brings their CRDs;
  with ``prometheus: existing`` there is no chart and they wait for nothing of ours (the CRDs must already exist);
- the whole layer after the cluster's storage and GPU capacity (``after: cluster``; the NVIDIA stack whose DCGM
  exporter it scrapes comes with the GPU capacity), not after the serving objects, which it does not need;
- resource names as ``observability-<what>`` (``names``): ``-namespace``, ``-<kind>-<name>`` for the Role,
  RoleBinding and monitors, ``-<name>`` for the dashboards; they are the resources' URNs, so they never change.
"""

from __future__ import annotations

from stacks.layers import LayerPlan
from stacks.observe.observability import KPS_RELEASE, ObservabilityPlan

KEY = "observability"


def observability_layer(obs: ObservabilityPlan) -> LayerPlan:
    """The LayerPlan of a final ``ObservabilityPlan`` (its alert rules added, render mode's charts dropped); the objects
    are the plan's own dicts, so later changes to them (the Pod Security labels' version) show in both."""
    objects: list[dict] = []
    names: dict[int, str] = {}

    def add(obj: dict, name: str) -> None:
        names[len(objects)] = f"{KEY}-{name}"
        objects.append(obj)

    if obs.namespace_object:
        add(obs.namespace_object, "namespace")
    for obj in obs.rbac:
        add(obj, f"{obj['kind'].lower()}-{obj['metadata']['name']}")
    for cm in obs.dashboards:
        add(cm, cm["metadata"]["name"])
    for m in obs.monitors:
        add(m, f"{m['kind'].lower()}-{m['metadata']['name']}")
    return LayerPlan(
        key=KEY,
        kind="Observability",
        title=f"observability (namespace {obs.namespace}, DCGM {obs.dcgm})",
        charts=list(obs.charts),
        objects=objects,
        names=names,
        before_charts=frozenset({"Namespace", *(o["kind"] for o in obs.rbac)}),
        after_charts=frozenset(m["kind"] for m in obs.monitors),
        crds_from=frozenset({KPS_RELEASE}),
        chart_namespaces=False,
        after="cluster",
        warnings=list(obs.warnings),
    )
