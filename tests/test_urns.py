"""URNs are the identity of every resource in state: a rename or a move that changes one makes
Pulumi delete and recreate it (the model cache included). This test pins them; if it fails after
a refactor, add `aliases=[pulumi.Alias(...)]` for the old name/parent rather than letting resources
be replaced. Only an explicit `make golden` (tests/update_golden.py) rewrites the golden files; this
test never writes them."""

from pathlib import Path

import pytest

from harness import run_program

GOLDEN = Path(__file__).parent / "golden"
CASES = {
    "render": {"target": "lightning-vllm-disagg-h100-dspark", "cluster": {"mode": "render"}},
    "eks": {"gpu": "h100", "topology": "disagg", "cluster": {"mode": "eks"}},
    # GB200 on an UltraServer Capacity Block in a Local Zone: the DRA driver release, FSx cache and IMEX objects
    # only this path has (the committed gb200-disagg stack's cluster).
    "eks-gb200": {
        "gpu": "gb200",
        "topology": "disagg",
        "spec": "dspark",
        "fabricProfile": "aws-efa",
        "cluster": {
            "mode": "eks",
            "region": "us-east-1",
            "availabilityZones": ["us-east-1a", "us-east-1b", "us-east-1c"],
            "gpuAvailabilityZone": "us-east-1-dfw-2a",
            "cacheStorage": "fsx-lustre",
            "marketType": "capacity-block",
            "capacityReservationId": "cr-0b200000000000001",
        },
    },
}


def current_urns(case: str) -> list[str]:
    run = run_program(CASES[case], {"hfToken": "hf_x"}, stack="golden")
    return sorted(r.urn for r in run.resources)


@pytest.mark.parametrize("case", sorted(CASES))
def test_urns_are_stable(case):
    urns = current_urns(case)
    expected = (GOLDEN / f"urns-{case}.txt").read_text().split()
    gone, new = sorted(set(expected) - set(urns)), sorted(set(urns) - set(expected))
    assert not gone and not new, (
        "URNs changed (add aliases for renamed/moved resources; if every change is wanted, "
        "`make golden` rewrites the golden files):\n- " + "\n- ".join(gone) + "\n+ " + "\n+ ".join(new)
    )


def test_the_check_never_writes_the_golden_files(tmp_path, monkeypatch):
    """Even with the old UPDATE_GOLDEN variable set, a failing comparison stays failing and the file is unchanged."""
    import test_urns

    monkeypatch.setenv("UPDATE_GOLDEN", "1")
    (tmp_path / "urns-render.txt").write_text("urn:pulumi:golden::dynamo::not:a:Resource::gone\n")
    monkeypatch.setattr(test_urns, "GOLDEN", tmp_path)
    with pytest.raises(AssertionError, match="URNs changed"):
        test_urns.test_urns_are_stable("render")
    assert (tmp_path / "urns-render.txt").read_text() == "urn:pulumi:golden::dynamo::not:a:Resource::gone\n"
