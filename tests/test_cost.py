"""``python -m stacks cost --stack NAME`` (stacks/cli/cost.py) and its one price file, stacks/registry/prices.yaml."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from stacks.cli.cost import PRICES, config_cost, ec2_price, load_prices, stack_cost
from stacks.config.keys import ConfigError

ROOT = Path(__file__).resolve().parent.parent
PRICES_DATA = load_prices()
P5 = PRICES_DATA["ec2"]["p5.48xlarge"]["us-east-1"]["usd_per_hour"]


def cli(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "stacks", "cost", *args], cwd=ROOT, capture_output=True, text=True, timeout=120)


def test_every_price_names_its_source_and_date():
    for itype, regions in PRICES_DATA["ec2"].items():
        for region, p in regions.items():
            assert p["usd_per_hour"] > 0 and len(p["source"]) > 20, (itype, region)
            assert re.fullmatch(r"\d{4}-\d{2}-\d{2}", str(p["read"])), (itype, region)
    cp = PRICES_DATA["eks"]["control_plane"]
    assert cp["usd_per_hour"] > 0 and cp["source"] and cp["read"]


def test_a_price_without_source_is_refused(tmp_path):
    bad = tmp_path / "prices.yaml"
    bad.write_text(yaml.safe_dump({"ec2": {"p5.48xlarge": {"us-east-1": {"usd_per_hour": 1.0}}}}))
    with pytest.raises(ConfigError, match=r"ec2.p5.48xlarge.us-east-1 lacks read, source"):
        load_prices(bad)


def test_the_guides_per_node_prices_are_the_price_files():
    # docs/deploy-aws.md section 5 shows the same prices; each number there must be this file's price for the instance.
    text = (ROOT / "docs" / "deploy-aws.md").read_text()
    section = text.split("## 5.", 1)[1].split("\n## ", 1)[0]
    rows = [r for r in section.splitlines() if r.startswith("| ") and "×" in r]
    checked = 0
    for r in rows:
        cells = [c.strip() for c in r.strip("|").split("|")]
        if len(cells) != 6 or not re.fullmatch(r"[a-z0-9-]+\.\d*x?large", cells[3].split(" ×")[0]):
            continue  # another table of the section (network settings)
        itype = cells[3].split(" ×")[0]
        if re.fullmatch(r"\d+(\.\d+)?", cells[4]):
            prices = {p["usd_per_hour"] for p in PRICES_DATA["ec2"].get(itype, {}).values()}
            assert float(cells[4]) in prices, (itype, cells[4], prices)
            checked += 1
    assert checked >= 6


def test_on_demand_stack_costs_nodes_times_price_and_nothing_while_paused():
    region, pools, fixed = config_cost(
        {"target": "lightning-vllm-agg-h100-dspark", "cluster": {"mode": "eks", "region": "us-east-1", "gpuNodes": 3}}, "c"
    )
    (pool,) = pools
    assert (region, pool.instance_type, pool.capacity) == ("us-east-1", "p5.48xlarge", "on-demand")
    assert (pool.nodes_min, pool.nodes_max, pool.nodes_paused) == (3, 3, 0)
    assert (pool.usd(pool.nodes_min), pool.usd(pool.nodes_max), pool.usd(pool.nodes_paused, paused=True)) == (
        round(3 * P5, 4),
        round(3 * P5, 4),
        0.0,
    )
    assert [f[0] for f in fixed] == ["EKS control plane", "NAT gateway x 1"]


def test_reservation_is_billed_while_paused():
    _, (pool,), _ = config_cost(
        {
            "target": "lightning-vllm-agg-h100-dspark",
            "cluster": {"mode": "eks", "region": "us-east-1", "capacityReservationId": "cr-0123456789abcdef0"},
        },
        "c",
    )
    assert pool.capacity == "reservation" and pool.nodes_paused == 0
    assert pool.usd(pool.nodes_paused, paused=True) == round(pool.nodes_max * P5, 4)


def test_capacity_block_and_unpriced_regions_have_no_hourly_price():
    _, (block,), _ = config_cost(
        {
            "target": "lightning-vllm-agg-h100-dspark",
            "cluster": {
                "mode": "eks",
                "region": "us-east-1",
                "marketType": "capacity-block",
                "capacityReservationId": "cr-0123456789abcdef0",
            },
        },
        "c",
    )
    assert block.capacity == "capacity-block" and block.usd(1) is None
    assert ec2_price(PRICES_DATA, "p5.48xlarge", "eu-north-1") is None
    text = stack_cost("h100-disagg-staging")
    assert "p5.48xlarge us-east-2: no price in stacks/registry/prices.yaml" in text and "billed whether used or not" in text


def test_committed_stack_report():
    text = stack_cost("h100-agg")
    header, row = text.splitlines()[1:3]
    assert header.split()[:4] == ["pool", "gpu", "instance", "capacity"]
    assert row.split() == ["gpu", "h100", "p5.48xlarge", "on-demand", "1/1/0", f"{P5:,.2f}", f"{P5:,.2f}", f"{P5:,.2f}", "0.00"]
    src = PRICES_DATA["ec2"]["p5.48xlarge"]["us-east-1"]
    assert f"{src['source']}, read {src['read']}" in " ".join(text.split())  # a long source wraps at 100 columns


def test_cli_help_and_errors():
    r = cli("--help")
    assert r.returncode == 0 and "--stack" in r.stdout and "paused" in r.stdout
    r = cli("--stack", "no-such-stack")
    assert r.returncode == 2 and r.stderr.count("\n") == 1 and "no Pulumi.no-such-stack.yaml" in r.stderr
    r = cli("--stack", "dev")
    assert r.returncode == 2 and r.stderr.startswith("error: dynamo:cluster.mode: 'render'") and r.stderr.count("\n") == 1
    r = cli("--stack", "h100-agg")
    assert r.returncode == 0 and r.stdout == stack_cost("h100-agg")


def test_price_file_is_the_one_the_cli_reads():
    assert PRICES == ROOT / "stacks" / "registry" / "prices.yaml"


def test_karpenter_pool_runs_what_its_replicas_need():
    text = stack_cost("h100-karpenter")
    row = text.splitlines()[2].split()
    # min: every autoscaled component at minReplicas (1 prefill + 1 decode GPU: one node); max: decode at maxReplicas 8
    # (9 GPUs: two 8-GPU nodes, under the NodePool's 4); paused: no GPU pod, no node.
    assert row[:6] == ["gpu", "h100", "p5.48xlarge", "karpenter", "on-demand", "1/2/0"]
    assert row[6:] == [f"{P5:,.2f}", f"{P5:,.2f}", f"{2 * P5:,.2f}", "0.00"]


def test_operating_guide_example_is_the_commands_output():
    doc = (ROOT / "docs" / "operating.md").read_text()
    # The example's prompt line, however the command is spelt (dynamo-stacks or python -m stacks).
    block = (
        re.split(r"^\$ .*stacks cost --stack h100-karpenter\n", doc, maxsplit=1, flags=re.M)[1].split("```", 1)[0].splitlines()
    )
    assert block[:5] == stack_cost("h100-karpenter").splitlines()[:5]


def test_the_paused_config_is_the_stack_with_paused_set_and_nothing_else():
    """What `cost` prices as paused is the stack as an operator pauses it: ``paused: true`` on every entry, autoscaling
    kept (its ScaledObject paused at 0 by KEDA, stacks/serving/autoscaling.py), so its paused column is what a paused
    `up` runs."""
    from stacks.cli.cost import paused_raw
    from stacks.program import build_program
    from stacks.program.render import split_secrets, stack_aws_region, stack_raw_config
    from stacks.serving.autoscaling import PAUSED_REPLICAS, gpus_per_replica

    plain, secret = split_secrets(stack_raw_config("h100-karpenter"))
    assert paused_raw(plain) == {**plain, "paused": True} and "autoscaling" in plain
    serve = {"serve": [{"name": "a", "autoscaling": {"x": {}}}, {"name": "b"}], "autoscaling": {"y": {}}}
    assert paused_raw(serve) == {
        "serve": [{"name": "a", "autoscaling": {"x": {}}, "paused": True}, {"name": "b", "paused": True}],
        "autoscaling": {"y": {}},
    }
    paused = build_program(paused_raw(plain), "h100-karpenter", secret, aws_region=stack_aws_region("h100-karpenter"))
    (so,) = paused.entries[0].plan.autoscalers
    assert so["metadata"]["annotations"] == {PAUSED_REPLICAS: "0"}
    assert not any(gpus_per_replica(c) * c.get("replicas", 1) for c in paused.entries[0].plan.dgd["spec"]["components"])
