"""The Pulumi names of the serving layer's components: one name per object, the same in the single-target form and the
``dynamo:serve`` form of a stack, so that moving between the forms, renaming an entry or reordering the entries changes
no URN at all.

Why this matters: the Kubernetes provider creates with server-side apply, so a resource registered under a new URN
adopts the live object of the same kind, namespace and name, and the engine then deletes the old URN, which deletes
that very object (the live DGD, its ConfigMaps and Jobs). The names therefore follow what identifies the objects in
the cluster (the namespace and the DGD's name), never what only the config knows (which form, an entry's ``name``, its
place in the list):

==================  ==========================================
object              name (both forms)
==================  ==========================================
Serving             ``serving-<namespace>``
DynamoGraph         ``serving-<namespace>-graph-<dgd name>``
image pull Secret   ``pull-secret-<namespace>-<secret name>``
==================  ==========================================

Stacks last updated by earlier versions of this program carry other names, kept as aliases
(https://www.pulumi.com/docs/iac/concepts/options/aliases/; children inherit their parent's aliases when their name
starts with the parent's name, which every name here does): a single-target stack's ``serving`` and ``serving-graph``
(the first namespace's Serving and its first graph answer to them), a serve entry's ``serving-<namespace>-graph-<entry
name>``, and the first namespace's ``pull-secret-<secret name>``. Those aliases know only the order of today's config,
so a stack of an earlier version takes one ``up`` with its config unchanged before it changes form or order
(docs/operating.md, "Changing a live stack").
Pure: the program plan in, names out.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Optional

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
        name = f"serving-{ns}"
        graphs = []
        for i, entry in enumerate(entries):
            dgd = entry.plan.dgd["metadata"]["name"]
            aliases = [f"{name}-graph-{entry.name}"] if program.multi and entry.name != dgd else []
            if index == 0 and i == 0:
                aliases.append("serving-graph")
            graphs.append(GraphName(f"graph-{dgd}", tuple(aliases), entry))
        out.append(ServingName(ns, name, ("serving",) if index == 0 else (), graphs))
    return out


def pull_secret_name(md: dict, first_ns: Optional[str]) -> tuple[str, tuple[str, ...]]:
    """An image pull Secret's resource name, and the name earlier versions gave the first namespace's Secrets."""
    name = f"pull-secret-{md['namespace']}-{md['name']}"
    return name, (f"pull-secret-{md['name']}",) if md["namespace"] == first_ns else ()
