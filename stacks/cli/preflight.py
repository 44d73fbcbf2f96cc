"""``python -m stacks preflight``: can this AWS account place the stack's GPU nodes?

Read-only boto3 checks before ``pulumi up`` spends an hour waiting on capacity:

1. ``offering``    the instance type is offered in the chosen availability zone;
2. ``efa``         the instance supports EFA with as many interfaces as the catalog attaches;
3. ``reservation`` the capacity reservation is active (a scheduled Capacity Block only warns), of that type,
                   in that zone, big enough and not ending;
4. ``quota``       the "Running On-Demand P instances" vCPU quota has room for the nodes;
5. ``capacity``    on-demand P instances without a reservation can fail with InsufficientInstanceCapacity: a
                   warning that points to Capacity Blocks and reservations.

The zone is the one the program uses (``gpuAvailabilityZone``, else the first zone) even when it is not
pinned. Render and kubeconfig stacks create no AWS resources: preflight skips them. Without AWS
credentials it prints one line and exits non-zero.

Every failure names the ``dynamo:`` config key to change and a value to put there.
``run_checks`` is pure apart from the injected boto3 clients, so tests run it under moto.
"""
from __future__ import annotations

import re

from dataclasses import dataclass
from pathlib import Path
from typing import Any, Optional

from ..config import NS
from ..gpus import INSTANCES

CLUSTER = f"{NS}:cluster"
KEY_REGION = f"{CLUSTER}.region"
KEY_AZ = f"{CLUSTER}.gpuAvailabilityZone"
KEY_INSTANCE = f"{CLUSTER}.instanceType"
KEY_RESERVATION = f"{CLUSTER}.capacityReservationId"
KEY_MARKET = f"{CLUSTER}.marketType"
KEY_EFA = f"{CLUSTER}.efa"
KEY_NODES = f"{CLUSTER}.gpuNodes"

P_INSTANCE_QUOTA = "L-417A185B"  # Running On-Demand P instances (vCPUs)
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
    from ..config import ConfigError

    return ConfigError(msg)


def request_from_stack(name: str, root: Optional[Path] = None) -> Optional[PreflightRequest]:
    """The preflight request a committed ``Pulumi.<name>.yaml`` implies (None: not an EKS stack, nothing to check).
    Built from the same plan the program builds: final DGD (replicas included), zone, region with ``aws:region``."""
    import yaml

    from .. import render
    from ..config import parse

    root = root or render.REPO_ROOT
    raw = render.stack_raw_config(name, root)
    top = (yaml.safe_load(render.stack_file(name, root).read_text()) or {}).get("config") or {}
    cluster: dict[str, Any] = raw.get("cluster") or {}
    if not isinstance(cluster, dict):
        raise _config_error(f"{CLUSTER}: must be a mapping, got {cluster!r}")
    if cluster.get("mode", "render") != "eks":
        return None

    from ..cluster import apply_aws_region, plan_eks
    from ..providers import cluster_config

    raw = apply_aws_region(raw, top.get("aws:region"))
    if "serve" in raw:  # issue 11: a dynamo:serve or cluster-only stack: its first GPU node group only (not yet the others)
        program = render.program_for_stack(name, root)
        plan, pool = program.cluster_plan, program.cluster_plan.gpu_pools[0]
        cc = program.cluster.pool_for(pool.gpu)[0]
        return PreflightRequest(region=cc.region, availability_zone=pool.nodegroup["availability_zone"], instance_type=pool.shape.instance_type,
                                nodes=int(pool.nodegroup["scaling_config"]["desired_size"]), efa=pool.efa,
                                capacity_reservation_id=cc.capacity_reservation_id, market_type=cc.market_type,
                                zone_pinned=cc.gpu_availability_zone is not None)
    cc, plan, _ = plan_eks(name, parse(raw), cluster_config(raw), raw, frozenset(), aws_region=top.get("aws:region"), require_secrets=False)
    return PreflightRequest(
        region=cc.region,
        availability_zone=plan.gpu_nodegroup["availability_zone"],
        instance_type=plan.shape.instance_type,
        nodes=int(plan.gpu_nodegroup["scaling_config"]["desired_size"]),
        efa=plan.efa,
        capacity_reservation_id=cc.capacity_reservation_id,
        market_type=cc.market_type,
        zone_pinned=cc.gpu_availability_zone is not None,
    )


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
            name, FAIL,
            f"{req.instance_type} is not offered in any zone of {req.region}; set {KEY_REGION} to a region that offers it, "
            f"or {KEY_INSTANCE} to one of: {alts}",
        )
    if not req.availability_zone:
        return CheckResult(
            name, WARN,
            f"{req.instance_type} is offered in {req.region} zones {', '.join(zones)}, but {KEY_AZ} is not set; "
            f"pin it, e.g. {KEY_AZ}: {zones[0]}",
        )
    if req.availability_zone in zones:
        how = "" if req.zone_pinned else f" (the first zone, used because {KEY_AZ} is not set; pin it to keep it)"
        return CheckResult(name, PASS, f"{req.instance_type} is offered in {req.availability_zone}{how}")
    where = "" if req.availability_zone.startswith(req.region) else f" (that zone is not in region {req.region})"
    return CheckResult(
        name, FAIL,
        f"{req.instance_type} is not offered in {req.availability_zone}{where}; set {KEY_AZ} to one of: {', '.join(zones)}",
    )


def _describe_type(ec2, instance_type: str) -> dict:
    return ec2.describe_instance_types(InstanceTypes=[instance_type])["InstanceTypes"][0]


def check_efa(req: PreflightRequest, info: Optional[dict], info_error: Optional[str]) -> CheckResult:
    name = "efa"
    if not req.efa:
        return CheckResult(name, SKIP, f"EFA is off ({KEY_EFA}: false and the target's fabric is not aws-efa)")
    if info is None:
        if info_error and ("InvalidInstanceType" in info_error or "IndexError" in info_error):
            return CheckResult(name, FAIL, f"describe_instance_types {req.instance_type} failed ({info_error}); check {KEY_INSTANCE}")
        return CheckResult(name, FAIL, f"describe_instance_types {req.instance_type} failed ({info_error})")
    net = info.get("NetworkInfo") or {}
    if not net.get("EfaSupported"):
        alts = _same_gpu_types(req.instance_type, lambda s: s.efa_interfaces > 0)
        hint = f"set {KEY_INSTANCE} to one of: {', '.join(alts)}" if alts else f"choose an EFA instance type for {KEY_INSTANCE}"
        return CheckResult(name, FAIL, f"{req.instance_type} does not support EFA; {hint}, or set {KEY_EFA}: false with a target whose fabric is not aws-efa")
    max_efa = int((net.get("EfaInfo") or {}).get("MaximumEfaInterfaces", 0))
    cards = len(net.get("NetworkCards") or []) or int(net.get("MaximumNetworkCards", 0))
    shape = INSTANCES.get(req.instance_type)
    if shape is None:
        return CheckResult(name, WARN, f"{req.instance_type} supports {max_efa} EFA interfaces on {cards} network cards, but is not in stacks/gpus.py; "
                                       f"set {KEY_INSTANCE} to one of: {', '.join(sorted(INSTANCES))}")
    problems = []
    if max_efa < shape.efa_interfaces:
        problems.append(f"allows {max_efa} EFA interfaces but the launch template attaches {shape.efa_interfaces}")
    if cards < shape.network_cards:
        problems.append(f"has {cards} network cards but the catalog expects {shape.network_cards}")
    if problems:
        alts = _same_gpu_types(req.instance_type)
        hint = f"set {KEY_INSTANCE} to one of: {', '.join(alts)}, " if alts else f"set {NS}:gpu to another GPU (no other {shape.gpu} type in stacks/gpus.py), "
        return CheckResult(name, FAIL, f"{req.instance_type} " + " and ".join(problems)
                           + f"; {hint}or correct {req.instance_type} efa_interfaces/network_cards in stacks/gpus.py")
    if not shape.verified:
        return CheckResult(name, WARN, f"{req.instance_type} supports EFA: {max_efa} interfaces, {cards} network cards; the catalog attaches "
                                       f"{shape.efa_interfaces} EFA on network cards {list(shape.efa_cards)}, a layout not confirmed by AWS documentation: "
                                       f"compare with `aws ec2 describe-instance-types --instance-types {req.instance_type} --query 'InstanceTypes[0].NetworkInfo'`")
    return CheckResult(name, PASS, f"{req.instance_type} supports EFA: {max_efa} interfaces, {cards} network cards (catalog attaches {shape.efa_interfaces})")


def check_reservation(req: PreflightRequest, ec2) -> tuple[CheckResult, Optional[dict]]:
    name = "reservation"
    rid = req.capacity_reservation_id
    if not rid:
        return CheckResult(name, SKIP, f"no {KEY_RESERVATION} set"), None
    try:
        found = ec2.describe_capacity_reservations(CapacityReservationIds=[rid])["CapacityReservations"]
    except _api_errors() as e:
        return CheckResult(name, FAIL, f"{rid} not found in {req.region} ({_err(e)}); set {KEY_RESERVATION} to a reservation id of that region (cr-...) or remove it"), None
    if not found:
        return CheckResult(name, FAIL, f"{rid} not found in {req.region}; set {KEY_RESERVATION} to a reservation id of that region (cr-...) or remove it"), None
    cr = found[0]
    problems, warnings = [], []
    state = cr.get("State")
    block = cr.get("ReservationType") == CAPACITY_BLOCK or req.market_type == CAPACITY_BLOCK
    if state in ("scheduled", "payment-pending", "pending") and block:
        # A Capacity Block bought for later: the node group is created now and its nodes launch when the block starts.
        warnings.append(f"Capacity Block is {state}, starts {cr.get('StartDate')}: GPU nodes launch then, "
                        "and `pulumi up` waits for them (set wait.dgdTimeout past the start, or run up after it)")
    elif state != "active":
        when = f", starts {cr['StartDate']}" if cr.get("StartDate") and state in ("scheduled", "payment-pending", "pending") else ""
        problems.append(f"state is {state}{when}, not active (wait for it, or set {KEY_RESERVATION} to an active reservation)")
    end = cr.get("EndDate")
    if end is not None:
        import datetime as _dt

        now = _dt.datetime.now(_dt.timezone.utc)
        end_utc = end if end.tzinfo else end.replace(tzinfo=_dt.timezone.utc)
        if end_utc <= now:
            problems.append(f"it ended {end_utc:%Y-%m-%d %H:%M} UTC; set {KEY_RESERVATION} to a current reservation")
        elif end_utc - now < _dt.timedelta(hours=2):
            warnings.append(f"it ends {end_utc:%Y-%m-%d %H:%M} UTC, in under 2 h (EKS drains Capacity Block nodes before the end)")
    if cr.get("InstanceType") != req.instance_type:
        problems.append(f"it reserves {cr.get('InstanceType')}, not {req.instance_type}; set {KEY_INSTANCE}: {cr.get('InstanceType')}")
    if cr.get("AvailabilityZone") != req.availability_zone:
        unpinned = "" if req.zone_pinned else f" (the default first zone, {KEY_AZ} is not set)"
        problems.append(f"it is in {cr.get('AvailabilityZone')}, not {req.availability_zone}{unpinned}; pin {KEY_AZ}: {cr.get('AvailabilityZone')}")
    # A scheduled block has no available instances yet: its size is TotalInstanceCount.
    avail = int(cr.get("TotalInstanceCount" if warnings and state != "active" else "AvailableInstanceCount", 0))
    if avail < req.nodes:
        missing = req.nodes - avail
        problems.append(
            f"it has {avail} of {req.nodes} needed instances available ({missing} missing); set {KEY_NODES}: {avail} "
            f"or grow the reservation by {missing}"
        )
    if problems:
        return CheckResult(name, FAIL, f"{rid}: " + "; ".join(problems + warnings)), cr
    kind = cr.get("ReservationType") or "default"
    if warnings:
        return CheckResult(name, WARN, f"{rid} ({kind}): " + "; ".join(warnings)), cr
    return CheckResult(name, PASS, f"{rid} ({kind}) is active: {avail} x {req.instance_type} available in {req.availability_zone}, {req.nodes} needed"), cr


def _running_p_vcpus(ec2) -> int:
    """vCPUs of pending/running P instances. Filtered here, not with an instance-type 'p*' filter, and
    vCPUs fall back to the type's default when CpuOptions is absent (moto supports neither)."""
    used, defaults = 0, {}
    pages = ec2.get_paginator("describe_instances").paginate(Filters=[{"Name": "instance-state-name", "Values": ["pending", "running"]}])
    for page in pages:
        for r in page["Reservations"]:
            for i in r["Instances"]:
                it = i.get("InstanceType", "")
                if not re.match(r"p\d", it):
                    continue
                cpu = i.get("CpuOptions") or {}
                if cpu.get("CoreCount"):
                    used += int(cpu["CoreCount"]) * int(cpu.get("ThreadsPerCore", 1))
                else:
                    if it not in defaults:
                        defaults[it] = int(_describe_type(ec2, it)["VCpuInfo"]["DefaultVCpus"])
                    used += defaults[it]
    return used


def check_quota(req: PreflightRequest, ec2, quotas, info: Optional[dict], reservation: Optional[dict]) -> CheckResult:
    name = "quota"
    if req.market_type == CAPACITY_BLOCK or (reservation or {}).get("ReservationType") == CAPACITY_BLOCK:
        return CheckResult(name, WARN, f"skipped: capacity blocks do not draw on the On-Demand P quota ({KEY_MARKET}: {CAPACITY_BLOCK})")
    if not req.instance_type.startswith("p"):
        return CheckResult(name, SKIP, f"{req.instance_type} is not a P instance; quota {P_INSTANCE_QUOTA} does not apply")
    if info is None:
        return CheckResult(name, WARN, f"skipped: vCPUs of {req.instance_type} unknown (describe_instance_types failed)")
    if quotas is None:
        return CheckResult(name, WARN, "skipped: no service-quotas client")
    try:
        value = float(quotas.get_service_quota(ServiceCode="ec2", QuotaCode=P_INSTANCE_QUOTA)["Quota"]["Value"])
    except _api_errors() as e:
        return CheckResult(name, WARN, f"skipped: service-quotas unavailable ({_err(e)})")
    vcpus = int(info["VCpuInfo"]["DefaultVCpus"])
    needed = req.nodes * vcpus
    try:
        used = _running_p_vcpus(ec2)
        used_note = f", {used} in use by running P instances"
    except _api_errors():
        used, used_note = 0, " (running P instances not counted: describe_instances failed)"
    headroom = int(value) - used
    if needed > headroom:
        fit = max(0, headroom // vcpus)
        return CheckResult(
            name, FAIL,
            f"quota {P_INSTANCE_QUOTA} (Running On-Demand P instances) is {int(value)} vCPUs{used_note}; "
            f"{req.nodes} x {req.instance_type} need {needed}. Set {KEY_NODES}: {fit}, or {KEY_MARKET}: {CAPACITY_BLOCK}, or request "
            f"{used + needed}: aws service-quotas request-service-quota-increase --region {req.region} --service-code ec2 "
            f"--quota-code {P_INSTANCE_QUOTA} --desired-value {used + needed}",
        )
    return CheckResult(name, PASS, f"quota {P_INSTANCE_QUOTA} is {int(value)} vCPUs{used_note}; {req.nodes} x {req.instance_type} need {needed}")


def check_capacity(req: PreflightRequest) -> CheckResult:
    """On-demand P instances are often not there when asked for (InsufficientInstanceCapacity; a managed node group
    then ends CREATE_FAILED). Source: aws/containers-roadmap #2204; EC2 "Capacity Blocks for ML"."""
    name = "capacity"
    if req.capacity_reservation_id or req.market_type == CAPACITY_BLOCK:
        return CheckResult(name, PASS, f"nodes launch into reservation {req.capacity_reservation_id}")
    if not req.instance_type.startswith("p"):
        return CheckResult(name, SKIP, f"{req.instance_type} is not a P instance")
    return CheckResult(
        name, WARN,
        f"on-demand {req.instance_type} can fail with InsufficientInstanceCapacity (the GPU node group then ends CREATE_FAILED); "
        f"for a reliable launch buy a Capacity Block ({KEY_MARKET}: {CAPACITY_BLOCK} + {KEY_RESERVATION}) or use an "
        f"On-Demand Capacity Reservation ({KEY_RESERVATION})",
    )


def _credentials_problem(e: Exception) -> Optional[str]:
    """One line when the error is about credentials rather than the stack's settings."""
    from botocore.exceptions import ClientError, NoCredentialsError, PartialCredentialsError, TokenRetrievalError

    if isinstance(e, (NoCredentialsError, PartialCredentialsError, TokenRetrievalError)):
        return "no AWS credentials: set AWS_PROFILE (or AWS_ACCESS_KEY_ID/AWS_SECRET_ACCESS_KEY), or run `aws sso login`; nothing was checked"
    if isinstance(e, ClientError) and e.response.get("Error", {}).get("Code") in (
            "AuthFailure", "UnrecognizedClientException", "InvalidClientTokenId", "ExpiredToken", "ExpiredTokenException", "RequestExpired"):
        return f"AWS rejected the credentials ({e.response['Error']['Code']}): refresh them (`aws sso login`) and run preflight again; nothing was checked"
    return None


class CredentialsError(RuntimeError):
    pass


def run_checks(req: PreflightRequest, ec2_client, quotas_client) -> list[CheckResult]:
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
    try:
        info = _describe_type(ec2_client, req.instance_type)
    except (*_api_errors(), IndexError) as e:
        info_error = _err(e)
    results.append(check_efa(req, info, info_error))
    res_result, reservation = check_reservation(req, ec2_client)
    results.append(res_result)
    results.append(check_quota(req, ec2_client, quotas_client, info, reservation))
    results.append(check_capacity(req))
    return results


def format_results(req: PreflightRequest, results: list[CheckResult]) -> str:
    head = (f"preflight {req.instance_type} x {req.nodes} in {req.availability_zone or req.region} "
            f"(efa={'on' if req.efa else 'off'}, market={req.market_type}"
            + (f", reservation={req.capacity_reservation_id}" if req.capacity_reservation_id else "") + ")")
    return "\n".join([head] + [r.line() for r in results])


# --------------------------------------------------------------------------- CLI


def cmd(args) -> int:
    import boto3

    from ..config import ConfigError

    try:
        req = request_from_stack(args.stack)
    except ConfigError as e:
        print(f"FAIL  config       {e}")
        return 1
    if req is None:
        print(f"SKIP  preflight    stack {args.stack} creates no AWS resources (dynamo:cluster.mode is not eks); nothing to check")
        return 0
    try:
        session = boto3.session.Session(region_name=req.region)
        if session.get_credentials() is None:
            raise CredentialsError(_credentials_problem(__import__("botocore.exceptions").exceptions.NoCredentialsError()))
        results = run_checks(req, session.client("ec2"), session.client("service-quotas"))
    except CredentialsError as e:
        print(f"FAIL  credentials  {e}")
        return 1
    print(format_results(req, results))
    return 0 if all(r.ok for r in results) else 1


def add_subparser(sub) -> None:
    p = sub.add_parser("preflight", help="check AWS offering, EFA, capacity reservation and P-instance quota for a stack (read-only boto3)")
    p.add_argument("--stack", required=True)
    p.set_defaults(fn=cmd)
