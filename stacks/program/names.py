"""The Pulumi names of the serving layer's components, and the names the same Kubernetes objects have in the other form
of the stack, so that a move between the single-target form and ``dynamo:serve`` is a rename in both directions
(aliases), never a create under a new URN followed by the delete of the old one.

Why this matters: the Kubernetes provider creates with server-side apply, so a resource registered under a new URN
adopts the live object of the same kind, namespace and name, and the engine then deletes the old URN, which deletes
that very object (the live DGD, its ConfigMaps and Jobs). An alias tells the engine both URNs are one resource
(https://www.pulumi.com/docs/iac/concepts/options/aliases/); children inherit their parent's aliases when their name
starts with the parent's name (the SDK's inherited child aliases), which every name below does.

The names follow what identifies the objects in the cluster (the namespace and the DGD's name), not what only the
config knows (an entry's ``name``), so renaming an entry or switching forms keeps every URN:

==================  =========================  ==========================================================
object              single-target form         ``dynamo:serve`` form
==================  =========================  ==========================================================
Serving             ``serving``                ``serving-<namespace>``
DynamoGraph         ``serving-graph``          ``serving-<namespace>-graph-<dgd name>``
image pull Secret   ``pull-secret-<name>``     the first namespace's the same; others ``pull-secret-<ns>-<name>``
==================  =========================  ==========================================================

Each name lists the other form's names as aliases, and a ``dynamo:serve`` graph also the entry-named form
``serving-<namespace>-graph-<entry name>`` that stacks of earlier versions of this program registered.
Pure: the program plan in, names out.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # stacks.program imports this module
    from stacks.program import ProgramPlan


@dataclass(frozen=True)
class GraphName:
    """One DynamoGraph component: its name under its Serving (``<serving>-<suffix>``) and the full names the same graph
    has under the other form (aliases)."""

    suffix: str
    aliases: tuple[str, ...]
    entry: Any  # stacks.serving.serve.Entry


@dataclass(frozen=True)
class ServingName:
    """One Serving component (one per namespace): its name, its other-form names and its graphs."""

    namespace: str
    name: str
    aliases: tuple[str, ...]
    graphs: list[GraphName] = field(default_factory=list)

    @property
    def entries(self) -> list:
        return [g.entry for g in self.graphs]


def serving_names(program: "ProgramPlan") -> list[ServingName]:
    """One ``ServingName`` per serving namespace, in the entries' order (see the module docstring's table)."""
    spaces: dict[str, list] = {}
    for entry in program.entries:
        spaces.setdefault(entry.plan.dgd["metadata"]["namespace"], []).append(entry)
    out = []
    for index, (ns, entries) in enumerate(spaces.items()):
        if not program.multi:
            (entry,) = entries
            dgd = entry.plan.dgd["metadata"]["name"]
            out.append(ServingName(ns, "serving", (f"serving-{ns}",), [GraphName("graph", (f"serving-{ns}-graph-{dgd}",), entry)]))
            continue
        name = f"serving-{ns}"
        graphs = []
        for i, entry in enumerate(entries):
            dgd = entry.plan.dgd["metadata"]["name"]
            aliases = [f"{name}-graph-{entry.name}"] if entry.name != dgd else []
            if index == 0 and i == 0:
                aliases.append("serving-graph")
            graphs.append(GraphName(f"graph-{dgd}", tuple(aliases), entry))
        out.append(ServingName(ns, name, ("serving",) if index == 0 else (), graphs))
    return out


def pull_secret_name(md: dict, first_ns: str, multi: bool) -> tuple[str, tuple[str, ...]]:
    """An image pull Secret's resource name and its other names. The first serving namespace's Secrets keep the
    single-target names (``pull-secret-<name>``), those of other namespaces carry their namespace. A single-target
    stack's Secret may have been a later namespace's in the serve form, so it also answers to that name; within the
    serve form no alias is given (after a reorder, two Secrets would claim one old name)."""
    short, long = f"pull-secret-{md['name']}", f"pull-secret-{md['namespace']}-{md['name']}"
    if md["namespace"] != first_ns:
        return long, ()
    return short, () if multi else (long,)
