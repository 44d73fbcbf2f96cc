"""The NVIDIA DRA driver and ComputeDomains a GB200 NVLink domain needs on EKS (``AREA_ULTRASERVERS_AND_ZONES``), with
the chart defaults the driver's release values are merged onto (``dra_pod_specs``, which tests/test_dra_simulate.py
also schedules with)."""

from __future__ import annotations

from typing import Any

from stacks.cluster import DRA_CHARTS, tolerates
from stacks.registry.gpus import INSTANCES

from . import (
    AREA_ULTRASERVERS_AND_ZONES,
    COMPUTE_DOMAIN,
    DGD,
    HELM,
    NODEGROUP,
    Graph,
    Res,
    _get,
    _gpu_nodegroups,
    _instance_type,
    _node_labels,
    rule,
    _selects,
)


# --------------------------------------------------------------------------- GB200 NVLink domains


@rule(AREA_ULTRASERVERS_AND_ZONES)
def gb200_nvlink_domain_has_dra_and_compute_domain(g: Graph) -> list[str]:
    """GB200 nodes run the NVIDIA DRA driver (ComputeDomains, IMEX); when a ComputeDomain is registered every GPU
    worker of the DGD claims its channel. Source: EKS user guide "Use P6e-GB200 UltraServers with Amazon EKS"
    (DRA, NVIDIA DRA driver, ComputeDomain); NVIDIA "DRA Driver for GPUs" (ComputeDomains)."""
    out = []
    gb200 = [ng for ng in _gpu_nodegroups(g) if INSTANCES[_instance_type(g, ng)].ultraserver]
    if not gb200:
        return out
    if not any(r.inputs.get("chart") in DRA_CHARTS for r in g.of(HELM)):
        out.append("GB200 node group without the NVIDIA DRA driver release (dra-driver-nvidia-gpu)")
    for cd in g.of(COMPUTE_DOMAIN):
        template = _get(cd.inputs, "spec", "channel", "resourceClaimTemplate", "name")
        for dgd in g.of(DGD):
            for comp in _get(dgd.inputs, "spec", "components", default=[]):
                pod = comp["podTemplate"]["spec"]
                if not any(
                    "nvidia.com/gpu" in ((c.get("resources") or {}).get("limits") or {}) for c in pod.get("containers", [])
                ):
                    continue
                if not any(c.get("resourceClaimTemplateName") == template for c in pod.get("resourceClaims") or []):
                    out.append(f"{comp['name']}: no claim on ComputeDomain channel {template}")
    return out


# --------------------------------------------------------------------------- GB200 DRA driver placement on EKS


# The scheduling defaults of the DRA driver charts (what Helm uses where the release's values say nothing):
# nvidia-dra-driver-gpu 25.x: NVIDIA/k8s-dra-driver-gpu deployments/helm/nvidia-dra-driver-gpu/values.yaml @0540432
# (controller required on node-role.kubernetes.io/control-plane; kubelet plugin tolerates nothing).
# dra-driver-nvidia-gpu: kubernetes-sigs/dra-driver-nvidia-gpu deployments/helm/dra-driver-nvidia-gpu/values.yaml
# @3fe94879c9cfdbdc8fad4b62c712f0c7a1f9de22, a main-branch commit (its values turn on the v1beta2 conversion webhook of
# the 0.5 line), NOT the 0.4.1 release this project pins (versions.yaml charts.nvidia-dra-driver-gpu): these defaults are
# unverified for 0.4.1. Why: the chart's Chart.yaml says version "0.4.1" at commit 764900e7833798a1528bd52a2af3e1b2d5f7a616
# of that repository, but the source index searched holds no values.yaml at that commit (0.4.1 was cut on a release
# branch: kubernetes-sigs/dra-driver-nvidia-gpu#1232 "Bump release version to v0.4.1", the cherry-picks of #1140), and
# the NVIDIA/k8s-dra-driver-gpu Chart.yaml read says 0.5.0-dev (@4deb6ebc). The values.yaml versions read
# disagree where it matters here: @3fe94879 (below) prefers control-plane nodes for the controller and has the kubelet
# plugin tolerate nvidia.com/gpu; @6fade973 and @9457bc47 add two NFD PCI-class terms to the kubelet plugin's affinity;
# NVIDIA/k8s-dra-driver-gpu @a0b61536 requires control-plane nodes for the controller and tolerates nothing for the
# plugin (the 25.x shape). The program's release values (stacks/cluster/dra.py) set every one of those fields (the
# controller's nodeSelector, required affinity and tolerations; the plugin's required affinity and tolerations; lists
# replace in Helm's merge), so the rule below gives the same verdict under each of them (tests/test_aws_rules.py
# test_dra_rule_verdict_does_not_depend_on_the_unverified_defaults); only the controller's preferred affinity
# (a preference, no admission effect) comes from whichever defaults 0.4.1 has.
_GPU_PRESENT_TERMS = [
    {"matchExpressions": [{"key": "feature.node.kubernetes.io/pci-10de.present", "operator": "In", "values": ["true"]}]},
    {"matchExpressions": [{"key": "feature.node.kubernetes.io/cpu-model.vendor_id", "operator": "In", "values": ["NVIDIA"]}]},
    {"matchExpressions": [{"key": "nvidia.com/gpu.present", "operator": "In", "values": ["true"]}]},
]


DRA_CHART_DEFAULTS = {
    "nvidia-dra-driver-gpu": {
        "resources": {"gpus": {"enabled": True}, "computeDomains": {"enabled": True}},
        "controller": {
            "nodeSelector": {},
            "priorityClassName": "system-node-critical",
            "tolerations": [{"key": "node-role.kubernetes.io/control-plane", "operator": "Exists", "effect": "NoSchedule"}],
            "affinity": {
                "nodeAffinity": {
                    "requiredDuringSchedulingIgnoredDuringExecution": {
                        "nodeSelectorTerms": [
                            {"matchExpressions": [{"key": "node-role.kubernetes.io/control-plane", "operator": "Exists"}]}
                        ]
                    }
                }
            },
        },
        "kubeletPlugin": {
            "nodeSelector": {},
            "priorityClassName": "system-node-critical",
            "tolerations": [],
            "affinity": {
                "nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": _GPU_PRESENT_TERMS}}
            },
        },
    },
    "dra-driver-nvidia-gpu": {
        "resources": {"gpus": {"enabled": True}, "computeDomains": {"enabled": True}},
        "controller": {
            "nodeSelector": {},
            "priorityClassName": "system-node-critical",
            "tolerations": [
                {"key": "node-role.kubernetes.io/control-plane", "operator": "Exists", "effect": "NoSchedule"},
                {"key": "node-role.kubernetes.io/master", "operator": "Exists", "effect": "NoSchedule"},
                {"key": "CriticalAddonsOnly", "operator": "Exists"},
            ],
            "affinity": {
                "nodeAffinity": {
                    "preferredDuringSchedulingIgnoredDuringExecution": [
                        {
                            "weight": 100,
                            "preference": {
                                "matchExpressions": [{"key": "node-role.kubernetes.io/control-plane", "operator": "Exists"}]
                            },
                        }
                    ]
                }
            },
        },
        "kubeletPlugin": {
            "nodeSelector": {},
            "priorityClassName": "system-node-critical",
            "tolerations": [{"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}],
            "affinity": {
                "nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": _GPU_PRESENT_TERMS}}
            },
        },
    },
}


def helm_merge(defaults: Any, values: Any) -> Any:
    """Helm's value coalescing as it applies here: maps merge key by key, anything else (lists, scalars) given by the
    user replaces the default (Helm docs, "Values Files")."""
    if isinstance(defaults, dict) and isinstance(values, dict):
        return {k: helm_merge(defaults.get(k), values[k]) if k in values else defaults[k] for k in {**defaults, **values}}
    return values if values is not None else defaults


def dra_pod_specs(release_values: dict, chart: str) -> tuple[dict, dict, dict]:
    """(effective values, controller pod scheduling fields, kubelet-plugin pod scheduling fields) of a DRA driver release:
    the chart's defaults merged with the release's values, as the chart templates (templates/controller.yaml,
    templates/kubeletplugin.yaml) render ``nodeSelector``, ``affinity`` and ``tolerations`` into the pod specs."""
    eff = helm_merge(DRA_CHART_DEFAULTS[chart], release_values or {})

    def pod(part: str) -> dict:
        v = eff.get(part) or {}
        return {k: v[k] for k in ("nodeSelector", "affinity", "tolerations") if v.get(k)}

    return eff, pod("controller"), pod("kubeletPlugin")


def _admits(pod: dict, g: Graph, ng: Res) -> bool:
    """The pod's nodeSelector/required affinity select the group's labels and it tolerates every taint of the group."""
    return _selects(pod, _node_labels(g, ng)) and all(tolerates(pod, t) for t in ng.inputs.get("taints") or [])


@rule(AREA_ULTRASERVERS_AND_ZONES)
def dra_driver_values_follow_the_eks_guide(g: Graph) -> list[str]:
    """The NVIDIA DRA driver on EKS: ComputeDomains on, GPU allocation off (the device plugin allocates GPUs); the
    controller Deployment schedules on a node group of the cluster (EKS has no control-plane nodes, where the chart's
    defaults put it), and the kubelet-plugin DaemonSet is admitted by every GB200 node group: its affinity selects the
    group's labels and it tolerates the group's ``nvidia.com/gpu`` taint. Evaluated on the chart's defaults merged with
    the release's values. Source: EKS user guide "Use P6e-GB200 UltraServers with Amazon EKS" (dra-values.yaml:
    resources.gpus.enabled false, computeDomains.enabled true, controller without control-plane placement, kubeletPlugin
    affinity nvidia.com/gpu.present=true and toleration nvidia.com/gpu Exists NoSchedule)."""
    out = []
    gb200 = [ng for ng in _gpu_nodegroups(g) if INSTANCES[_instance_type(g, ng)].ultraserver]
    for rel in g.of(HELM):
        chart = rel.inputs.get("chart")
        if chart not in DRA_CHARTS:
            continue
        eff, controller, plugin = dra_pod_specs(rel.inputs.get("values") or {}, chart)
        if not _get(eff, "resources", "computeDomains", "enabled"):
            out.append(f"{rel.name}: resources.computeDomains.enabled is not true (the ComputeDomains GB200 needs)")
        if _get(eff, "resources", "gpus", "enabled"):
            out.append(f"{rel.name}: resources.gpus.enabled is true (GPU allocation stays with the device plugin on EKS)")
        if not any(_admits(controller, g, ng) for ng in g.of(NODEGROUP)):
            out.append(f"{rel.name}: the controller schedules on no node group ({controller}); EKS has no control-plane nodes")
        for ng in gb200:
            if not _admits(plugin, g, ng):
                out.append(
                    f"{rel.name}: the kubelet plugin is not admitted by GB200 node group {ng.name} "
                    f"(labels {ng.inputs.get('labels')}, taints {ng.inputs.get('taints')}; plugin {plugin})"
                )
    return out
