"""``dynamo-stacks targets``: the catalog, one target per line.

On a terminal the default is a table that fits 100 columns: id, GPUs and nodes the target needs on its GPU's default
instance, that instance, and the on-demand $/h of those nodes from stacks/registry/prices.yaml (the one price file, each price
with its source and the date it was read). Piped or redirected, the default is ``ID<TAB>UPSTREAM`` per line, the form
scripts (and the fidelity hook) read; ``--tsv`` and ``--table`` force either. The same convention as CockroachDB's
CLI, which prints tab-separated values "when the command is not used from an interactive terminal" and a table
otherwise (cockroachdb/cockroach#7268). ``--long`` shows every column, ``--json`` the same as data."""

from __future__ import annotations

import json
import sys
from typing import Optional

from stacks import catalog
from stacks.catalog import view
from stacks.cli.cost import ec2_price, load_prices

# The region $/h is shown for: every instance priced in stacks/registry/prices.yaml has a us-east-1 price. A stack's own
# region is priced by `dynamo-stacks cost --stack NAME`.
PRICE_REGION = "us-east-1"

WIDTH = 100  # the default table's budget in columns


def priced_rows(prices: Optional[dict] = None) -> list[dict]:
    """``view.row`` of every target plus ``usd_per_hour`` (nodes x the instance's on-demand price in
    ``PRICE_REGION``; None without an instance, a node count or a price) and the price entry it came from."""
    prices = load_prices() if prices is None else prices
    rows = []
    for t in sorted(catalog.targets().values(), key=lambda t: t.id):
        r = view.row(t)
        p = ec2_price(prices, r["instance_type"], PRICE_REGION) if r["instance_type"] else None
        r["usd_per_hour"] = round(r["nodes"] * p["usd_per_hour"], 2) if p and r["nodes"] else None
        r["price"] = {"region": PRICE_REGION, **p} if p else None
        rows.append(r)
    return rows


def price_note(rows: list[dict]) -> str:
    """The lines under the table saying where $/h comes from."""
    reads = sorted({r["price"]["read"] for r in rows if r["price"]})
    unpriced = sorted({r["instance_type"] for r in rows if r["instance_type"] and not r["price"]})
    lines = [f"$/H: NODES x on-demand price of INSTANCE in {PRICE_REGION}, stacks/registry/prices.yaml (read {', '.join(reads)})"]
    if unpriced:
        lines.append(f"-: no hourly price there ({', '.join(unpriced)}); a stack's cost: dynamo-stacks cost --stack NAME")
    return "\n".join(lines) + "\n"


def cmd(args) -> int:
    fmt = args.format or ("table" if sys.stdout.isatty() else "tsv")
    if fmt == "tsv":
        for t in sorted(catalog.targets().values(), key=lambda t: t.id):
            print(f"{t.id}\t{t.upstream or '-'}")
        return 0
    rows = priced_rows()
    if fmt == "json":
        print(json.dumps(rows, indent=2))
    elif fmt == "long":
        sys.stdout.write(view.table(rows, view.LONG))
    else:
        sys.stdout.write(view.table(rows, view.SHORT) + price_note(rows))
    return 0


def add_subparser(sub) -> None:
    p = sub.add_parser(
        "targets",
        help="list the catalog targets with the GPUs, nodes and $/h each needs",
        description="List the catalog targets. On a terminal: a table of id, GPUs, nodes, instance type and $/h "
        "(stacks/registry/prices.yaml). Piped or redirected: ID<TAB>UPSTREAM per line, the form scripts read.",
    )
    g = p.add_mutually_exclusive_group()
    g.add_argument(
        "--table",
        dest="format",
        action="store_const",
        const="table",
        help="the table (id, GPUs, nodes, instance, $/h) even when stdout is not a terminal",
    )
    g.add_argument(
        "--tsv",
        dest="format",
        action="store_const",
        const="tsv",
        help="ID<TAB>UPSTREAM per line (upstream recipe path below recipes/, '-' for none), even on a terminal",
    )
    g.add_argument(
        "-l",
        "--long",
        dest="format",
        action="store_const",
        const="long",
        help="every column: model, GPU, topology, runtime, spec, GPUs, nodes, instance, $/h, published perf",
    )
    g.add_argument(
        "--json",
        dest="format",
        action="store_const",
        const="json",
        help="every target with all its fields (and its price entry) as JSON",
    )
    p.set_defaults(fn=cmd, format=None)
