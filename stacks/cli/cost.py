"""``python -m stacks cost --stack NAME``: $/h of each GPU pool of an EKS stack at its minimum, at its maximum and
while every entry is paused, from stacks/registry/prices.yaml (each price with its source and the date it was read), plus the
cluster's fixed hourly charges (EKS control plane; NAT gateways and interface endpoints at stacks/cluster/network.py's prices).

The node counts come from the same ``build_program`` that ``pulumi up`` runs: the stack as committed, and the same
stack with ``paused: true`` on every entry (``stacks.serving.autoscaling``). Per pool:

- managed node group: it runs its desired size whatever the load (no autoscaler scales a node group here), so its
  minimum is the desired size and its maximum ``maxSize``; paused, its desired size with every entry paused (0 when
  all its entries are paused).
- an On-Demand Capacity Reservation (``capacityReservationId`` with ``marketType: on-demand``) "is billed at the
  On-Demand rate for every reserved instance, whether or not an instance is running in it" (help.nops.io, "Cancel
  Unused Capacity Reservation"), so pausing saves nothing until the reservation is cancelled; the reservation's size is
  not in the stack, the pool's maximum stands for it.
- a Capacity Block: "The price of a Capacity Block offering is charged up front" (EC2 user guide, "Extend Capacity
  Blocks"; EC2 API ``CapacityBlockOffering.upfrontFee``: "The total price to be paid up front"), so it has no hourly
  price here.
Not priced: system nodes, storage (per GB-month), per-GB NAT processing and transfer.
"""

from __future__ import annotations

import copy
import sys
import textwrap
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Optional

from stacks.config.keys import NS, ConfigError
from stacks.registry import yaml_text

PRICES = Path(__file__).resolve().parents[1] / "registry" / "prices.yaml"
WIDTH = 100  # the report's columns


def load_prices(path: Path = PRICES) -> dict:
    data = yaml_text.load(path.read_text()) or {}
    for itype, regions in (data.get("ec2") or {}).items():
        for region, p in regions.items():
            missing = {"usd_per_hour", "source", "read"} - set(p or {})
            if missing:
                raise ConfigError(f"{path.name}: ec2.{itype}.{region} lacks {', '.join(sorted(missing))}")
    return data


def ec2_price(prices: dict, instance_type: str, region: str) -> Optional[dict]:
    return ((prices.get("ec2") or {}).get(instance_type) or {}).get(region)


@dataclass
class PoolCost:
    pool: str
    gpu: str
    instance_type: str
    capacity: str  # on-demand | reservation | capacity-block
    nodes_min: int
    nodes_max: int
    nodes_paused: int
    price: Optional[dict]  # stacks/registry/prices.yaml entry, None: unpriced

    def usd(self, nodes: int, paused: bool = False) -> Optional[float]:
        if self.price is None or self.capacity.endswith("capacity-block"):
            return None
        if paused and self.capacity.endswith("reservation"):
            nodes = self.nodes_max  # billed whether used or not
        return round(nodes * float(self.price["usd_per_hour"]), 4)


def paused_raw(raw: dict[str, Any]) -> dict[str, Any]:
    """The stack's config with every entry paused, as an operator pauses it: ``paused: true`` and nothing else changed
    (an autoscaled component keeps its ScaledObject, which KEDA holds at 0 replicas: stacks/serving/autoscaling.py)."""
    out = copy.deepcopy(raw)
    if isinstance(out.get("serve"), list):
        for e in out["serve"]:
            if isinstance(e, dict):
                e["paused"] = True
        return out
    out["paused"] = True
    return out


def _capacity(pool) -> str:
    kp = getattr(pool, "karpenter", None)
    if kp is not None:
        if kp.get("market_type") == "capacity-block":
            return "capacity-block"
        return "reservation" if kp.get("capacity_reservation_id") else "on-demand"
    ng = pool.nodegroup or {}
    if ng.get("capacity_type") == "CAPACITY_BLOCK":
        return "capacity-block"
    if "capacity_reservation_specification" in (pool.launch_template or {}):
        return "reservation"
    return "on-demand"


def pool_costs(program, paused_program, prices: dict) -> list[PoolCost]:
    """Managed node groups run their desired size (min) up to maxSize; Karpenter pools run what their pods need: the
    replicas with every autoscaled component at minReplicas (min), at maxReplicas (max, at most the NodePool's node
    limit; a pool no entry uses: the limit), and nothing once every entry is paused."""
    from stacks.serving.autoscaling import at_max, at_min_dgd
    from stacks.catalog.fit import pack

    cp, pp = program.cluster_plan, paused_program.cluster_plan
    paused_by_name = {p.name: p for p in pp.gpu_pools}
    out = []
    for p in cp.gpu_pools:
        price = ec2_price(prices, p.shape.instance_type, cp.region)
        if getattr(p, "capacity", "node-group") == "karpenter":
            comps = [c for e in program.entries if e.plan.target.gpu == p.gpu for c in at_min_dgd(e.plan)["spec"]["components"]]
            top = [
                c
                for e in program.entries
                if e.plan.target.gpu == p.gpu
                for c in at_max(e.plan.dgd, e.plan.autoscaling)["spec"]["components"]
            ]
            pcomps = [c for e in paused_program.entries if e.plan.target.gpu == p.gpu for c in e.plan.dgd["spec"]["components"]]
            out.append(
                PoolCost(
                    pool=p.name,
                    gpu=p.gpu,
                    instance_type=p.shape.instance_type,
                    capacity=f"karpenter {_capacity(p)}",
                    nodes_min=pack({"spec": {"components": comps}}, p.node_shape.capacity)[0],
                    nodes_max=min(
                        int(p.karpenter["max_nodes"]),
                        max(pack({"spec": {"components": top}}, p.node_shape.capacity)[0], 1)
                        if any(e.plan.target.gpu == p.gpu for e in program.entries)
                        else int(p.karpenter["max_nodes"]),
                    ),
                    nodes_paused=pack({"spec": {"components": pcomps}}, p.node_shape.capacity)[0],
                    price=price,
                )
            )
            continue
        sc = p.nodegroup["scaling_config"]
        psc = paused_by_name[p.name].nodegroup["scaling_config"] if p.name in paused_by_name else sc
        out.append(
            PoolCost(
                pool=p.name,
                gpu=p.gpu,
                instance_type=p.shape.instance_type,
                capacity=_capacity(p),
                nodes_min=int(sc["desired_size"]),
                nodes_max=int(sc["max_size"]),
                nodes_paused=int(psc["desired_size"]),
                price=price,
            )
        )
    return out


def fixed_costs(program, prices: dict) -> list[tuple[str, float, str]]:
    """(what, $/h, source) the cluster pays whatever its pools run."""
    from stacks.cluster import ECR_ENDPOINT_SERVICES, INTERFACE_ENDPOINT_USD_PER_AZ_HOUR, NAT_USD_PER_HOUR

    cp = program.cluster_plan
    from stacks.cluster.access import standard_support_ends
    import datetime

    cpl = prices["eks"]["control_plane"]
    ends = standard_support_ends().get(str(cp.kubernetes_version))
    extended = (cp.control_plane or {}).get("upgrade_policy") == "EXTENDED" and ends is not None and datetime.date.today() > ends
    out = [
        (
            "EKS control plane (extended support)" if extended else "EKS control plane",
            float(cpl["extended_usd_per_hour"] if extended else cpl["usd_per_hour"]),
            f"{cpl['source']}, read {cpl['read']}",
        )
    ]
    net = cp.network or {}
    nats = len(net.get("nat_zones") or [])
    if nats:
        out.append(
            (
                f"NAT gateway x {nats}",
                round(nats * NAT_USD_PER_HOUR, 4),
                "stacks/cluster/network.py NAT_USD_PER_HOUR (aws.amazon.com/vpc/pricing)",
            )
        )
    eps = len(net.get("interface_endpoints") or [])
    if eps:
        zones = len(cp.private_subnets)
        out.append(
            (
                f"interface endpoints {', '.join(ECR_ENDPOINT_SERVICES)} x {zones} zones",
                round(eps * zones * INTERFACE_ENDPOINT_USD_PER_AZ_HOUR, 4),
                "stacks/cluster/network.py INTERFACE_ENDPOINT_USD_PER_AZ_HOUR (aws.amazon.com/privatelink/pricing)",
            )
        )
    return out


def _money(v: Optional[float], why: str = "-") -> str:
    return why if v is None else f"{v:,.2f}"


def _table(rows: list[list[str]]) -> list[str]:
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
    return ["  ".join(c.ljust(w) for c, w in zip(r, widths)).rstrip() for r in rows]


def report(
    stack: str,
    region: str,
    pools: list[PoolCost],
    fixed: list[tuple[str, float, str]],
    warnings: tuple[str, ...] = (),
    system: Optional[dict] = None,
) -> str:
    rows = [["pool", "gpu", "instance", "capacity", "nodes min/max/paused", "per node", "at min", "at max", "paused"]]
    for c in pools:
        why = "block" if c.capacity.endswith("capacity-block") else "unpriced"
        node = None if c.capacity.endswith("capacity-block") or c.price is None else float(c.price["usd_per_hour"])
        rows.append(
            [
                c.pool,
                c.gpu,
                c.instance_type,
                c.capacity,
                f"{c.nodes_min}/{c.nodes_max}/{c.nodes_paused}",
                _money(node, why),
                _money(c.usd(c.nodes_min), why),
                _money(c.usd(c.nodes_max), why),
                _money(c.usd(c.nodes_paused, paused=True), why),
            ]
        )
    table = [f"stack {stack} ({region}), USD per hour, prices from stacks/registry/prices.yaml"] + _table(rows)
    lines = [f"fixed: {what} {usd:,.3f}" for what, usd, _ in fixed] + [f"warning: {w}" for w in warnings]
    lines.append("sources:")
    seen = set()
    for c in pools:
        if c.price is not None and (c.instance_type, region) not in seen:
            seen.add((c.instance_type, region))
            lines.append(
                f"  {c.instance_type} {region} ${c.price['usd_per_hour']}/h: {c.price['source']}, read {c.price['read']}"
            )
        elif c.price is None and not c.capacity.endswith("capacity-block"):
            lines.append(
                f"  {c.instance_type} {region}: no price in stacks/registry/prices.yaml (add one with its source and date)"
            )
        if c.capacity.endswith("reservation"):
            lines.append(
                f"  pool {c.pool}: an On-Demand Capacity Reservation is billed whether used or not, so paused costs as much"
            )
        if c.capacity.endswith("capacity-block"):
            lines.append(f"  pool {c.pool}: a Capacity Block is charged up front for its whole duration (no hourly price)")
    for what, _, src in fixed:
        lines.append(f"  {what}: {src}")
    if system is not None:
        lines.append(
            f"  system nodes: {system['nodes']} x {system['instance_type']}, {system['disk_gib']} GiB root disk each "
            f"(sized for the runtime images they pull; {NS}:cluster.systemDiskGib)"
        )
    lines.append("  not priced: system nodes, cache storage (per GB-month), NAT per-GB processing, data transfer")
    # within 100 columns: a long source continues on indented lines
    return "".join(f"{line}\n" for line in table) + "".join(
        textwrap.fill(line, WIDTH, subsequent_indent="    ", break_on_hyphens=False, break_long_words=False) + "\n"
        for line in lines
    )


def _programs(plain: dict[str, Any], name: str, secret: frozenset, region: Optional[str]):
    """The stack's program as `up` builds it, and the same with every entry paused (an EKS stack only)."""
    from stacks.program import build_program

    program = build_program(plain, name, secret, aws_region=region)
    if not program.mode.creates_cluster:
        raise ConfigError(
            f"{NS}:cluster.mode: {program.cluster.mode!r}: stack {name!r} creates no AWS capacity of its own; "
            f"cost applies to cluster.mode eks stacks (for cluster.mode stack, run it on the cluster stack)"
        )
    return program, build_program(paused_raw(plain), name, secret, aws_region=region)


def config_cost(
    plain: dict[str, Any], name: str, secret: frozenset = frozenset(), region: Optional[str] = None, prices: Optional[dict] = None
) -> tuple[str, list[PoolCost], list[tuple[str, float, str]]]:
    """(region, pool costs, fixed costs) of a stack's plain ``dynamo:`` config."""
    prices = prices if prices is not None else load_prices()
    program, paused = _programs(plain, name, secret, region)
    return program.cluster_plan.region, pool_costs(program, paused, prices), fixed_costs(program, prices)


def stack_cost(name: str, prices: Optional[dict] = None) -> str:
    """The report, with the control plane's end-of-standard-support warnings ``up`` logs (stacks/cluster/access.py)."""
    from stacks.program.render import split_secrets, stack_aws_region, stack_raw_config

    plain, secret = split_secrets(stack_raw_config(name))
    prices = prices if prices is not None else load_prices()
    program, paused = _programs(plain, name, secret, stack_aws_region(name))
    warnings = tuple((program.cluster_plan.control_plane or {}).get("support_warnings") or ())
    return report(
        name,
        program.cluster_plan.region,
        pool_costs(program, paused, prices),
        fixed_costs(program, prices),
        warnings,
        system_nodes(program.cluster_plan),
    )


def system_nodes(plan) -> dict:
    """The system node group as the report lists it: node count, instance type and root disk."""
    ng = plan.system_nodegroup
    return {"nodes": ng["scaling_config"]["desired_size"], "instance_type": ng["instance_types"][0], "disk_gib": ng["disk_size"]}


def cmd_cost(args) -> int:
    try:
        sys.stdout.write(stack_cost(args.stack))
    except ConfigError as e:
        print(f"error: {' '.join(str(e).split())}", file=sys.stderr)
        return 2
    return 0


def add_subparser(sub) -> None:
    p = sub.add_parser(
        "cost",
        help="$/h per GPU pool of an EKS stack at its minimum, its maximum and while paused "
        "(stacks/registry/prices.yaml, with sources)",
        description="USD per hour of each GPU pool of an EKS stack: at its minimum and maximum node count, "
        "and with every entry paused (paused: true), from stacks/registry/prices.yaml (each price with "
        "its source and date), plus the EKS control plane and NAT gateways. Exit 2 on a stack "
        "that is not cluster.mode eks or does not exist.",
    )
    p.add_argument("--stack", required=True, metavar="NAME", help="a committed stack: Pulumi.NAME.yaml in the repository")
    p.set_defaults(fn=cmd_cost)
