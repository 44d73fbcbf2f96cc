"""The GPU instance types and node class the real Karpenter's KWOK cloud provider runs with in the simulated cluster.

Pure functions. ``kwok_instance_types`` writes the project's GPU instance data (``stacks.registry.gpus``: GPUs, EFA devices,
vCPUs, memory, pods, instance store, architecture) and its prices (the caller passes stacks/registry/prices.yaml's, as
``python -m stacks cost`` reads them: ``stacks.cli.karpenter_sim.region_prices``) in the format the KWOK provider
reads from ``--instance-types-file-path`` / ``INSTANCE_TYPES_FILE_PATH``, so nothing about an instance is written twice.
The provider puts an offering's price on the node it launches (label ``eks-node-viewer/instance-price``).
``kwok_node_pool`` points a NodePool of the EKS plan at the KWOK node class instead of its EC2NodeClass.

Format (sigs.k8s.io/karpenter v1.13.0, kwok/cloudprovider/helpers.go ``InstanceTypeOptions``: a JSON list of
``name``, ``offerings``, ``architecture``, ``operatingSystems``, ``resources`` (a core/v1 ResourceList); each offering
is a ``KWOKOffering``: the embedded ``cloudprovider.Offering`` fields ``Price``/``Available``/``ReservationCapacity``
and ``Requirements``, a list of NodeSelectorRequirements carrying ``karpenter.sh/capacity-type`` and
``topology.kubernetes.io/zone``, as in the provider's own embedded kwok/cloudprovider/instance_types.json). The
provider adds ``pods: 110`` when absent, marks every offering available, derives the
``karpenter.kwok.sh/instance-{size,family,cpu,memory}`` labels from the name and resources, and reserves 100m CPU and
10Mi memory per node (``newInstanceType``). Note: kwok/examples/instance_types.json in the same module uses
``capacityType``/``zone``/``price`` keys that this struct does not read; the embedded file's form is the one parsed.
"""

from __future__ import annotations

from typing import Iterable, Mapping, Optional

from stacks.registry.gpus import HOSTS, INSTANCES

CAPACITY_TYPE_LABEL = "karpenter.sh/capacity-type"  # sigs.k8s.io/karpenter pkg/apis/v1 CapacityTypeLabelKey
ZONE_LABEL = "topology.kubernetes.io/zone"
# The KWOK provider's node class (kwok/apis/crds/karpenter.kwok.sh_kwoknodeclasses.yaml; its status defaults to Ready).
KWOK_NODE_CLASS_GROUP = "karpenter.kwok.sh"
KWOK_NODE_CLASS_KIND = "KWOKNodeClass"
CAPACITY_TYPES = ("on-demand", "spot", "reserved")  # karpenter.sh/capacity-type values of Karpenter v1


def instance_resources(instance_type: str) -> dict[str, str]:
    """What an instance offers the scheduler, from stacks.registry.gpus (INSTANCES and HOSTS): CPU, memory, pods, instance
    store (when counted), ``nvidia.com/gpu`` and ``vpc.amazonaws.com/efa`` (one device per EFA network card)."""
    if instance_type not in INSTANCES:
        raise ValueError(
            f"instance type {instance_type!r} is not in the GPU catalog (stacks/registry/gpus.py INSTANCES); "
            f"known: {', '.join(sorted(INSTANCES))}"
        )
    if instance_type not in HOSTS:
        raise ValueError(
            f"instance type {instance_type!r} has no host resources in stacks/registry/gpus.py HOSTS; "
            f"known: {', '.join(sorted(HOSTS))}"
        )
    shape, host = INSTANCES[instance_type], HOSTS[instance_type]
    out = {
        "cpu": str(host.vcpus),
        "memory": f"{host.memory_gib}Gi",
        "pods": str(host.max_pods),
        "nvidia.com/gpu": str(shape.gpus_per_node),
    }
    if host.local_nvme_gb:
        out["ephemeral-storage"] = f"{host.local_nvme_gb * 10**9 // 2**30}Gi"
    if shape.efa_interfaces:
        out["vpc.amazonaws.com/efa"] = str(shape.efa_interfaces)
    return out


def kwok_instance_types(
    zones: Iterable[str],
    instance_types: Optional[Iterable[str]] = None,
    capacity_types: Iterable[str] = ("on-demand",),
    prices: Optional[Mapping[str, float]] = None,
) -> list[dict]:
    """The KWOK provider's instance-types file (a JSON-serialisable list) for the GPU instances of stacks.registry.gpus (all of
    them unless ``instance_types`` names some), offered in ``zones`` for each capacity type. ``prices``: $/h per
    instance type (missing ones are offered at 0, which only matters when a NodePool allows several types)."""
    zones = list(zones)
    if not zones or any(not isinstance(z, str) or not z for z in zones):
        raise ValueError(f"zones: expected one or more availability zone names, got {zones!r}")
    caps = list(capacity_types)
    bad = [c for c in caps if c not in CAPACITY_TYPES]
    if not caps or bad:
        raise ValueError(f"capacity_types: {bad or caps!r} invalid; choose from {', '.join(CAPACITY_TYPES)}")
    names = sorted(INSTANCES) if instance_types is None else list(instance_types)
    prices = prices or {}
    out = []
    for name in names:
        resources = instance_resources(name)
        offerings = [
            {
                "Price": float(prices.get(name, 0.0)),
                "Available": True,
                "Requirements": [
                    {"key": CAPACITY_TYPE_LABEL, "operator": "In", "values": [cap]},
                    {"key": ZONE_LABEL, "operator": "In", "values": [zone]},
                ],
            }
            for cap in caps
            for zone in zones
        ]
        out.append(
            {
                "name": name,
                "offerings": offerings,
                "architecture": INSTANCES[name].kubernetes_arch,
                "operatingSystems": ["linux"],
                "resources": resources,
            }
        )
    return out


def kwok_node_class(name: str, registration_delay: str = "0s") -> dict:
    """A KWOKNodeClass: its ``nodeRegistrationDelay`` models the time an instance takes to boot and join."""
    return {
        "apiVersion": f"{KWOK_NODE_CLASS_GROUP}/v1alpha1",
        "kind": KWOK_NODE_CLASS_KIND,
        "metadata": {"name": name},
        "spec": {"nodeRegistrationDelay": registration_delay},
    }


def kwok_node_pool(node_pool: Mapping, node_class: str, consolidate_after: Optional[str] = None) -> dict:
    """The NodePool with its node class reference pointed at a KWOKNodeClass (everything else as planned);
    ``consolidate_after`` replaces ``spec.disruption.consolidateAfter`` when given."""
    import copy

    if node_pool.get("kind") != "NodePool":
        raise ValueError(f"expected a karpenter.sh NodePool, got kind {node_pool.get('kind')!r}")
    out = copy.deepcopy(dict(node_pool))
    tmpl = out.setdefault("spec", {}).setdefault("template", {}).setdefault("spec", {})
    tmpl["nodeClassRef"] = {"group": KWOK_NODE_CLASS_GROUP, "kind": KWOK_NODE_CLASS_KIND, "name": node_class}
    if consolidate_after is not None:
        out["spec"].setdefault("disruption", {})["consolidateAfter"] = consolidate_after
    return out
