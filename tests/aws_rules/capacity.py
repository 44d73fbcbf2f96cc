"""Capacity Blocks, cluster placement groups, GB200 UltraServers, Local Zones and Availability Zones
(``AREA_CAPACITY_BLOCKS``, ``AREA_PLACEMENT_GROUPS``, ``AREA_ULTRASERVERS_AND_ZONES``): how a GPU node group gets its
instances and where they run."""

from __future__ import annotations

from stacks.registry.gpus import INSTANCES

from . import (
    AREA_CAPACITY_BLOCKS,
    AREA_PLACEMENT_GROUPS,
    AREA_ULTRASERVERS_AND_ZONES,
    AZ,
    EFS,
    EKS,
    LAUNCH_TEMPLATE,
    NODEGROUP,
    PLACEMENT_GROUP,
    SUBNET,
    Graph,
    _efa_devices,
    _get,
    _gpu_nodegroups,
    _instance_type,
    _launch_template,
    rule,
)


# --------------------------------------------------------------------------- Capacity Blocks


@rule(AREA_CAPACITY_BLOCKS)
def capacity_block_launch_template(g: Graph) -> list[str]:
    """A managed node group on a Capacity Block uses a launch template that carries ``InstanceType``,
    ``InstanceMarketOptions.MarketType = capacity-block`` and ``CapacityReservationSpecification`` targeting the
    block; the node group's capacity type is ``CAPACITY_BLOCK`` and it names no ``instanceTypes``.
    Source: EKS user guide, "Create a managed node group with Capacity Blocks for ML" (capacity-blocks-mng);
    the same launch template contract in AWS PCS "Configure a compute node group to use a Capacity Block"."""
    out = []
    for ng in g.of(NODEGROUP):
        lt = _launch_template(g, ng)
        cb_ng = ng.inputs.get("capacityType") == "CAPACITY_BLOCK"
        cb_lt = bool(lt) and _get(lt.inputs, "instanceMarketOptions", "marketType") == "capacity-block"
        if cb_lt and not cb_ng:
            out.append(
                f"{ng.name}: launch template {lt.name} is capacity-block but capacityType is {ng.inputs.get('capacityType')!r}"
            )
        if not cb_ng:
            continue
        if lt is None:
            out.append(f"{ng.name}: CAPACITY_BLOCK node group without a launch template")
            continue
        if not cb_lt:
            out.append(f"{ng.name}: launch template {lt.name} has no instanceMarketOptions.marketType capacity-block")
        if not lt.inputs.get("instanceType"):
            out.append(f"{ng.name}: launch template {lt.name} has no instanceType")
        if not _get(lt.inputs, "capacityReservationSpecification", "capacityReservationTarget", "capacityReservationId"):
            out.append(f"{ng.name}: launch template {lt.name} targets no capacity reservation")
        if ng.inputs.get("instanceTypes"):
            out.append(
                f"{ng.name}: CAPACITY_BLOCK node group names instanceTypes {ng.inputs['instanceTypes']} (must be on the launch template only)"
            )
    return out


@rule(AREA_CAPACITY_BLOCKS)
def instance_type_in_one_place(g: Graph) -> list[str]:
    """The instance type is set in the launch template or in the node group, not both.
    Source: EKS user guide, "Customize managed nodes with launch templates" (launch-templates: instance types)."""
    out = []
    for ng in g.of(NODEGROUP):
        lt = _launch_template(g, ng)
        if lt and lt.inputs.get("instanceType") and ng.inputs.get("instanceTypes"):
            out.append(f"{ng.name}: instance type both in launch template {lt.name} and in instanceTypes")
        if not _instance_type(g, ng):
            out.append(f"{ng.name}: no instance type in the node group or its launch template")
    return out


# --------------------------------------------------------------------------- placement groups


@rule(AREA_PLACEMENT_GROUPS)
def no_placement_group_with_reservation(g: Graph) -> list[str]:
    """No cluster placement group when a launch template targets a capacity reservation or block: instances
    of a Capacity Block are already placed together in an UltraCluster, and a targeted On-Demand Capacity
    Reservation launches only into the placement group it was created in.
    Source: EC2 API reference ``CapacityBlock``; EC2 user guide "Placement group rules and limitations" and
    "Capacity Reservations for cluster placement groups"."""
    out = []
    for lt in g.of(LAUNCH_TEMPLATE):
        if _get(lt.inputs, "capacityReservationSpecification", "capacityReservationTarget") and _get(
            lt.inputs, "placement", "groupName"
        ):
            out.append(
                f"{lt.name}: targets a capacity reservation and places instances in placement group {_get(lt.inputs, 'placement', 'groupName')}"
            )
    return out


@rule(AREA_PLACEMENT_GROUPS)
def on_demand_efa_in_cluster_placement_group(g: Graph) -> list[str]:
    """On-demand EFA nodes (no reservation) launch into a cluster placement group, for the lowest latency between
    them. Source: EC2 user guide "Get started with EFA" (launch into a cluster placement group); EKS user guide
    "Manage EFA devices on Amazon EKS" (placement groups)."""
    out = []
    for ng in _gpu_nodegroups(g):
        lt = _launch_template(g, ng)
        if _efa_devices(lt) and not _get(lt.inputs, "capacityReservationSpecification", "capacityReservationTarget"):
            group = _get(lt.inputs, "placement", "groupName")
            if not group or not any(
                pg.inputs.get("strategy") == "cluster" and pg.inputs.get("name", pg.name) == group for pg in g.of(PLACEMENT_GROUP)
            ):
                out.append(f"{ng.name}: on-demand EFA node group without a cluster placement group")
    return out


# --------------------------------------------------------------------------- GB200 UltraServers, zones


@rule(AREA_ULTRASERVERS_AND_ZONES)
def ultraserver_only_as_capacity_block(g: Graph) -> list[str]:
    """``p6e-gb200.36xlarge`` is sold only inside UltraServers (u-p6e-gb200x36: 9 instances, x72: 18), through
    Capacity Blocks; EKS supports it from Kubernetes 1.33 with the AL2023 ARM NVIDIA AMI.
    Source: EKS user guide "Use P6e-GB200 UltraServers with Amazon EKS" (ml-eks-nvidia-ultraserver)."""
    out = []
    for ng in g.of(NODEGROUP):
        it = _instance_type(g, ng)
        if it in INSTANCES and INSTANCES[it].ultraserver:
            if ng.inputs.get("capacityType") != "CAPACITY_BLOCK":
                out.append(f"{ng.name}: {it} with capacityType {ng.inputs.get('capacityType')!r}, not CAPACITY_BLOCK")
            if ng.inputs.get("amiType") != "AL2023_ARM_64_NVIDIA":
                out.append(f"{ng.name}: {it} with amiType {ng.inputs.get('amiType')!r}, not AL2023_ARM_64_NVIDIA")
            if int(_get(ng.inputs, "scalingConfig", "maxSize", default=0)) > 18:
                out.append(f"{ng.name}: {it} maxSize above 18 (the largest UltraServer)")
    return out


@rule(AREA_ULTRASERVERS_AND_ZONES)
def capacity_block_in_one_zone(g: Graph) -> list[str]:
    """Capacity Block instances launch only in subnets of the block's Availability Zone, so a CAPACITY_BLOCK node
    group's subnets are all in one zone. Source: EC2 user guide "Launch instances using Capacity Blocks"
    (capacity-blocks-launch); terraform-aws-eks-blueprints pattern ml-capacity-block."""
    out = []
    for ng in g.of(NODEGROUP):
        if ng.inputs.get("capacityType") != "CAPACITY_BLOCK":
            continue
        zones = {
            (_s.inputs.get("availabilityZone") if (_s := g.by_id(sid, SUBNET)) else None)
            for sid in ng.inputs.get("subnetIds") or []
        }
        if len(zones) != 1 or None in zones:
            out.append(f"{ng.name}: CAPACITY_BLOCK node group subnets span zones {sorted(map(str, zones))}")
    return out


@rule(AREA_ULTRASERVERS_AND_ZONES)
def eks_cluster_subnets_in_two_availability_zones(g: Graph) -> list[str]:
    """The EKS cluster's subnets are in at least two Availability Zones, and none is in a Local Zone (a Local Zone
    subnet serves node groups only). Source: EKS user guide "View Amazon EKS networking requirements for VPC and
    subnets" (network-reqs); "Launch low-latency EKS clusters with AWS Local Zones"."""
    out = []
    for c in g.of(EKS):
        zones = []
        for sid in _get(c.inputs, "vpcConfig", "subnetIds", default=[]) or []:
            sn = g.by_id(sid, SUBNET)
            zone = sn.inputs.get("availabilityZone") if sn else None
            if zone is None or not AZ.fullmatch(zone):
                out.append(f"{c.name}: subnet {sid} in {zone!r} is not an Availability Zone subnet")
            zones.append(zone)
        if len({z for z in zones if z}) < 2:
            out.append(f"{c.name}: subnets in {sorted({str(z) for z in zones})}: EKS needs two or more Availability Zones")
    return out


# --------------------------------------------------------------------------- Local Zone GPU groups and the model cache


@rule(AREA_ULTRASERVERS_AND_ZONES)
def local_zone_nodes_do_not_mount_efs(g: Graph) -> list[str]:
    """No EFS model cache when a GPU node group runs in a Local Zone: EFS mount targets exist in Availability Zones
    only, and the file system's DNS name resolves only in a zone with a mount target. Source: EFS user guide
    "Mounting on Amazon EC2 with a DNS name" (a mount target in the client's Availability Zone is required); EFS API
    ``CreateMountTarget`` (one mount target per Availability Zone); FSx for Lustre is the cache for Local Zone groups."""
    out = []
    if not g.of(EFS):
        return out
    for ng in _gpu_nodegroups(g):
        for sid in ng.inputs.get("subnetIds") or []:
            sn = g.by_id(sid, SUBNET)
            zone = sn.inputs.get("availabilityZone") if sn else None
            if zone and not AZ.fullmatch(zone):
                out.append(
                    f"{ng.name}: GPU nodes in Local Zone {zone} with an EFS model cache they cannot mount (use FSx for Lustre)"
                )
    return out
