"""Observability ComponentResource: thin wiring of ``stacks.observe.observability.build_observability``.

Order: namespace -> charts (kube-prometheus-stack installs the Prometheus Operator CRDs, so the
monitors wait for it) -> dashboards and monitors. With ``prometheus: existing`` there is no chart
and the monitors depend on nothing of ours (the CRDs must already exist in the cluster).
"""
from __future__ import annotations

from typing import Optional, Sequence

import pulumi
import pulumi_kubernetes as k8s

from components.platform import helm_release
from stacks.observe.observability import ObservabilityPlan

PKG = "dynamo"


def _opts(parent: pulumi.Resource, depends_on: Sequence[pulumi.Resource] = ()) -> pulumi.ResourceOptions:
    return pulumi.ResourceOptions(parent=parent, depends_on=list(depends_on))


class Observability(pulumi.ComponentResource):
    """Prometheus/Grafana (or an existing Prometheus), DCGM, Dynamo monitors and Grafana dashboards."""

    namespace: pulumi.Output[str]
    prometheus_endpoint: pulumi.Output[str]
    dcgm: pulumi.Output[str]

    def __init__(self, name: str, plan: ObservabilityPlan, opts: Optional[pulumi.ResourceOptions] = None,
                 depends_on: Sequence[pulumi.Resource] = ()):
        """``depends_on``: what the charts need first (e.g. the GPU node group, the NVIDIA stack)."""
        super().__init__(f"{PKG}:observability:Observability", name, None, opts)
        base: list[pulumi.Resource] = list(depends_on)
        self.ns: Optional[k8s.core.v1.Namespace] = None
        if plan.namespace_object:
            self.ns = k8s.core.v1.Namespace(f"{name}-namespace", metadata=plan.namespace_object["metadata"], opts=_opts(self))
            base.append(self.ns)
        # The Grafana sidecars' Role (ConfigMaps of this namespace only): before the chart, so they never start without it.
        self.rbac: list[pulumi.Resource] = []
        for obj in plan.rbac:
            cls = k8s.rbac.v1.Role if obj["kind"] == "Role" else k8s.rbac.v1.RoleBinding
            extra = {"rules": obj["rules"]} if obj["kind"] == "Role" else {"role_ref": obj["roleRef"], "subjects": obj["subjects"]}
            self.rbac.append(cls(f"{name}-{obj['kind'].lower()}-{obj['metadata']['name']}", metadata=obj["metadata"], **extra, opts=_opts(self, base)))
        # In order: kube-prometheus-stack first (it brings the monitoring CRDs the dcgm-exporter chart's ServiceMonitor needs).
        self.charts: list[k8s.helm.v3.Release] = []
        for spec in plan.charts:
            self.charts.append(helm_release(f"{name}-{spec.name}", spec, _opts(self, base + self.rbac + self.charts[:1]), create_namespace=False))
        crds = base + self.charts[:1]
        self.dashboards = [
            k8s.core.v1.ConfigMap(f"{name}-{cm['metadata']['name']}", metadata=cm["metadata"], data=cm["data"], opts=_opts(self, base))
            for cm in plan.dashboards
        ]
        self.monitors = [
            k8s.apiextensions.CustomResource(
                f"{name}-{m['kind'].lower()}-{m['metadata']['name']}",
                api_version=m["apiVersion"], kind=m["kind"], metadata=m["metadata"], spec=m["spec"],
                opts=_opts(self, crds),
            )
            for m in plan.monitors
        ]
        for warning in plan.warnings:
            pulumi.log.warn(warning, resource=self)
        self.namespace = pulumi.Output.from_input(plan.namespace)
        self.prometheus_endpoint = pulumi.Output.from_input(plan.prometheus_endpoint)
        self.dcgm = pulumi.Output.from_input(plan.dcgm)
        self.register_outputs({"namespace": self.namespace, "prometheusEndpoint": self.prometheus_endpoint, "dcgm": self.dcgm})
