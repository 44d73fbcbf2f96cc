"""GB200 NVLink domains: the NVIDIA DRA driver release and its values on EKS, and the ComputeDomain the workers of a
disaggregated target claim when they span nodes."""

from __future__ import annotations

from stacks.cluster.pools import POOL_LABEL, pod_requests


DRA_CHARTS = ("dra-driver-nvidia-gpu", "nvidia-dra-driver-gpu")  # the chart's name from v0.4.0, and before it


def dra_driver_values() -> dict:
    """Helm values of the NVIDIA DRA driver on EKS, from the EKS user guide "Use P6e-GB200 UltraServers with Amazon EKS"
    (awsdocs/amazon-eks-user-guide latest/ug/ml/ml-eks-nvidia-ultraserver.adoc @e0464053, "Install NVIDIA DRA driver",
    dra-values.yaml): ComputeDomains only (GPU allocation stays with the device plugin); the controller off the
    control-plane placement of the chart's defaults (EKS has no control-plane nodes: NVIDIA/k8s-dra-driver-gpu
    values.yaml @0540432 requires node-role.kubernetes.io/control-plane); the kubelet plugin on nodes labelled
    ``nvidia.com/gpu.present=true`` and tolerating the ``nvidia.com/gpu`` NoSchedule taint (the old chart's plugin
    tolerates nothing). Host driver root ``/``: the AL2023 NVIDIA AMI ships the driver.

    The guide clears the controller's placement with ``null``; the Python SDK drops null map values before they reach
    the engine (pulumi/pulumi#12178; pulumi-kubernetes#3811, #2034) and empty lists have been dropped too
    (pulumi-kubernetes#2089). So the controller's placement is stated with non-empty values instead, which Helm's
    value merge applies whatever the chart's defaults (lists replace, maps merge): required affinity and nodeSelector
    on the system node group, tolerations replaced by CriticalAddonsOnly only (no control-plane toleration).
    ``nameOverride`` keeps the resource names of a release first installed from the pre-0.4 chart
    (kubernetes-sigs/dra-driver-nvidia-gpu site/content/docs/upgrade.md @617fbb49, "Upgrade from v25.12.0 to v0.4.0")."""
    from stacks.cluster.platform import CRITICAL_ADDONS_TOLERATION
    from stacks.registry.charts import GPU_TOLERATION

    system = {POOL_LABEL: "system"}
    return {
        "nameOverride": "nvidia-dra-driver-gpu",
        "nvidiaDriverRoot": "/",
        "resources": {"gpus": {"enabled": False}, "computeDomains": {"enabled": True}},
        "controller": {
            "nodeSelector": dict(system),
            "affinity": {
                "nodeAffinity": {
                    "requiredDuringSchedulingIgnoredDuringExecution": {
                        "nodeSelectorTerms": [{"matchExpressions": [{"key": POOL_LABEL, "operator": "In", "values": ["system"]}]}]
                    }
                }
            },
            "tolerations": [dict(CRITICAL_ADDONS_TOLERATION)],
        },
        "kubeletPlugin": {
            "affinity": {
                "nodeAffinity": {
                    "requiredDuringSchedulingIgnoredDuringExecution": {
                        "nodeSelectorTerms": [
                            {"matchExpressions": [{"key": "nvidia.com/gpu.present", "operator": "In", "values": ["true"]}]}
                        ]
                    }
                }
            },
            "tolerations": [dict(GPU_TOLERATION)],
        },
    }


def dra_driver_spec():
    """The NVIDIA DRA driver release (values: ``dra_driver_values``). Pinned in versions.yaml charts.nvidia-dra-driver-gpu
    (the chart is dra-driver-nvidia-gpu from v0.4.0; the release keeps its name, so the Pulumi URN and the Helm
    release do not change). Moving a gb200 stack from the 25.x chart is therefore an in-place update, a ``helm
    upgrade``: the Release's diff replaces only on a new ``name`` or ``namespace`` (pulumi-kubernetes
    provider/pkg/provider/helm_release.go, Diff: ``forceNewFields := []string{".name", ".namespace"}``), and a new
    ``chart``, ``repositoryOpts`` or ``version`` is an update."""
    from stacks.registry.charts import HelmSpec, chart_pin

    pin = chart_pin("nvidia-dra-driver-gpu")
    return HelmSpec(
        name="nvidia-dra-driver-gpu",
        chart=pin["chart"],
        version=str(pin["version"]),
        repo=pin["repo"],
        namespace="nvidia-dra-driver-gpu",
        values=dra_driver_values(),
    )


COMPUTE_DOMAIN_CLAIM = "compute-domain-channel"


# The ComputeDomain's spec is immutable (its CRD: ``x-kubernetes-validations: self == oldSelf``, "A computeDomain.spec is
# immutable"), so nothing in it may follow the stack's replicas or node count: ``numNodes: 0``, which the CRD recommends
# with the default ``featureGates.IMEXDaemonsWithDNSNames=true`` ("recommended to be set to zero (default)"; IMEX daemons
# start as their nodes join, without waiting for a count) and the EKS UltraServer guide uses
# (kubernetes-sigs/dra-driver-nvidia-gpu deployments/helm/dra-driver-nvidia-gpu/crds/resource.nvidia.com_computedomains.yaml).
COMPUTE_DOMAIN_NUM_NODES = 0


def compute_domain(name: str, namespace: str) -> dict:
    """A ComputeDomain (NVIDIA DRA driver): an IMEX domain over the nodes the workers run on, with a
    ResourceClaimTemplate each worker claims (resource.nvidia.com/v1beta1). Its spec never changes with the DGD."""
    return {
        "apiVersion": "resource.nvidia.com/v1beta1",
        "kind": "ComputeDomain",
        "metadata": {"name": name, "namespace": namespace},
        "spec": {"numNodes": COMPUTE_DOMAIN_NUM_NODES, "channel": {"resourceClaimTemplate": {"name": f"{name}-channel"}}},
    }


def apply_compute_domain(dgd: dict, cd: dict) -> None:
    """Give every GPU worker of the DGD a claim on the ComputeDomain's channel (in place)."""
    template = cd["spec"]["channel"]["resourceClaimTemplate"]["name"]
    for comp in dgd["spec"]["components"]:
        pod = comp["podTemplate"]["spec"]
        if not pod_requests(pod).get("nvidia.com/gpu"):
            continue
        claims = pod.setdefault("resourceClaims", [])
        if not any(c.get("name") == COMPUTE_DOMAIN_CLAIM for c in claims):
            claims.append({"name": COMPUTE_DOMAIN_CLAIM, "resourceClaimTemplateName": template})
        main = next((c for c in pod["containers"] if c.get("name") == "main"), pod["containers"][0])
        rc = main.setdefault("resources", {}).setdefault("claims", [])
        if not any(c.get("name") == COMPUTE_DOMAIN_CLAIM for c in rc):
            rc.append({"name": COMPUTE_DOMAIN_CLAIM})
