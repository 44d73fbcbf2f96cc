"""The serving layer's resource names in the two forms of a stack (stacks/program/names.py), and the delete hooks'
messages (stacks/program/retained.py): a stack moves between the single-target form and ``dynamo:serve`` without a URN
change in either direction, and a kept or refused object is named from its own last state."""

from __future__ import annotations

import pytest

from stacks import catalog
from stacks.program import build_program
from stacks.program.names import pull_secret_name, serving_names
from stacks.program.retained import delete_refusal, kept_item, kept_message, object_identity

# One target per model family of the catalog (its first by id), so every family's DGD names are covered.
FAMILIES = sorted({t.model: tid for tid, t in sorted(catalog.targets().items(), reverse=True)}.values())


def _single(tid: str, ns: str) -> dict:
    return {"target": tid, "namespace": ns}


def _serve(*entries: dict) -> dict:
    return {"serve": list(entries)}


def _full_names(sn) -> dict[str, set[str]]:
    """Each graph of a Serving: its full name -> every name it answers to (its own and its aliases)."""
    return {f"{sn.name}-{g.suffix}": {f"{sn.name}-{g.suffix}", *g.aliases} for g in sn.graphs}


def _urn_names(names) -> set[str]:
    return {n for sn in names for n in (sn.name, *_full_names(sn))}


@pytest.mark.parametrize("tid", FAMILIES)
@pytest.mark.parametrize("entry_name", [None, "chat"])
def test_single_and_serve_forms_give_the_same_names(tid, entry_name):
    """The same target in the same namespace has the same resource names in both forms, whatever the entry's name."""
    ns = "team-a"
    single = serving_names(build_program(_single(tid, ns), "s"))
    entry = {"target": tid, "namespace": ns, **({"name": entry_name} if entry_name else {})}
    serve = serving_names(build_program(_serve(entry), "s"))
    assert _urn_names(single) == _urn_names(serve)


@pytest.mark.parametrize("tid", FAMILIES)
def test_earlier_versions_names_are_aliases_of_the_first_namespace(tid):
    """A stack an earlier version of the program last updated: its single-target Serving ``serving`` and graph
    ``serving-graph``, and a serve entry's entry-named graph, are aliases (no name is claimed twice)."""
    serve = serving_names(
        build_program(_serve({"target": tid, "namespace": "a", "name": "chat"}, {"target": tid, "namespace": "b"}), "s")
    )
    first = serve[0]
    assert "serving" in first.aliases
    (answers,) = _full_names(first).values()
    assert {"serving-graph", "serving-a-graph-chat"} <= answers
    claimed = [n for sn in serve for names in _full_names(sn).values() for n in names] + [
        n for sn in serve for n in (sn.name, *sn.aliases)
    ]
    assert len(claimed) == len(set(claimed))


def test_renaming_or_reordering_entries_keeps_every_name():
    a, b = FAMILIES[0], FAMILIES[-1]
    one = serving_names(
        build_program(_serve({"target": a, "namespace": "x", "name": "chat"}, {"target": b, "namespace": "y"}), "s")
    )
    two = serving_names(
        build_program(_serve({"target": b, "namespace": "y"}, {"target": a, "namespace": "x", "name": "talk"}), "s")
    )
    assert _urn_names(one) == _urn_names(two)


def test_pull_secret_names_carry_the_namespace_and_alias_the_earlier_first_namespace_name():
    md = {"name": "ngc", "namespace": "b"}
    assert pull_secret_name(md, "b") == ("pull-secret-b-ngc", ("pull-secret-ngc",))
    assert pull_secret_name(md, "a") == ("pull-secret-b-ngc", ())


def test_kept_item_names_the_object_left_behind_from_its_own_state():
    old_ns = {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "team-old"}}
    item = kept_item(old_ns)
    msg = kept_message(item)
    assert "kept Namespace team-old" in msg and "kubectl delete namespace team-old" in msg
    claim = {"apiVersion": "v1", "kind": "PersistentVolumeClaim", "metadata": {"name": "model-cache", "namespace": "team-old"}}
    msg = kept_message(kept_item(claim))
    assert "team-old/model-cache" in msg and "kubectl delete pvc model-cache -n team-old" in msg
    assert kept_item({"kind": "ConfigMap", "metadata": {"name": "x", "namespace": "y"}}) is None
    assert kept_item({}) is None


def test_delete_refusal_names_the_object_the_old_urn_and_the_way_through():
    ident = object_identity("nvidia.com/v1beta1", "DynamoGraphDeployment", {"name": "dgd", "namespace": "ns"})
    assert ident == ("nvidia.com", "DynamoGraphDeployment", "ns", "dgd")
    assert object_identity("v1", "Namespace", {"name": "ns"}) == ("", "Namespace", "", "ns")
    assert object_identity("v1", "Namespace", {}) is None
    urn = "urn:pulumi:s::p::dynamo:serving:Serving$dynamo:serving:DynamoGraph$kubernetes:nvidia.com/v1beta1:DynamoGraphDeployment::old"
    msg = delete_refusal(urn, ident, "new")
    assert "DynamoGraphDeployment ns/dgd" in msg and repr("new") in msg and f"pulumi state delete '{urn}'" in msg
