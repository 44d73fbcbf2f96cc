"""``python -m stacks preflight``: can this AWS account place the stack's GPU nodes?

Read-only boto3 checks before ``pulumi up`` spends an hour waiting on capacity:

1. ``offering``    the instance type is offered in the chosen availability zone;
2. ``efa``         the instance supports EFA with as many interfaces as the catalog attaches;
3. ``reservation`` the capacity reservation is active (a scheduled Capacity Block only warns), of that type,
                   in that zone, big enough and not ending;
4. ``quota``       the On-Demand vCPU quota of the instance's family has room for the nodes of every on-demand
                   GPU pool of that family: "Running On-Demand P instances" (L-417A185B) for P instances,
                   "Running On-Demand G and VT instances" (L-DB2E81BA) for G instances;
5. ``capacity``    on-demand P instances without a reservation can fail with InsufficientInstanceCapacity: a
                   warning that points to Capacity Blocks and reservations;
6. ``local-zone``  a GPU pool in a Local Zone needs the account opted in to the zone's group
                   (DescribeAvailabilityZones OptInStatus; the fix is ``aws ec2 modify-availability-zone-group``).

Every GPU pool of the stack is checked (``dynamo:cluster.gpuPools``, or the one GPU node group), each under the
config key its settings live at. The zone is the one the program uses (``gpuAvailabilityZone``, else the first
zone) even when it is not pinned. Render and kubeconfig stacks create no AWS resources: preflight skips them.
Without AWS credentials it prints one line and exits non-zero.

Every failure names the ``dynamo:`` config key to change and a value to put there.
``run_checks`` is pure apart from the injected boto3 clients, so tests run it under moto.
"""

from __future__ import annotations

import re

from dataclasses import dataclass
from pathlib import Path
from typing import Any, Optional

from stacks.config.keys import NS
from stacks.registry.gpus import INSTANCES

CLUSTER = f"{NS}:cluster"
KEY_REGION = f"{CLUSTER}.region"
KEY_AZ = f"{CLUSTER}.gpuAvailabilityZone"
KEY_INSTANCE = f"{CLUSTER}.instanceType"
KEY_RESERVATION = f"{CLUSTER}.capacityReservationId"
KEY_MARKET = f"{CLUSTER}.marketType"
KEY_EFA = f"{CLUSTER}.efa"
KEY_NODES = f"{CLUSTER}.gpuNodes"

P_INSTANCE_QUOTA = "L-417A185B"  # Running On-Demand P instances (vCPUs)
G_INSTANCE_QUOTA = "L-DB2E81BA"  # Running On-Demand G and VT instances (vCPUs)
# EC2 On-Demand vCPU quotas by instance family (Service Quotas, service code ec2): L-417A185B "Running On-Demand P
# instances", L-DB2E81BA "Running On-Demand G and VT instances" (QuotaName as `aws service-quotas get-service-quota
# --service-code ec2 --quota-code ...` returns it, e.g. in public account read-outs collected with the search tool;
# Service Quotas docs: the EC2 On-Demand quotas count vCPUs, cf. L-1216C47A "Running On-Demand Standard ... instances"
# in the AWS CLI's get-aws-default-service-quota example).
FAMILY_QUOTAS = {
    "p": (P_INSTANCE_QUOTA, "Running On-Demand P instances"),
    "g": (G_INSTANCE_QUOTA, "Running On-Demand G and VT instances"),
    "vt": (G_INSTANCE_QUOTA, "Running On-Demand G and VT instances"),
}
_AZ = re.compile(r"[a-z]{2}(?:-gov)?-[a-z]+-\d[a-z]")


def family_quota(instance_type: str) -> Optional[tuple[str, str]]:
    """(quota code, quota name) of the instance type's On-Demand family, or None (not a P/G/VT instance)."""
    m = re.match(r"([a-z]+)\d", instance_type)
    return FAMILY_QUOTAS.get(m[1]) if m else None


CAPACITY_BLOCK = "capacity-block"

PASS, FAIL, WARN, SKIP = "PASS", "FAIL", "WARN", "SKIP"


@dataclass(frozen=True)
class PreflightRequest:
    region: str
    availability_zone: Optional[str]
    instance_type: str
    nodes: int
    efa: bool
    capacity_reservation_id: Optional[str] = None
    market_type: str = "on-demand"  # on-demand | capacity-block
    zone_pinned: bool = True  # False: availability_zone is the program's default (the first zone), not gpuAvailabilityZone
    key: str = CLUSTER  # where this GPU group's settings live: dynamo:cluster, or dynamo:cluster.gpuPools[i]

    def k(self, name: str) -> str:
        """The config key of a GPU group setting (``gpuNodes`` is ``nodes`` and ``gpuAvailabilityZone`` is
        ``availabilityZone`` inside ``gpuPools[i]``)."""
        if self.key.endswith("]"):
            name = {"gpuNodes": "nodes", "gpuAvailabilityZone": "availabilityZone"}.get(name, name)
        return f"{self.key}.{name}"


@dataclass(frozen=True)
class CheckResult:
    name: str
    status: str  # PASS | FAIL | WARN | SKIP
    message: str

    @property
    def ok(self) -> bool:
        return self.status != FAIL

    def line(self) -> str:
        return f"{self.status:<4}  {self.name:<11}  {self.message}"


# --------------------------------------------------------------------------- request from a stack


def _config_error(msg: str):
    from stacks.config.keys import ConfigError

    return ConfigError(msg)


def _pool_request(cc, key: str, pool) -> PreflightRequest:
    return PreflightRequest(
        region=cc.region,
        availability_zone=pool.nodegroup["availability_zone"],
        instance_type=pool.shape.instance_type,
        nodes=int(pool.nodegroup["scaling_config"]["desired_size"]),
        efa=pool.efa,
        capacity_reservation_id=cc.capacity_reservation_id,
        market_type=cc.market_type,
        zone_pinned=cc.gpu_availability_zone is not None,
        key=key,
    )


def requests_from_stack(name: str, root: Optional[Path] = None) -> list[PreflightRequest]:
    """One preflight request per GPU node group a committed ``Pulumi.<name>.yaml`` creates ([]: not an EKS stack,
    nothing to check), each under the config key its settings live at. Built from the same plan the program builds:
    final DGD (replicas included), zone, region with ``aws:region``; every ``gpuPools`` entry, not only the first."""
    from stacks.program import render
    from stacks.registry import yaml_text
    from stacks.config.keys import parse

    root = root or render.REPO_ROOT
    raw = render.stack_raw_config(name, root)
    top = (yaml_text.load(render.stack_file(name, root).read_text()) or {}).get("config") or {}
    cluster: dict[str, Any] = raw.get("cluster") or {}
    if not isinstance(cluster, dict):
        raise _config_error(f"{CLUSTER}: must be a mapping, got {cluster!r}")
    if cluster.get("mode", "render") != "eks":
        return []

    from stacks.cluster import GPU_TAINT_KEY, apply_aws_region, build_gpu_pool, plan_eks, pool_name
    from stacks.config import cluster_config
    from stacks.config.stack import EksCluster
    from stacks.modes import cluster_as

    raw = apply_aws_region(raw, top.get("aws:region"))
    if "serve" in raw:  # a dynamo:serve or cluster-only stack: every GPU node group of its plan
        program = render.program_for_stack(name, root)
        out = []
        for pool in program.cluster_plan.gpu_pools:
            cc, key = program.cluster.pool_for(pool.gpu)
            out.append(_pool_request(cc, key, pool))
        return out
    cc, plan, _ = plan_eks(
        name,
        parse(raw),
        cluster_as(cluster_config(raw), EksCluster),
        raw,
        frozenset(),
        aws_region=top.get("aws:region"),
        require_secrets=False,
    )
    first = plan.gpu_pools[0]
    pcc, key = cc.pool_for(first.gpu)
    out = [_pool_request(pcc, key, first)]
    # The target's GPU has one pool; the other gpuPools entries are node groups of their own (sized by their nodes).
    for p in cc.gpu_pools:
        if p.gpu == first.gpu:
            continue
        pcc, key = cc.pool_for(p.gpu)
        pool = build_gpu_pool(
            pcc,
            p.gpu,
            None,
            f"pool {p.gpu}",
            {"key": GPU_TAINT_KEY, "value": "true", "effect": "NO_SCHEDULE"},
            key,
            pool_name(p.gpu, False),
        )
        out.append(_pool_request(pcc, key, pool))
    return out


def request_from_stack(name: str, root: Optional[Path] = None) -> Optional[PreflightRequest]:
    """The first GPU node group's request (None: not an EKS stack); ``requests_from_stack`` has them all."""
    reqs = requests_from_stack(name, root)
    return reqs[0] if reqs else None


# --------------------------------------------------------------------------- checks


def _err(e: Exception) -> str:
    code = getattr(e, "response", {}).get("Error", {}).get("Code") if hasattr(e, "response") else None
    return f"{code}: {e}" if code else f"{type(e).__name__}: {e}"


def _api_errors() -> tuple[type[Exception], ...]:
    from botocore.exceptions import BotoCoreError, ClientError

    return (ClientError, BotoCoreError)


def _same_gpu_types(instance_type: str, pred=lambda s: True) -> list[str]:
    shape = INSTANCES.get(instance_type)
    return sorted(k for k, s in INSTANCES.items() if (shape is None or s.gpu == shape.gpu) and k != instance_type and pred(s))


def check_offering(req: PreflightRequest, ec2) -> CheckResult:
    name = "offering"
    try:
        pages = ec2.get_paginator("describe_instance_type_offerings").paginate(
            LocationType="availability-zone", Filters=[{"Name": "instance-type", "Values": [req.instance_type]}]
        )
        zones = sorted({o["Location"] for p in pages for o in p["InstanceTypeOfferings"]})
    except _api_errors() as e:
        return CheckResult(name, FAIL, f"describe_instance_type_offerings in {req.region} failed ({_err(e)})")
    if not zones:
        alts = ", ".join(_same_gpu_types(req.instance_type)) or "another region"
        return CheckResult(
            name,
            FAIL,
            f"{req.instance_type} is not offered in any zone of {req.region}; set {KEY_REGION} to a region that offers it, "
            f"or {req.k('instanceType')} to one of: {alts}",
        )
    if not req.availability_zone:
        return CheckResult(
            name,
            WARN,
            f"{req.instance_type} is offered in {req.region} zones {', '.join(zones)}, but {req.k('gpuAvailabilityZone')} is not set; "
            f"pin it, e.g. {req.k('gpuAvailabilityZone')}: {zones[0]}",
        )
    if req.availability_zone in zones:
        how = (
            ""
            if req.zone_pinned
            else f" (the first zone, used because {req.k('gpuAvailabilityZone')} is not set; pin it to keep it)"
        )
        return CheckResult(name, PASS, f"{req.instance_type} is offered in {req.availability_zone}{how}")
    where = "" if req.availability_zone.startswith(req.region) else f" (that zone is not in region {req.region})"
    return CheckResult(
        name,
        FAIL,
        f"{req.instance_type} is not offered in {req.availability_zone}{where}; set {req.k('gpuAvailabilityZone')} to one of: {', '.join(zones)}",
    )


def _describe_type(ec2, instance_type: str) -> dict:
    return ec2.describe_instance_types(InstanceTypes=[instance_type])["InstanceTypes"][0]


def check_efa(req: PreflightRequest, info: Optional[dict], info_error: Optional[str]) -> CheckResult:
    name = "efa"
    if not req.efa:
        return CheckResult(name, SKIP, f"EFA is off ({req.k('efa')}: false and the target's fabric is not aws-efa)")
    if info is None:
        if info_error and ("InvalidInstanceType" in info_error or "IndexError" in info_error):
            return CheckResult(
                name, FAIL, f"describe_instance_types {req.instance_type} failed ({info_error}); check {req.k('instanceType')}"
            )
        return CheckResult(name, FAIL, f"describe_instance_types {req.instance_type} failed ({info_error})")
    net = info.get("NetworkInfo") or {}
    if not net.get("EfaSupported"):
        alts = _same_gpu_types(req.instance_type, lambda s: s.efa_interfaces > 0)
        hint = (
            f"set {req.k('instanceType')} to one of: {', '.join(alts)}"
            if alts
            else f"choose an EFA instance type for {req.k('instanceType')}"
        )
        return CheckResult(
            name,
            FAIL,
            f"{req.instance_type} does not support EFA; {hint}, or set {req.k('efa')}: false with a target whose fabric is not aws-efa",
        )
    max_efa = int((net.get("EfaInfo") or {}).get("MaximumEfaInterfaces", 0))
    cards = len(net.get("NetworkCards") or []) or int(net.get("MaximumNetworkCards", 0))
    shape = INSTANCES.get(req.instance_type)
    if shape is None:
        return CheckResult(
            name,
            WARN,
            f"{req.instance_type} supports {max_efa} EFA interfaces on {cards} network cards, but is not in stacks/registry/gpus.py; "
            f"set {req.k('instanceType')} to one of: {', '.join(sorted(INSTANCES))}",
        )
    problems = []
    if max_efa < shape.efa_interfaces:
        problems.append(f"allows {max_efa} EFA interfaces but the launch template attaches {shape.efa_interfaces}")
    if cards < shape.network_cards:
        problems.append(f"has {cards} network cards but the catalog expects {shape.network_cards}")
    if problems:
        alts = _same_gpu_types(req.instance_type)
        hint = (
            f"set {req.k('instanceType')} to one of: {', '.join(alts)}, "
            if alts
            else f"set {NS}:gpu to another GPU (no other {shape.gpu} type in stacks/registry/gpus.py), "
        )
        return CheckResult(
            name,
            FAIL,
            f"{req.instance_type} "
            + " and ".join(problems)
            + f"; {hint}or correct {req.instance_type} efa_interfaces/network_cards in stacks/registry/gpus.py",
        )
    if not shape.verified:
        return CheckResult(
            name,
            WARN,
            f"{req.instance_type} supports EFA: {max_efa} interfaces, {cards} network cards; the catalog attaches "
            f"{shape.efa_interfaces} EFA on network cards {list(shape.efa_cards)}, a layout not confirmed by AWS documentation: "
            f"compare with `aws ec2 describe-instance-types --instance-types {req.instance_type} --query 'InstanceTypes[0].NetworkInfo'`",
        )
    return CheckResult(
        name,
        PASS,
        f"{req.instance_type} supports EFA: {max_efa} interfaces, {cards} network cards (catalog attaches {shape.efa_interfaces})",
    )


def check_reservation(req: PreflightRequest, ec2) -> tuple[CheckResult, Optional[dict]]:
    name = "reservation"
    rid = req.capacity_reservation_id
    if not rid:
        return CheckResult(name, SKIP, f"no {req.k('capacityReservationId')} set"), None
    try:
        found = ec2.describe_capacity_reservations(CapacityReservationIds=[rid])["CapacityReservations"]
    except _api_errors() as e:
        return CheckResult(
            name,
            FAIL,
            f"{rid} not found in {req.region} ({_err(e)}); set {req.k('capacityReservationId')} to a reservation id of that region (cr-...) or remove it",
        ), None
    if not found:
        return CheckResult(
            name,
            FAIL,
            f"{rid} not found in {req.region}; set {req.k('capacityReservationId')} to a reservation id of that region (cr-...) or remove it",
        ), None
    cr = found[0]
    problems, warnings = [], []
    state = cr.get("State")
    block = cr.get("ReservationType") == CAPACITY_BLOCK or req.market_type == CAPACITY_BLOCK
    if state in ("scheduled", "payment-pending", "pending") and block:
        # A Capacity Block bought for later: the node group is created now and its nodes launch when the block starts.
        warnings.append(
            f"Capacity Block is {state}, starts {cr.get('StartDate')}: GPU nodes launch then, "
            "and `pulumi up` waits for them (set wait.dgdTimeout past the start, or run up after it)"
        )
    elif state != "active":
        when = (
            f", starts {cr['StartDate']}" if cr.get("StartDate") and state in ("scheduled", "payment-pending", "pending") else ""
        )
        problems.append(
            f"state is {state}{when}, not active (wait for it, or set {req.k('capacityReservationId')} to an active reservation)"
        )
    end = cr.get("EndDate")
    if end is not None:
        import datetime as _dt

        now = _dt.datetime.now(_dt.timezone.utc)
        end_utc = end if end.tzinfo else end.replace(tzinfo=_dt.timezone.utc)
        if end_utc <= now:
            problems.append(
                f"it ended {end_utc:%Y-%m-%d %H:%M} UTC; set {req.k('capacityReservationId')} to a current reservation"
            )
        elif end_utc - now < _dt.timedelta(hours=2):
            warnings.append(
                f"it ends {end_utc:%Y-%m-%d %H:%M} UTC, in under 2 h (EKS drains Capacity Block nodes before the end)"
            )
    if cr.get("InstanceType") != req.instance_type:
        problems.append(
            f"it reserves {cr.get('InstanceType')}, not {req.instance_type}; set {req.k('instanceType')}: {cr.get('InstanceType')}"
        )
    if cr.get("AvailabilityZone") != req.availability_zone:
        unpinned = "" if req.zone_pinned else f" (the default first zone, {req.k('gpuAvailabilityZone')} is not set)"
        problems.append(
            f"it is in {cr.get('AvailabilityZone')}, not {req.availability_zone}{unpinned}; pin {req.k('gpuAvailabilityZone')}: {cr.get('AvailabilityZone')}"
        )
    # A scheduled block has no available instances yet: its size is TotalInstanceCount.
    avail = int(cr.get("TotalInstanceCount" if warnings and state != "active" else "AvailableInstanceCount", 0))
    if avail < req.nodes:
        missing = req.nodes - avail
        problems.append(
            f"it has {avail} of {req.nodes} needed instances available ({missing} missing); set {req.k('gpuNodes')}: {avail} "
            f"or grow the reservation by {missing}"
        )
    if problems:
        return CheckResult(name, FAIL, f"{rid}: " + "; ".join(problems + warnings)), cr
    kind = cr.get("ReservationType") or "default"
    if warnings:
        return CheckResult(name, WARN, f"{rid} ({kind}): " + "; ".join(warnings)), cr
    return CheckResult(
        name,
        PASS,
        f"{rid} ({kind}) is active: {avail} x {req.instance_type} available in {req.availability_zone}, {req.nodes} needed",
    ), cr


def _running_family_vcpus(ec2, family: str = "p") -> int:
    """vCPUs of pending/running instances of one family (``p``, or ``g`` with ``vt``: they share a quota). Filtered
    here, not with an instance-type filter, and vCPUs fall back to the type's default when CpuOptions is absent (moto
    supports neither)."""
    families = ("g", "vt") if family in ("g", "vt") else (family,)
    used, defaults = 0, {}
    pages = ec2.get_paginator("describe_instances").paginate(
        Filters=[{"Name": "instance-state-name", "Values": ["pending", "running"]}]
    )
    for page in pages:
        for r in page["Reservations"]:
            for i in r["Instances"]:
                it = i.get("InstanceType", "")
                m = re.match(r"([a-z]+)\d", it)
                if not m or m[1] not in families:
                    continue
                cpu = i.get("CpuOptions") or {}
                if cpu.get("CoreCount"):
                    used += int(cpu["CoreCount"]) * int(cpu.get("ThreadsPerCore", 1))
                else:
                    if it not in defaults:
                        defaults[it] = int(_describe_type(ec2, it)["VCpuInfo"]["DefaultVCpus"])
                    used += defaults[it]
    return used


def _running_p_vcpus(ec2) -> int:
    return _running_family_vcpus(ec2, "p")


def check_quota(
    req: PreflightRequest, ec2, quotas, info: Optional[dict], reservation: Optional[dict], others: int = 0
) -> CheckResult:
    """The On-Demand vCPU quota of the instance's family. ``others``: vCPUs of the same quota that the stack's other
    on-demand GPU pools, checked before this one, need (the pools draw on one quota)."""
    name = "quota"
    fq = family_quota(req.instance_type)
    if req.market_type == CAPACITY_BLOCK or (reservation or {}).get("ReservationType") == CAPACITY_BLOCK:
        return CheckResult(
            name,
            WARN,
            f"skipped: capacity blocks do not draw on the On-Demand instance quotas ({req.k('marketType')}: {CAPACITY_BLOCK})",
        )
    if fq is None:
        return CheckResult(
            name, SKIP, f"{req.instance_type} is not a P or G instance; quotas {P_INSTANCE_QUOTA}/{G_INSTANCE_QUOTA} do not apply"
        )
    code, qname = fq
    if info is None:
        return CheckResult(name, WARN, f"skipped: vCPUs of {req.instance_type} unknown (describe_instance_types failed)")
    if quotas is None:
        return CheckResult(name, WARN, "skipped: no service-quotas client")
    try:
        value = float(quotas.get_service_quota(ServiceCode="ec2", QuotaCode=code)["Quota"]["Value"])
    except _api_errors() as e:
        return CheckResult(name, WARN, f"skipped: service-quotas unavailable ({_err(e)})")
    vcpus = int(info["VCpuInfo"]["DefaultVCpus"])
    needed = req.nodes * vcpus
    family = "G and VT" if code == G_INSTANCE_QUOTA else "P"
    try:
        used = _running_family_vcpus(ec2, "g" if code == G_INSTANCE_QUOTA else "p")
        used_note = f", {used} in use by running {family} instances"
    except _api_errors():
        used, used_note = 0, f" (running {family} instances not counted: describe_instances failed)"
    if others:
        used_note += f", {others} for this stack's other GPU pools"
    headroom = int(value) - used - others
    if needed > headroom:
        fit = max(0, headroom // vcpus)
        return CheckResult(
            name,
            FAIL,
            f"quota {code} ({qname}) is {int(value)} vCPUs{used_note}; "
            f"{req.nodes} x {req.instance_type} need {needed}. Set {req.k('gpuNodes')}: {fit}, or {req.k('marketType')}: {CAPACITY_BLOCK}, or request "
            f"{used + others + needed}: aws service-quotas request-service-quota-increase --region {req.region} --service-code ec2 "
            f"--quota-code {code} --desired-value {used + others + needed}",
        )
    return CheckResult(
        name, PASS, f"quota {code} ({qname}) is {int(value)} vCPUs{used_note}; {req.nodes} x {req.instance_type} need {needed}"
    )


def check_local_zone(req: PreflightRequest, ec2) -> CheckResult:
    """A GPU pool in a Local Zone launches only after the account opts in to the zone's group (EC2 API
    ``DescribeAvailabilityZones`` with AllAvailabilityZones: ``OptInStatus`` opted-in | not-opted-in |
    opt-in-not-required, ``GroupName``; ``ModifyAvailabilityZoneGroup``, ``aws ec2 modify-availability-zone-group
    --group-name G --opt-in-status opted-in``, opts in). GB200 UltraServers are offered in the Dallas Local Zone of
    us-east-1 (shared/reference/aws/FACTS.md: EKS "ml-eks-nvidia-ultraserver", EC2 "capacity-blocks-launch")."""
    name = "local-zone"
    zone = req.availability_zone
    if not zone or _AZ.fullmatch(zone):
        return CheckResult(name, SKIP, f"{zone or 'no zone'} is an Availability Zone")
    try:
        zs = ec2.describe_availability_zones(AllAvailabilityZones=True, ZoneNames=[zone])["AvailabilityZones"]
    except _api_errors() as e:
        return CheckResult(
            name, FAIL, f"describe_availability_zones {zone} failed ({_err(e)}); check {req.k('gpuAvailabilityZone')}"
        )
    if not zs:
        return CheckResult(
            name,
            FAIL,
            f"{zone} is not a zone of {req.region}; set {req.k('gpuAvailabilityZone')} to a Local Zone of that region "
            f"(`aws ec2 describe-availability-zones --region {req.region} --all-availability-zones "
            f"--filters Name=zone-type,Values=local-zone`)",
        )
    z = zs[0]
    status, group = z.get("OptInStatus"), z.get("GroupName") or zone[:-1]
    if status in ("opted-in", "opt-in-not-required"):
        return CheckResult(name, PASS, f"{zone} ({group}) is {status}")
    return CheckResult(
        name,
        FAIL,
        f"{zone} is {status or 'not opted in'}: the account is not opted in to Local Zone group {group}, so no "
        f"instance launches there; run `aws ec2 modify-availability-zone-group --region {req.region} --group-name {group} "
        f"--opt-in-status opted-in`, or set {req.k('gpuAvailabilityZone')} to an Availability Zone",
    )


def check_capacity(req: PreflightRequest) -> CheckResult:
    """On-demand P instances are often not there when asked for (InsufficientInstanceCapacity; a managed node group
    then ends CREATE_FAILED). Source: aws/containers-roadmap #2204; EC2 "Capacity Blocks for ML"."""
    name = "capacity"
    if req.capacity_reservation_id or req.market_type == CAPACITY_BLOCK:
        return CheckResult(name, PASS, f"nodes launch into reservation {req.capacity_reservation_id}")
    if not req.instance_type.startswith("p"):
        return CheckResult(name, SKIP, f"{req.instance_type} is not a P instance")
    return CheckResult(
        name,
        WARN,
        f"on-demand {req.instance_type} can fail with InsufficientInstanceCapacity (the GPU node group then ends CREATE_FAILED); "
        f"for a reliable launch buy a Capacity Block ({req.k('marketType')}: {CAPACITY_BLOCK} + {req.k('capacityReservationId')}) or use an "
        f"On-Demand Capacity Reservation ({req.k('capacityReservationId')})",
    )


def _credentials_problem(e: Exception) -> Optional[str]:
    """One line when the error is about credentials rather than the stack's settings."""
    from botocore.exceptions import ClientError, NoCredentialsError, PartialCredentialsError, TokenRetrievalError

    if isinstance(e, (NoCredentialsError, PartialCredentialsError, TokenRetrievalError)):
        return "no AWS credentials: set AWS_PROFILE (or AWS_ACCESS_KEY_ID/AWS_SECRET_ACCESS_KEY), or run `aws sso login`; nothing was checked"
    if isinstance(e, ClientError) and e.response.get("Error", {}).get("Code") in (
        "AuthFailure",
        "UnrecognizedClientException",
        "InvalidClientTokenId",
        "ExpiredToken",
        "ExpiredTokenException",
        "RequestExpired",
    ):
        return f"AWS rejected the credentials ({e.response['Error']['Code']}): refresh them (`aws sso login`) and run preflight again; nothing was checked"
    return None


class CredentialsError(RuntimeError):
    pass


def run_checks(
    req: PreflightRequest, ec2_client, quotas_client, others: int = 0, needs: Optional[dict] = None
) -> list[CheckResult]:
    """All checks, in order; clients are injected (moto, Stubber or real boto3). Raises ``CredentialsError``
    (one line) when the first call shows there are no usable credentials."""
    try:
        ec2_client.describe_availability_zones()
    except Exception as e:  # noqa: BLE001 - only credentials problems stop here; the checks report the rest
        line = _credentials_problem(e)
        if line:
            raise CredentialsError(line) from None
    results = [check_offering(req, ec2_client)]
    info, info_error = None, None
    describe_errors: tuple[type[Exception], ...] = (*_api_errors(), IndexError)
    try:
        info = _describe_type(ec2_client, req.instance_type)
    except describe_errors as e:
        info_error = _err(e)
    results.append(check_efa(req, info, info_error))
    res_result, reservation = check_reservation(req, ec2_client)
    results.append(res_result)
    quota = check_quota(req, ec2_client, quotas_client, info, reservation, others)
    results.append(quota)
    results.append(check_capacity(req))
    results.append(check_local_zone(req, ec2_client))
    fq = family_quota(req.instance_type)
    if needs is not None and info is not None and fq and quota.status in (PASS, FAIL):  # an on-demand pool drawing on the quota
        needs[fq[0]] = needs.get(fq[0], 0) + req.nodes * int(info["VCpuInfo"]["DefaultVCpus"])
    return results


def run_stack_checks(reqs: list[PreflightRequest], ec2_client, quotas_client) -> list[tuple[PreflightRequest, list[CheckResult]]]:
    """``run_checks`` for every GPU pool of a stack; on-demand pools of one quota family count against it together."""
    needs: dict[str, int] = {}
    out = []
    for r in reqs:
        fq = family_quota(r.instance_type)
        out.append((r, run_checks(r, ec2_client, quotas_client, others=needs.get(fq[0], 0) if fq else 0, needs=needs)))
    return out


def format_results(req: PreflightRequest, results: list[CheckResult]) -> str:
    head = (
        f"preflight {req.key}: {req.instance_type} x {req.nodes} in {req.availability_zone or req.region} "
        f"(efa={'on' if req.efa else 'off'}, market={req.market_type}"
        + (f", reservation={req.capacity_reservation_id}" if req.capacity_reservation_id else "")
        + ")"
    )
    return "\n".join([head] + [r.line() for r in results])


# --------------------------------------------------------------------------- CLI


def cmd(args) -> int:
    import boto3

    reqs = requests_from_stack(args.stack)  # a bad stack is a ConfigError: one line, exit 2 (stacks.__main__)
    if not reqs:
        print(
            f"SKIP  preflight    stack {args.stack} creates no AWS resources (dynamo:cluster.mode is not eks); nothing to check"
        )
        return 0
    try:
        session = boto3.session.Session(region_name=reqs[0].region)
        if session.get_credentials() is None:
            raise CredentialsError(_credentials_problem(__import__("botocore.exceptions").exceptions.NoCredentialsError()))
        checked = run_stack_checks(reqs, session.client("ec2"), session.client("service-quotas"))
    except CredentialsError as e:
        print(f"FAIL  credentials  {e}")
        return 1
    print("\n".join(format_results(r, results) for r, results in checked))
    return 0 if all(x.ok for _, results in checked for x in results) else 1


def add_subparser(sub) -> None:
    p = sub.add_parser(
        "preflight",
        help="check that AWS can give an EKS stack its GPU nodes (read-only)",
        description="Check, with read-only AWS calls (boto3, your AWS credentials), every GPU pool of an "
        "EKS stack: instance offered in the zone, EFA, capacity reservation, P/G-instance "
        "quota, Local Zone opt-in. Exit 0 when all pass (WARN included), 1 on a FAIL.",
    )
    p.add_argument("--stack", required=True, metavar="NAME", help="a committed stack: Pulumi.NAME.yaml in the repository")
    p.set_defaults(fn=cmd)
