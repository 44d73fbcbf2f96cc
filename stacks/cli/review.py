"""Review: ``python -m stacks diff``.

``diff`` renders every committed stack (``Pulumi.<name>.yaml``) and every catalog target at
two git refs, each with that ref's own code, and prints what changes per Kubernetes object
(markdown, stable order; ``no changes`` and exit 0 when nothing changes). The pure core is ``diff_objects``
(also what ``promote``, stacks/cli/promote.py, shows of a promotion's rendered objects).
A target id upstream renamed (``stacks.catalog.renamed``) or a deprecated target and its successor
(``Target.successor``), as either ref's catalog records them, is paired: the target, and a stack that moves
from one to the other, show one ``renamed OLD -> NEW`` entry with the field differences between the two
DGDs, not a removal and an addition.

Hand-written rather than a diff library's output: a reviewer reads the changes in document order, and a general
diff library (DeepDiff) groups them by kind of change.
"""

from __future__ import annotations

import difflib
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any, Optional

from stacks.registry import yaml_text

REPO_ROOT = Path(__file__).resolve().parents[2]

# --------------------------------------------------------------------------- semantic diff (pure)

ABSENT = object()


def _fmt(v: Any) -> str:
    if v is ABSENT:
        return "(absent)"
    if isinstance(v, str):
        return v if v and v.strip() == v and "\n" not in v else json.dumps(v)
    return json.dumps(v, sort_keys=False, separators=(", ", ": "))


def object_key(obj: dict) -> str:
    meta = obj.get("metadata") or {}
    return f"{obj.get('kind', '?')}/{meta.get('name', '?')}"


def _keyed(objs: list[dict]) -> dict[str, dict]:
    """Objects by ``Kind/name`` (``Kind/namespace/name`` when a name repeats across namespaces)."""
    out: dict[str, dict] = {}
    counts: dict[str, int] = {}
    for o in objs:
        counts[object_key(o)] = counts.get(object_key(o), 0) + 1
    for o in objs:
        k = object_key(o)
        if counts[k] > 1:
            meta = o.get("metadata") or {}
            k = f"{o.get('kind', '?')}/{meta.get('namespace', '')}/{meta.get('name', '?')}"
        out[k] = o
    return out


def _named(items: list) -> Optional[dict[str, Any]]:
    """A list of mappings with unique ``name`` keys (components, containers, env, volumes) by name."""
    if not items or not all(isinstance(i, dict) and isinstance(i.get("name"), str) for i in items):
        return None
    names = [i["name"] for i in items]
    return dict(zip(names, items)) if len(set(names)) == len(names) else None


def _groups(args: list) -> list[str]:
    """Scalars grouped as command-line options: ``--flag value...`` per group, other items alone."""
    out: list[list[str]] = []
    for a in args:
        s = a if isinstance(a, str) else _fmt(a)
        if s.startswith("-") and len(s) > 1 and not re.fullmatch(r"-[0-9.]+", s):
            out.append([s])
        elif out and out[-1][0].startswith("-") and len(out[-1]) < 2 and "=" not in out[-1][0]:
            out[-1].append(s)
        else:
            out.append([s])
    return [" ".join(g) for g in out]


def _list_change(path: str, old: list, new: list) -> list[str]:
    a, b = _groups(old), _groups(new)
    sm = difflib.SequenceMatcher(a=a, b=b, autojunk=False)
    parts: list[str] = []
    for tag, i1, i2, j1, j2 in sm.get_opcodes():
        if tag == "equal":
            continue
        parts += [f"- {x}" for x in a[i1:i2]] + [f"+ {x}" for x in b[j1:j2]]
    if not parts:  # same groups, different grouping (rare): fall back to the whole values
        return [f"{path}: {_fmt(old)} -> {_fmt(new)}"]
    return [f"{path}: " + " ".join(parts)]


def _text_change(path: str, old: str, new: str) -> list[str]:
    lines = [f"{path}: (text changed)"]
    for ln in difflib.unified_diff(old.splitlines(), new.splitlines(), lineterm="", n=0):
        if ln.startswith(("---", "+++", "@@")):
            continue
        lines.append(f"    {ln}")
    return lines


def diff_values(old: Any, new: Any, path: str = "") -> list[str]:
    """``path: old -> new`` lines for every difference, named list items by name."""
    if old == new:
        return []
    if isinstance(old, dict) and isinstance(new, dict):
        out: list[str] = []
        for k in list(old) + [k for k in new if k not in old]:
            sub = f"{path}.{k}" if path else str(k)
            out += diff_values(old.get(k, ABSENT), new.get(k, ABSENT), sub)
        return out
    if isinstance(old, list) and isinstance(new, list):
        on, nn = _named(old), _named(new)
        if on is not None and nn is not None:
            out = []
            for k in list(on) + [k for k in nn if k not in on]:
                out += diff_values(on.get(k, ABSENT), nn.get(k, ABSENT), f"{path}[{k}]")
            return out
        if all(not isinstance(x, (dict, list)) for x in old + new):
            if len(old) == len(new) and any(isinstance(x, str) and "\n" in x for x in old + new):
                out = []
                for i, (x, y) in enumerate(zip(old, new)):
                    out += diff_values(x, y, f"{path}[{i}]")
                return out
            return _list_change(path, old, new)
        if len(old) == len(new):
            out = []
            for i, (x, y) in enumerate(zip(old, new)):
                out += diff_values(x, y, f"{path}[{i}]")
            return out
    if isinstance(old, str) and isinstance(new, str) and ("\n" in old or "\n" in new):
        return _text_change(path, old, new)
    return [f"{path}: {_fmt(old)} -> {_fmt(new)}"]


def _field_lines(a: Any, b: Any) -> list[str]:
    return [f"  - `{ln}`" if not ln.startswith("    ") else ln for ln in diff_values(a, b)]


def _name(obj: dict) -> str:
    """An object's metadata.name ("" where it has none)."""
    return (obj.get("metadata") or {}).get("name") or ""


def _dgd_names(objs: list[dict]) -> list[str]:
    return [_name(o) for o in objs if o.get("kind") == "DynamoGraphDeployment"]


# A move: old target id -> (new target id, why), e.g. an id upstream renamed or a deprecated target's successor.
Moves = dict[str, tuple[str, str]]


def _moved(x: str, y: str, moves: Moves) -> bool:
    """``x`` and ``y`` are an old id and its new one, in either direction (a diff may run backwards)."""
    return (moves.get(x) or ("",))[0] == y or (moves.get(y) or ("",))[0] == x


def _why(x: str, y: str, moves: Moves) -> str:
    m = moves.get(x) if (moves.get(x) or ("",))[0] == y else moves.get(y)
    return f": {m[1]}" if m and m[1] else ""


def _object_body(before: list[dict], after: list[dict], moves: Moves, dgd_targets: dict[str, set[str]]) -> list[str]:
    """Added / removed / changed objects of one group; a removed DGD of target X and an added DGD of target Y
    where X -> Y is a move are one ``renamed`` entry with their field differences."""
    a, b = _keyed(before), _keyed(after)
    gone = [k for k in a if k not in b]
    new = [k for k in b if k not in a]
    pairs: dict[str, tuple[str, str, str]] = {}  # removed key -> (added key, old target, new target)
    taken: set[str] = set()
    for rk in gone:
        if a[rk].get("kind") != "DynamoGraphDeployment":
            continue
        for ak in new:
            if ak in taken or b[ak].get("kind") != "DynamoGraphDeployment":
                continue
            hit = next(
                (
                    (x, y)
                    for x in sorted(dgd_targets.get(_name(a[rk]), ()))
                    for y in sorted(dgd_targets.get(_name(b[ak]), ()))
                    if _moved(x, y, moves)
                ),
                None,
            )
            if hit:
                pairs[rk] = (ak, *hit)
                taken.add(ak)
                break
    body: list[str] = []
    for key in list(a) + [k for k in b if k not in a]:
        if key in pairs:
            ak, x, y = pairs[key]
            body.append(f"- **renamed** `{key}` -> `{ak}` (target `{x}` -> `{y}`{_why(x, y, moves)})")
            body += _field_lines(a[key], b[ak])
        elif key in taken:
            continue
        elif key not in b:
            body.append(f"- **removed** `{key}`")
        elif key not in a:
            body.append(f"- **added** `{key}`")
        elif a[key] != b[key]:
            body.append(f"- **changed** `{key}`")
            body += _field_lines(a[key], b[key])
    return body


def diff_objects(
    old: dict[str, list[dict]],
    new: dict[str, list[dict]],
    moves: Optional[Moves] = None,
    dgd_targets: Optional[dict[str, set[str]]] = None,
) -> list[str]:
    """Markdown lines: per group (``stack <name>`` / ``target <id>``, sorted), per ``Kind/name``,
    added / removed objects and ``path: old -> new`` for changed fields. Empty when equal.

    ``moves`` (old target id -> (new target id, why): upstream renames and deprecated targets' successors)
    and ``dgd_targets`` (DGD name -> the target ids that render it) pair what a move removes and adds:
    ``target OLD`` gone and ``target NEW`` new are one ``### target OLD -> NEW`` group, and in any group
    (a stack moving from OLD to NEW) the DGD of OLD removed and the DGD of NEW added are one ``renamed``
    entry with the field differences between them."""
    moves, dgd_targets = moves or {}, dgd_targets or {}
    groups: dict[str, tuple[Optional[list[dict]], Optional[list[dict]]]] = {}
    only_old = {g[len("target ") :] for g in old if g.startswith("target ") and g not in new}
    only_new = {g[len("target ") :] for g in new if g.startswith("target ") and g not in old}
    paired: set[str] = set()
    for x in sorted(only_old):
        y = next((y for y in sorted(only_new) if y not in paired and _moved(x, y, moves)), None)
        if y is not None:
            paired.add(y)
            groups[f"target {x} -> {y}"] = (old[f"target {x}"], new[f"target {y}"])
    skip = {f"target {g.split(' -> ')[0][len('target ') :]}" for g in groups} | {f"target {y}" for y in paired}
    for group in set(old) | set(new):
        if group not in skip:
            groups[group] = (old.get(group), new.get(group))
    lines: list[str] = []
    for group in sorted(groups):
        before, after = groups[group]
        if before == after:
            continue
        body: list[str] = []
        if " -> " in group and group.startswith("target "):
            x, y = group[len("target ") :].split(" -> ")
            body.append(f"- **renamed** target `{x}` -> `{y}`{_why(x, y, moves)}")
        elif before is None:
            body.append("group added")
        elif after is None:
            body.append("group removed")
        body += _object_body(before or [], after or [], moves, dgd_targets)
        if body:
            lines.append(f"### {group}")
            lines += body
            lines.append("")
    return lines


# --------------------------------------------------------------------------- rendering at a git ref


def _git(repo: Path, *args: str, **kw) -> subprocess.CompletedProcess:
    return subprocess.run(["git", "-C", str(repo), *args], check=True, capture_output=True, text=True, **kw)


def export_ref(repo: Path, ref: str, dest: Path) -> Path:
    """The tree of ``ref`` extracted to ``dest`` (``git archive``: leaves no worktree behind)."""
    dest.mkdir(parents=True, exist_ok=True)
    sha = _git(repo, "rev-parse", "--verify", f"{ref}^{{commit}}").stdout.strip()
    archive = subprocess.run(["git", "-C", str(repo), "archive", "--format=tar", sha], check=True, capture_output=True)
    subprocess.run(["tar", "-x", "-C", str(dest)], input=archive.stdout, check=True)
    return dest


def stack_names(root: Path) -> list[str]:
    return sorted(p.name[len("Pulumi.") : -len(".yaml")] for p in root.glob("Pulumi.*.yaml"))


def _run_render(src: Path, args: list[str]) -> subprocess.CompletedProcess:
    env = dict(os.environ, PYTHONPATH=str(src), PYTHONDONTWRITEBYTECODE="1")
    return subprocess.run([sys.executable, "-m", "stacks", "render", *args], cwd=src, env=env, capture_output=True, text=True)


def _load(path: Path) -> list[dict]:
    return [d for d in yaml_text.load_all(path.read_text()) if d is not None]


def render_tree(src: Path, out: Path) -> tuple[dict[str, list[dict]], dict[str, str]]:
    """Every stack and every catalog target of the source tree ``src``, rendered by its own code.
    Returns (objects by group, render errors by group)."""
    objs: dict[str, list[dict]] = {}
    errors: dict[str, str] = {}
    tdir = out / "targets"
    out.mkdir(parents=True, exist_ok=True)  # render --out wants an existing parent
    r = _run_render(src, ["--all", "--out", str(tdir)])
    if r.returncode != 0:
        text = (r.stderr or r.stdout).strip()
        errors["targets"] = text.splitlines()[-1] if text else f"exit {r.returncode}"
    else:
        for f in sorted(tdir.glob("*.yaml")):
            objs[f"target {f.stem}"] = _load(f)
    sdir = out / "stacks"
    sdir.mkdir(parents=True, exist_ok=True)

    def one(name: str):
        return name, _run_render(src, ["--stack", name, "--out", str(sdir / f"{name}.yaml")])

    from concurrent.futures import ThreadPoolExecutor

    with ThreadPoolExecutor(max_workers=min(8, os.cpu_count() or 2)) as pool:
        for name, r in pool.map(one, stack_names(src)):
            if r.returncode == 0:
                objs[f"stack {name}"] = _load(sdir / f"{name}.yaml")
            else:
                text = (r.stderr or r.stdout).strip()
                errors[f"stack {name}"] = text.splitlines()[-1] if text else f"exit {r.returncode}"
    return objs, errors


# Run with the tree's own code: the moves its catalog records (a tree from before the catalog had them: none).
_MOVES_SCRIPT = """
import json, os
out = {}
try:
    from stacks import catalog
    if not os.path.realpath(catalog.__file__).startswith(os.path.realpath(os.getcwd()) + os.sep):
        raise ImportError("stacks.catalog is not the tree's own (an installed copy)")
    cat = catalog.targets()
    for old, new in (getattr(cat, "aliases", None) or {}).items():
        out[old] = [new, "renamed upstream, the old id resolves to the new one"]
    for tid, t in dict.items(cat):
        if getattr(t, "successor", None):
            out.setdefault(tid, [t.successor, "deprecated, upstream dropped it; the new one is its successor"])
except Exception:
    pass
print(json.dumps(out))
"""


def catalog_moves(src: Path) -> Moves:
    """Old target id -> (new id, why) as the catalog of the source tree ``src`` records them: ids upstream
    renamed (``stacks.catalog.renamed``) and deprecated targets' successors (``Target.successor``)."""
    env = dict(os.environ, PYTHONPATH=str(src), PYTHONDONTWRITEBYTECODE="1")
    r = subprocess.run([sys.executable, "-c", _MOVES_SCRIPT], cwd=src, env=env, capture_output=True, text=True)
    try:
        return {k: (v[0], v[1]) for k, v in json.loads(r.stdout or "{}").items()}
    except (ValueError, TypeError, IndexError):
        return {}


def render_ref(repo: Path, ref: Optional[str], work: Path) -> tuple[dict[str, list[dict]], dict[str, str], Moves]:
    """Render at ``ref`` (``None``: the working tree of ``repo``); also the moves its catalog records."""
    src = repo if ref is None else export_ref(repo, ref, work / "src")
    from concurrent.futures import ThreadPoolExecutor

    with ThreadPoolExecutor(max_workers=1) as pool:
        moves = pool.submit(catalog_moves, src)
        objs, errors = render_tree(src, work / "out")
        return objs, errors, moves.result()


def diff_refs(repo: Path, base: str, head: Optional[str] = None) -> list[str]:
    tmp = Path(tempfile.mkdtemp(prefix="stacks-diff-"))
    from concurrent.futures import ThreadPoolExecutor

    try:
        with ThreadPoolExecutor(max_workers=2) as pool:
            fb = pool.submit(render_ref, repo, base, tmp / "base")
            fh = pool.submit(render_ref, repo, head, tmp / "head")
            (old, old_err, old_moves), (new, new_err, new_moves) = fb.result(), fh.result()
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    lines: list[str] = []
    for group in sorted(set(old_err) | set(new_err)):
        if old_err.get(group) == new_err.get(group):
            continue
        lines.append(f"### {group}")
        if group in old_err:
            lines.append(f"- render failed at base `{base}`: {old_err[group]}")
        if group in new_err:
            lines.append(f"- render failed at head `{head or 'working tree'}`: {new_err[group]}")
        lines.append("")
    # A group that fails on one side only is reported above, not as "all objects removed/added".
    for group in set(old_err) | set(new_err):
        old.pop(group, None)
        new.pop(group, None)
        if group == "targets":
            for side in (old, new):
                for g in [g for g in side if g.startswith("target ")]:
                    side.pop(g)
    # Either catalog may know a move (a diff can run backwards); the DGD each target renders at either ref.
    moves = {**old_moves, **new_moves}
    dgd_targets: dict[str, set[str]] = {}
    for side in (old, new):
        for g, objs in side.items():
            if g.startswith("target "):
                for name in _dgd_names(objs):
                    dgd_targets.setdefault(name, set()).add(g[len("target ") :])
    return lines + diff_objects(old, new, moves, dgd_targets)


def cmd_diff(args) -> int:
    repo = Path(args.repo or REPO_ROOT).resolve()
    try:
        lines = diff_refs(repo, args.base, args.head)
    except subprocess.CalledProcessError as e:
        print(
            f"error: {' '.join(map(str, e.cmd))}: {(e.stderr or b'').decode() if isinstance(e.stderr, bytes) else e.stderr}".strip(),
            file=sys.stderr,
        )
        return 2
    if lines:
        sys.stdout.write("\n".join(lines).rstrip("\n") + "\n")
    else:
        print(f"no changes: every stack and catalog target renders the same at {args.base} and {args.head or 'the working tree'}")
    return 0


def add_subparser(sub) -> None:
    d = sub.add_parser(
        "diff",
        help="per-object diff of every stack and target between two git refs (markdown)",
        description="Render every committed stack and catalog target at two git refs, each with that "
        "ref's own code, and print what changes per Kubernetes object (markdown).",
    )
    d.add_argument("--base", required=True, help="git ref to compare against, e.g. origin/main")
    d.add_argument("--head", default=None, help="git ref (default: the working tree)")
    d.add_argument("--repo", default=None, help="git repository (default: this checkout)")
    d.set_defaults(fn=cmd_diff)
