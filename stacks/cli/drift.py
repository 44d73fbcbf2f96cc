"""``python -m stacks drift --upstream DIR``: how far the catalog is from a directory of upstream recipes.

DIR is a Dynamo checkout's ``recipes/`` (or a reference snapshot laid out the same way). Only the model folders DIR
holds are compared, so a partial checkout compares what it has. For those models it lists:

* ADDED: an upstream deploy file no catalog target follows (and that is not a rename of one, below);
* REMOVED: a catalog target whose upstream file DIR lacks;
* RENAMED: a REMOVED target whose recipe DIR now holds under another path (the added file of the same model and
  runtime with the same DGD component types, closest to the target's render, with at most ``RENAME_MAX_FIELDS``
  differing fields; a renamed object counts its name as one field);
* CHANGED: a target whose file DIR holds, with every field that differs (as ``stacks fidelity`` compares them).

A REMOVED target is paired with an added file only when the two agree on GPU product, topology (DGD component types),
speculative method and context length (``signature``); same-folder files that disagree are listed as candidates of an
UNSURE entry, which is drift.

Not drift, listed as such: targets the catalog marks deprecated because upstream dropped them (``Target.successor``),
targets the catalog marks legacy whose file DIR lacks (``Target.legacy``: a layout upstream main replaced, kept on
purpose), and upstream paths the catalog marks renamed (``ModelFamily.renamed_paths``: the old id already resolves to
the new target). Exit 0 when nothing drifted, 1 when anything did, 2 when DIR is missing or holds no catalog model.
"""

from __future__ import annotations

import re
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Optional

from stacks import catalog
from stacks.cli import fidelity

# An added file and a removed target are one recipe under a new name when the render differs in no more fields.
RENAME_MAX_FIELDS = 40


@dataclass
class Drift:
    upstream: Path
    models: list[str]
    added: list[str] = field(default_factory=list)  # upstream paths
    removed: list[tuple[str, str]] = field(default_factory=list)  # (target id, its upstream path)
    renamed: list[tuple[str, str, str, list[str]]] = field(default_factory=list)  # (target id, old path, new path, fields)
    changed: dict[str, tuple[str, list[str]]] = field(default_factory=dict)  # target id -> (path, fields)
    exact: list[str] = field(default_factory=list)  # target ids
    deprecated: list[tuple[str, str, bool]] = field(default_factory=list)  # (target id, successor, file still upstream)
    known_renames: list[tuple[str, str]] = field(default_factory=list)  # (old path, new path) present in DIR
    legacy: list[tuple[str, str, str]] = field(default_factory=list)  # (target id, its path DIR lacks, why it is kept)
    unsure: list[tuple[str, str, list[str]]] = field(default_factory=list)  # (target id, its path, candidate new paths)

    @property
    def drifted(self) -> bool:
        return bool(self.added or self.removed or self.renamed or self.changed or self.unsure)

    def lines(self, shown: Optional[int] = 8) -> list[str]:
        out = [f"drift vs {self.upstream} (model folders compared: {', '.join(self.models)})"]
        out += [f"ADDED upstream, no target: {p}" for p in self.added]
        out += [f"REMOVED upstream: target {tid} follows {p}, which {self.upstream} lacks" for tid, p in self.removed]
        for tid, old, new, fields in self.renamed:
            out.append(f"RENAMED upstream: target {tid}: {old} -> {new}; {len(fields)} field(s) differ" + _fields(fields, shown))
        for tid, (path, fields) in self.changed.items():
            out.append(f"CHANGED {tid} ({path}): {len(fields)} field(s) differ" + _fields(fields, shown))
        out += [
            f"UNSURE: target {tid} follows {p}, which {self.upstream} lacks; same-folder file(s) {', '.join(c)} differ in GPU, "
            f"topology, speculative method or context, so none is taken for its rename"
            for tid, p, c in self.unsure
        ]
        out += [
            f"deprecated (not drift): {tid}: upstream dropped it{'' if present else ' (file gone)'}; successor {succ}"
            for tid, succ, present in self.deprecated
        ]
        out += [f"legacy (not drift): {tid}: {p} is gone upstream; the target {why}" for tid, p, why in self.legacy]
        out += [f"renamed, already followed (not drift): {old} -> {new}" for old, new in self.known_renames]
        verdict = "drifted" if self.drifted else "no drift"
        out.append(
            f"drift: {verdict}: {len(self.added)} added, {len(self.removed)} removed, {len(self.renamed)} renamed, "
            f"{len(self.changed)} changed, {len(self.unsure)} unsure, {len(self.exact)} exact; {len(self.deprecated)} "
            f"deprecated, {len(self.legacy)} legacy and {len(self.known_renames)} known renames listed (not drift)"
        )
        return out


def _fields(fields: list[str], shown: Optional[int]) -> str:
    if not fields:
        return ""
    more = f", ... ({len(fields) - shown} more)" if shown is not None and len(fields) > shown else ""
    return ": " + ", ".join(fields[:shown]) + more


def field_paths(diffs: list[str]) -> list[str]:
    """The field each difference line of ``fidelity.compare_file`` is about (``Kind/name.spec...``), once each."""
    out: list[str] = []
    for d in diffs:
        where = re.split(r": (?:upstream|not upstream|not rendered|list length)", d, maxsplit=1)[0]
        if where not in out:
            out.append(where)
    return out


def _shape(docs: list[dict]) -> list[list]:
    """The DGDs' component types in order: a renamed recipe keeps its topology (Frontend + worker, or prefill + decode)."""
    return [
        [c.get("type") for c in (d.get("spec") or {}).get("components") or []]
        for d in docs
        if d.get("kind") == "DynamoGraphDeployment"
    ]


def _strings(x) -> list[str]:
    """Every string of an object tree; a list of strings also as one space-joined string (flag and value)."""
    if isinstance(x, dict):
        return [s for v in x.values() for s in _strings(v)]
    if isinstance(x, list):
        joined = [" ".join(x)] if x and all(isinstance(v, str) for v in x) else []
        return joined + [s for v in x for s in _strings(v)]
    return [x] if isinstance(x, str) else []


def _gpu_products(x) -> set[str]:
    """The ``nvidia.com/gpu.product`` values a tree selects (node affinity expressions and node selectors)."""
    out: set[str] = set()
    if isinstance(x, dict):
        if x.get("key") == "nvidia.com/gpu.product":
            out |= {str(v) for v in x.get("values") or []}
        if "nvidia.com/gpu.product" in x and isinstance(x["nvidia.com/gpu.product"], str):
            out.add(x["nvidia.com/gpu.product"])
        for v in x.values():
            out |= _gpu_products(v)
    elif isinstance(x, list):
        for v in x:
            out |= _gpu_products(v)
    return out


def signature(docs: list[dict]) -> tuple:
    """What a rename keeps: the GPU products selected, the DGDs' component types, the speculative method(s) (``method``
    in a speculative config) and the context length(s) (``--max-model-len``)."""
    text = [s for d in docs for s in _strings(d)]
    methods = {m for s in text for m in re.findall(r'"method"\s*:\s*"([A-Za-z0-9_-]+)"', s)}
    lengths = {n for s in text for n in re.findall(r"--max-model-len[= ]+(\d+)", s)}
    return (tuple(sorted(_gpu_products(docs))), _shape(docs), tuple(sorted(methods)), tuple(sorted(lengths)))


def _align(upstream_docs: list[dict], rendered: list[dict]) -> tuple[list[dict], list[str]]:
    """Rendered objects with an upstream object's name where that name is not rendered but the only object of its
    kind is (a renamed DGD or ConfigMap): the rest of the object is then compared field by field, and the name is
    one differing field (``Kind/upstream-name.metadata.name``)."""
    import copy

    keys = {fidelity.obj_key(d) for d in rendered}
    out, renames = list(rendered), []
    for d in upstream_docs:
        kind, name = fidelity.obj_key(d)
        if (kind, name) in keys:
            continue
        same = [
            i
            for i, r in enumerate(out)
            if r.get("kind") == kind and fidelity.obj_key(r) not in {fidelity.obj_key(u) for u in upstream_docs}
        ]
        if len(same) == 1:
            r = copy.deepcopy(out[same[0]])
            r["metadata"]["name"] = name
            out[same[0]] = r
            renames.append(f"{kind}/{name}.metadata.name")
    return out, renames


def compare(upstream: Path, render_target: Callable[[str], list[dict]]) -> Drift:
    """The drift between the catalog and the recipes under ``upstream`` (pure apart from reading that tree)."""
    if not upstream.is_dir():
        raise fidelity.ReferenceMissing(f"--upstream {upstream}: no such directory (a Dynamo checkout's recipes/)")
    cat = catalog.targets()
    ours = {t.upstream.split("/")[0] for t in cat.values() if t.upstream}
    models = sorted(d.name for d in upstream.iterdir() if d.is_dir() and d.name in ours)
    if not models:
        raise fidelity.ReferenceMissing(
            f"--upstream {upstream} holds none of the catalog's model folders ({', '.join(sorted(ours))})"
        )
    report = Drift(upstream, models)
    renamed_paths = fidelity.renamed_paths()
    files = [p for p in fidelity.in_scope_files(upstream) if p.split("/")[0] in models]
    mine = [t for t in cat.values() if t.upstream and t.upstream.split("/")[0] in models]
    followed = {t.upstream for t in mine}
    report.known_renames = [
        (old, new) for old, new in sorted(renamed_paths.items()) if old.split("/")[0] in models and (upstream / old).is_file()
    ]
    rendered: dict[str, list[dict]] = {}

    def diffs(t, path: str) -> list[str]:
        if t.id not in rendered:
            rendered[t.id] = render_target(t.id)
        docs = fidelity.load_docs(upstream / path)
        got, renames = _align(docs, rendered[t.id])
        return renames + field_paths(fidelity.compare_file(docs, got, storage_class=None, pull_secrets=()))

    added = [p for p in files if p not in followed]
    missing = []
    for t in sorted(mine, key=lambda t: t.id):
        up = t.upstream
        assert up is not None  # mine: the targets that follow an upstream file
        present = (upstream / up).is_file()
        if t.successor:
            report.deprecated.append((t.id, t.successor, present))
        elif t.legacy and not present:
            report.legacy.append((t.id, up, t.legacy))
        elif not present:
            missing.append(t)
        else:
            fields = diffs(t, up)
            if fields:
                report.changed[t.id] = (up, fields)
            else:
                report.exact.append(t.id)
    for t in missing:
        up = t.upstream
        assert up is not None
        mine_sig = signature(rendered.setdefault(t.id, render_target(t.id)))
        folder = [p for p in added if p.split("/")[:2] == up.split("/")[:2]]
        same = [p for p in folder if signature(fidelity.load_docs(upstream / p)) == mine_sig]
        scored = sorted(((len(diffs(t, p)), p) for p in same))
        if scored and scored[0][0] <= RENAME_MAX_FIELDS:
            path = scored[0][1]
            report.renamed.append((t.id, up, path, diffs(t, path)))
            added.remove(path)
        elif folder and not same:
            near = [p for p in folder if signature(fidelity.load_docs(upstream / p))[1] == mine_sig[1]]
            if near:
                report.unsure.append((t.id, up, near))
            else:
                report.removed.append((t.id, up))
        else:
            report.removed.append((t.id, up))
    report.added = added
    return report


def cmd_drift(args) -> int:
    from stacks.program.render import render_target

    try:
        report = compare(Path(args.upstream), render_target)
    except fidelity.ReferenceMissing as e:
        print(f"error: drift: {e}", file=sys.stderr)
        return 2
    print("\n".join(report.lines(None if args.verbose else 8)))
    return 1 if report.drifted else 0


def add_subparser(sub) -> None:
    d = sub.add_parser(
        "drift",
        help="compare the catalog with a directory of upstream recipes",
        description="Compare the catalog with the recipes/ directory of a Dynamo checkout (only the model "
        "folders it holds). Exit 0 when nothing drifted, 1 when something did, 2 when the "
        "directory is missing or holds none of the catalog's models.",
    )
    d.add_argument(
        "--upstream",
        required=True,
        metavar="DIR",
        help="a Dynamo checkout's recipes/ directory (only the model folders it holds are compared)",
    )
    d.add_argument("-v", "--verbose", action="store_true", help="list every differing field")
    d.set_defaults(fn=cmd_drift)
