"""``simulate --stack`` builds its scenario from the program ``up`` runs (``program_for_stack``), so every committed stack
has one: a ``dynamo:serve`` stack places the pods of every entry, a cluster-only stack is refused by name. No cluster is
needed to build a scenario."""

from __future__ import annotations

from pathlib import Path

import pytest

from stacks.cli.shell import CliError
from stacks.cli.simulate import stack_scenario
from stacks.program.render import program_for_stack

ROOT = Path(__file__).resolve().parent.parent
STACKS = sorted(p.name[len("Pulumi.") : -len(".yaml")] for p in ROOT.glob("Pulumi.*.yaml"))


@pytest.mark.parametrize("stack", STACKS)
def test_every_committed_stack_has_a_scenario_of_all_its_entries(stack):
    program = program_for_stack(stack)
    if not program.entries:
        with pytest.raises(CliError, match=f"stack {stack} is a cluster-only stack"):
            stack_scenario(stack)
        return
    sc = stack_scenario(stack)
    components = {it.component for it in sc.intents}
    for e in program.entries:
        assert e.plan.target.id in sc.title
        # every component of each entry's final DGD has its pods in the scenario
        assert {c["name"] for c in e.plan.dgd["spec"]["components"]} <= components, (e.name, components)
    jobs = sum(1 for e in program.entries for o in e.plan.jobs if o["kind"] == "Job")
    assert sum(1 for it in sc.intents if it.component.startswith("Job/")) == jobs
    assert sc.nodes, stack


def test_a_serve_stack_is_no_longer_refused_as_an_unknown_key():
    serve = [s for s in STACKS if program_for_stack(s).multi]
    assert serve, "the repository commits a dynamo:serve stack"
    for s in serve:
        assert len({it.component for it in stack_scenario(s).intents}) > 1
