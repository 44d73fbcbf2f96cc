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


@pytest.mark.parametrize("tid", FAMILIES)
@pytest.mark.parametrize("entry_name", [None, "chat"])
def test_single_and_serve_forms_answer_to_each_others_names(tid, entry_name):
    ns = "team-a"
    (single,) = serving_names(build_program(_single(tid, ns), "s"))
    entry = {"target": tid, "namespace": ns, **({"name": entry_name} if entry_name else {})}
    serve = serving_names(build_program(_serve(entry, {"target": tid, "namespace": "team-b"}), "s"))
    first = serve[0]
    # Serving: each form's name is an alias of the other's.
    assert single.name in first.aliases and first.name in single.aliases
    # The graph: the serve form's name is one of the single form's aliases and the other way round, whatever the
    # entry's name (the names follow the DGD, which the entry's name does not change).
    (single_graph, single_answers), = _full_names(single).items()
    (serve_graph, serve_answers), = _full_names(first).items()
    assert serve_graph in single_answers and single_graph in serve_answers
    # No name is claimed twice within one form (the engine refuses two resources aliased to one URN).
    claimed = [n for sn in serve for names in _full_names(sn).values() for n in names] + [n for sn in serve for n in (sn.name, *sn.aliases)]
    assert len(claimed) == len(set(claimed))


def test_renaming_an_entry_keeps_its_graph_name():
    tid = FAMILIES[0]
    a = serving_names(build_program(_serve({"target": tid, "namespace": "x", "name": "chat"}), "s"))
    b = serving_names(build_program(_serve({"target": tid, "namespace": "x", "name": "talk"}), "s"))
    assert list(_full_names(a[0])) == list(_full_names(b[0]))
    # the entry-named graph an earlier program registered is an alias, so such a stack keeps its URNs too
    assert "serving-x-graph-chat" in _full_names(a[0])[next(iter(_full_names(a[0])))]


def test_pull_secret_names_alias_the_other_form_only_from_the_single_form():
    md = {"name": "ngc", "namespace": "b"}
    assert pull_secret_name(md, "b", multi=False) == ("pull-secret-ngc", ("pull-secret-b-ngc",))
    assert pull_secret_name(md, "b", multi=True) == ("pull-secret-ngc", ())
    assert pull_secret_name(md, "a", multi=True) == ("pull-secret-b-ngc", ())


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
