"""URNs are the identity of every resource in state: a rename or a move that changes one makes
Pulumi delete and recreate it (the model cache included). This test pins them; if it fails after
a refactor, add `aliases=[pulumi.Alias(...)]` for the old name/parent (then regenerate with
UPDATE_GOLDEN=1) rather than letting resources be replaced."""
import os
from pathlib import Path

import pytest

from harness import run_program

GOLDEN = Path(__file__).parent / "golden"
CASES = {
    "render": {"target": "lightning-vllm-disagg-h100-dspark", "cluster": {"mode": "render"}},
    "eks": {"gpu": "h100", "topology": "disagg", "cluster": {"mode": "eks"}},
}


@pytest.mark.parametrize("case", sorted(CASES))
def test_urns_are_stable(case):
    run = run_program(CASES[case], {"hfToken": "hf_x"}, stack="golden")
    urns = sorted(r.urn for r in run.resources)
    path = GOLDEN / f"urns-{case}.txt"
    if os.environ.get("UPDATE_GOLDEN"):
        path.write_text("\n".join(urns) + "\n")
    expected = path.read_text().split()
    gone, new = sorted(set(expected) - set(urns)), sorted(set(urns) - set(expected))
    assert not gone and not new, "URNs changed (add aliases for renamed/moved resources):\n- " + "\n- ".join(gone) + "\n+ " + "\n+ ".join(new)
