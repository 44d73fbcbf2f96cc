"""Review and release: ``python -m stacks diff`` and ``python -m stacks promote``.

``diff`` renders every committed stack (``Pulumi.<name>.yaml``) and every catalog target at
two git refs, each with that ref's own code, and prints what changes per Kubernetes object
(markdown, stable order; ``no changes`` and exit 0 when nothing changes). The pure core is ``diff_objects``.
A target id upstream renamed (``stacks.catalog.renamed``) or a deprecated target and its successor
(``Target.successor``), as either ref's catalog records them, is paired: the target, and a stack that moves
from one to the other, show one ``renamed OLD -> NEW`` entry with the field differences between the two
DGDs, not a removal and an addition.

``promote`` copies the release-pinned keys (target selection, ``fabricProfile``, images, model
revision) from one stack file to another, keeping the destination's environment keys (namespace,
cluster, replicas, storage, secrets...) and its comments. It refuses floating or invalid values
(an image that ``stacks.config.keys.image_problem`` rejects: no tag, a moving tag such as ``latest``,
``nightly`` or ``main``, whitespace; a model revision that is not a valid git name or is a branch)
and a result the program would reject (``stacks.program.build_program``), before printing anything.
Into a staging or production stack (``environment``: a name ending ``-staging`` or ``-prod``, the rule CI applies in
``.github/stack_kind.py``) it records digests, not tags: every DGD container image must carry ``@sha256:<64 hex>``,
whether ``dynamo:images`` names it or the catalog's default does, and ``modelRevision`` must be set (unset, the download
Job fetches the default branch). It cannot resolve a tag to a digest itself (no registry access): the message names the
key, the value and the form to write.
Its output never carries a plain-text value of a secret-looking key (``hfToken``, ``kubeconfig``,
``*token*``, ``*password*``...): such lines are shown redacted.

Both are hand-written on purpose, after measuring the libraries against them: a DeepDiff version of ``diff_values`` was 52
lines against 33 and printed changes grouped by kind, not in document order (86 of 243 sampled
object diffs differed); a ruamel.yaml round trip for ``promoted_text`` saved 2 lines (``_chunks``
stays for redaction) but left the comment above a removed release key behind (24 of 240 pairs of
committed stacks), as ruamel attaches a comment to the key before it.
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

import yaml

from stacks.config.keys import NS, SECRET_KEYS, ConfigError, image_problem, revision_problem
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


def _dgd_names(objs: list[dict]) -> list[str]:
    return [(o.get("metadata") or {}).get("name") for o in objs if o.get("kind") == "DynamoGraphDeployment"]


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
            hit = next(((x, y) for x in sorted(dgd_targets.get((a[rk].get("metadata") or {}).get("name"), ()))
                        for y in sorted(dgd_targets.get((b[ak].get("metadata") or {}).get("name"), ())) if _moved(x, y, moves)), None)
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


def diff_objects(old: dict[str, list[dict]], new: dict[str, list[dict]],
                 moves: Optional[Moves] = None, dgd_targets: Optional[dict[str, set[str]]] = None) -> list[str]:
    """Markdown lines: per group (``stack <name>`` / ``target <id>``, sorted), per ``Kind/name``,
    added / removed objects and ``path: old -> new`` for changed fields. Empty when equal.

    ``moves`` (old target id -> (new target id, why): upstream renames and deprecated targets' successors)
    and ``dgd_targets`` (DGD name -> the target ids that render it) pair what a move removes and adds:
    ``target OLD`` gone and ``target NEW`` new are one ``### target OLD -> NEW`` group, and in any group
    (a stack moving from OLD to NEW) the DGD of OLD removed and the DGD of NEW added are one ``renamed``
    entry with the field differences between them."""
    moves, dgd_targets = moves or {}, dgd_targets or {}
    groups: dict[str, tuple[Optional[list[dict]], Optional[list[dict]]]] = {}
    only_old = {g[len("target "):] for g in old if g.startswith("target ") and g not in new}
    only_new = {g[len("target "):] for g in new if g.startswith("target ") and g not in old}
    paired: set[str] = set()
    for x in sorted(only_old):
        y = next((y for y in sorted(only_new) if y not in paired and _moved(x, y, moves)), None)
        if y is not None:
            paired.add(y)
            groups[f"target {x} -> {y}"] = (old[f"target {x}"], new[f"target {y}"])
    skip = {f"target {g.split(' -> ')[0][len('target '):]}" for g in groups} | {f"target {y}" for y in paired}
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
            x, y = group[len("target "):].split(" -> ")
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
    return sorted(p.name[len("Pulumi."):-len(".yaml")] for p in root.glob("Pulumi.*.yaml"))


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
                    dgd_targets.setdefault(name, set()).add(g[len("target "):])
    return lines + diff_objects(old, new, moves, dgd_targets)


def cmd_diff(args) -> int:
    repo = Path(args.repo or REPO_ROOT).resolve()
    try:
        lines = diff_refs(repo, args.base, args.head)
    except subprocess.CalledProcessError as e:
        print(f"error: {' '.join(map(str, e.cmd))}: {(e.stderr or b'').decode() if isinstance(e.stderr, bytes) else e.stderr}".strip(), file=sys.stderr)
        return 2
    if lines:
        sys.stdout.write("\n".join(lines).rstrip("\n") + "\n")
    else:
        print(f"no changes: every stack and catalog target renders the same at {args.base} and {args.head or 'the working tree'}")
    return 0


# --------------------------------------------------------------------------- promotion

# Keys that belong to an environment and are never copied.
ENV_KEYS = frozenset({"namespace", "createNamespace", "cluster", "replicas", "storage", "hfTokenSecretName",
                      "imagePullSecrets", "kubeconfig", "hfToken", "wait", "observability", "benchmark",
                      # capacity of an environment (stacks/serving/autoscaling.py): staging may be paused while prod serves
                      "paused", "autoscaling",
                      # which namespaces may reach the frontend and scrape it differs per environment
                      "networkPolicy",
                      # where the workers' compile caches live is the environment's storage (stacks/serving/compile_cache.py)
                      "compileCache"})
# Keys a release pins and promotion copies: what selects and shapes the DGD. Every StackConfig key is
# either here or in ENV_KEYS (a test keeps it so), and nothing else is copied: a key the program does
# not know would make the destination fail.
SELECTION_KEYS = ("target", "model", "runtime", "gpu", "topology", "shape", "spec", "routing", "precision",
                  "context", "workload", "fabric", "profile")
# fastStartupProbe shapes the DGD's workers as the recipe keys do: staging and prod run the probes they were promoted with.
RELEASE_KEYS = frozenset(SELECTION_KEYS + ("fabricProfile", "images", "modelRevision", "fastStartupProbe"))

_HEX40 = re.compile(r"[0-9a-f]{40}")
# A version tag (v1.2, 1.2.0-rc1, refs/tags/v1.2) or a number (20250101): a name a release does not move.
_VERSION_TAG = re.compile(r"(refs/tags/)?(v?\d+(\.\d+)*([-+.][0-9A-Za-z.-]+)?)")
# Key names whose values are secrets wherever they appear (a plain-text value is never printed).
_SECRET_NAME = re.compile(r"(token|secret|passw|credential|api[-_]?key|private[-_]?key|kubeconfig)", re.IGNORECASE)
_NOT_SECRET = frozenset({"hfTokenSecretName", "imagePullSecrets"})


def environment(stack: str) -> str:
    """``prod``, ``staging`` or ``dev``: the environment a stack belongs to, by its name, as CI decides it
    (``.github/stack_kind.py`` ``environment``; tests/test_review.py keeps the two in step)."""
    return "prod" if stack.endswith("-prod") else "staging" if stack.endswith("-staging") else "dev"


class PromotionError(ValueError):
    """A floating value or a stack that cannot be promoted; the message names the key and value."""


def image_floating(ref: Any) -> Optional[str]:
    """Why an image reference floats or is invalid (no tag, a moving tag, whitespace), or None when it
    is pinned: the same rule the program applies (``stacks.config.keys.image_problem``)."""
    return image_problem(ref)


def revision_floating(rev: Any) -> Optional[str]:
    """Why a model revision floats, or None for a 40-hex commit, a version tag (``v1.2``,
    ``refs/tags/v1.2``) or a number (``20250101``)."""
    if isinstance(rev, int) and not isinstance(rev, bool):
        rev = str(rev)
    why = revision_problem(rev)
    if why:
        return why
    if _HEX40.fullmatch(rev) or _VERSION_TAG.fullmatch(rev):
        return None
    return "a branch or moving name; pin a 40-hex commit or a version tag"


def secret_like(key: str) -> bool:
    """A key whose value must never be printed in plain text (``hfToken``, ``kubeconfig``, ``*password*``...)."""
    last = str(key).rsplit(":", 1)[-1].rsplit(".", 1)[-1]
    return last not in _NOT_SECRET and (last in SECRET_KEYS or bool(_SECRET_NAME.search(last)))


def _is_secure(v: Any) -> bool:
    return isinstance(v, dict) and set(v) == {"secure"}


REDACTED_PLAIN = "<redacted: plain-text value of a secret key; store it with `pulumi config set --secret`>"


def redact_text(text: str) -> str:
    """The stack file with every plain-text value of a secret-looking key replaced (``secure:`` values kept)."""
    head, entries, tail = _chunks(text)
    out: list[str] = []
    for key, chunk in entries:
        if key and secret_like(key):
            try:
                value = (yaml_text.load("config:\n" + chunk) or {}).get("config", {}).get(key)
            except yaml.YAMLError:
                value = None
            if not _is_secure(value):
                lines = chunk.splitlines(keepends=True)
                first = next(i for i, ln in enumerate(lines) if ln.startswith("  ") and not ln.lstrip().startswith("#"))
                out.append("".join(lines[:first]) + f"  {lines[first].split(':', 1)[0].strip()}: {REDACTED_PLAIN}\n")
                continue
        out.append(_redact_nested(chunk))
    return "".join(head) + "".join(out) + "".join(_redact_nested(t) for t in tail)


_LINE = re.compile(r"^(\s*-?\s*)(['\"]?)([^\s'\":#][^'\":]*)\2:(\s+)(\S.*)$")


def _redact_nested(chunk: str) -> str:
    """Line by line: ``key: value`` lines (at any depth) whose key is secret-looking and whose value is
    not ``secure:`` get the value redacted; a following block (``|``) is dropped."""
    out: list[str] = []
    skip_indent: Optional[int] = None
    for ln in chunk.splitlines(keepends=True):
        indent = len(ln) - len(ln.lstrip())
        if skip_indent is not None:
            if ln.strip() and indent > skip_indent:
                continue
            skip_indent = None
        m = _LINE.match(ln.rstrip("\n"))
        if m and secret_like(m.group(3)) and not m.group(5).startswith(("secure:", "{secure:")):
            if m.group(5).strip() in ("|", ">", "|-", ">-", "|+", ">+"):
                skip_indent = indent
            out.append(f"{m.group(1)}{m.group(2)}{m.group(3)}{m.group(2)}:{m.group(4)}{REDACTED_PLAIN}\n")
        elif m is None and ln.rstrip().endswith(":") and _LINE_KEY.match(ln) and secret_like(_LINE_KEY.match(ln).group(1)):
            skip_indent = indent  # a nested mapping under a secret-looking key: drop its lines
            out.append(ln.rstrip("\n") + f" {REDACTED_PLAIN}\n")
        else:
            out.append(ln)
    return "".join(out)


_LINE_KEY = re.compile(r"^\s*-?\s*['\"]?([^\s'\":#][^'\":]*)['\"]?:\s*$")


def floating_values(cfg: dict[str, Any]) -> list[str]:
    """Messages for every floating release value in a ``dynamo:`` mapping (namespace stripped)."""
    bad: list[str] = []
    images = cfg.get("images") or {}
    if not isinstance(images, dict):
        return [f"{NS}:images = {images!r} is not a mapping of component to image"]
    for comp, img in images.items():
        why = image_floating(img)
        if why:
            bad.append(f"{NS}:images.{comp} = {img!r}: {why}; pin a fixed tag or a digest (@sha256:...)")
    rev = cfg.get("modelRevision")
    if rev is not None:
        for k, v in (rev.items() if isinstance(rev, dict) else [(None, rev)]):
            why = revision_floating(v)
            if why:
                key = f"{NS}:modelRevision" + (f".{k}" if k is not None else "")
                bad.append(f"{key} = {v!r} is floating: {why}")
    for key in sorted(RELEASE_KEYS):
        v = cfg.get(key)
        if isinstance(v, dict) and "secure" in v:
            bad.append(f"{NS}:{key} is a secret (encrypted per stack) and cannot be copied; set it on the target stack")
    return bad


def _digest_fix(key: str, ref: str) -> str:
    name, _, tag = ref.rpartition(":") if ":" in ref.rsplit("/", 1)[-1] else (ref, "", "")
    return (f"set {key}: {name}@sha256:<64 hex> (or {name}:{tag}@sha256:<64 hex>); promote cannot resolve a tag "
            f"to its digest (it has no registry access): read it where the registry is reachable, e.g. "
            f"`crane digest {ref}` or `docker buildx imagetools inspect {ref}`")


def _entry_key_prefix(e) -> str:
    """How the stack file names an entry's keys: ``dynamo:`` for a single-target stack, ``dynamo:serve[<name>].``."""
    return f"{NS}:" if e.key == NS else f"{NS}:serve[{e.name}]."


def unguarded_release(program, env: str) -> list[str]:
    """Messages for what a ``staging``/``prod`` stack on the EKS cluster it creates would leave open: an entry without
    ``networkPolicy.enabled`` (every pod reaches every other and any address), and a public Kubernetes API endpoint
    open to any address (EKS's default ``publicAccessCidrs``, docs/deploy-aws.md "Cluster access")."""
    bad: list[str] = []
    if program.cluster.mode != "eks":
        return bad
    for e in program.entries:
        if not e.cfg.network_policy.enabled:
            prefix = _entry_key_prefix(e)
            bad.append(f"{prefix}networkPolicy.enabled is not true: a {env} stack restricts what each Dynamo pod may reach; "
                       f"set {prefix}networkPolicy: {{enabled: true}}")
    cluster = program.cluster
    if cluster.endpoint_access == "public" and "0.0.0.0/0" in cluster.public_access_cidrs:
        bad.append(f"{NS}:cluster.publicAccessCidrs is {list(cluster.public_access_cidrs)}: a {env} stack's Kubernetes API "
                   f"endpoint accepts connections from any address; list your networks and the deploy runners' egress "
                   f"(e.g. [203.0.113.0/24]) or set {NS}:cluster.endpointAccess: private")
    return bad


def unpinned_release(program, env: str, entries: Optional[set] = None) -> list[str]:
    """Messages for what a ``staging``/``prod`` stack would run without a pin: each DGD container image without a
    digest (named by the ``dynamo:images`` key that sets it, or that would), and an entry without ``modelRevision``.
    ``entries``: in a ``dynamo:serve`` stack, the names of the entries promoted (the others are not checked)."""
    bad: list[str] = []
    for e in program.entries:
        if entries is not None and e.name not in entries:
            continue
        prefix = _entry_key_prefix(e)
        images = dict(e.cfg.images or {})
        for comp in e.plan.dgd["spec"]["components"]:
            for c in comp["podTemplate"]["spec"]["containers"]:
                ref = c.get("image", "")
                if "@" in ref:
                    continue
                set_by = comp["name"] if comp["name"] in images else "*" if "*" in images else None
                key = f"{prefix}images.{set_by or comp['name']}"
                what = f"{key} = {ref!r} is a tag without a digest" if set_by else \
                    f"{key} is not set, so {comp['name']} runs the catalog's {ref!r}, a tag without a digest"
                msg = f"{what}: a {env} stack records image digests; {_digest_fix(key, ref)}"
                if msg not in bad:
                    bad.append(msg)
        if not e.cfg.model_revision:
            bad.append(f"{prefix}modelRevision is not set: the download Job fetches the model's default branch, which moves; "
                       f"a {env} stack records the checkpoint: set it to a 40-hex commit (or a version tag)")
    return bad


def _key_of(full: str) -> Optional[str]:
    return full[len(NS) + 1:] if full.startswith(NS + ":") else None


def _chunks(text: str) -> tuple[list[str], list[tuple[Optional[str], str]], list[str]]:
    """Split a stack file into (lines before ``config:``, config entries as (full key, text), lines after).
    Comments and blank lines before an entry belong to it."""
    lines = text.splitlines(keepends=True)
    start = next((i for i, ln in enumerate(lines) if re.match(r"config:\s*(#.*)?$", ln)), None)
    if start is None:
        return lines, [], []
    end = next((i for i in range(start + 1, len(lines)) if re.match(r"[^\s#]", lines[i])), len(lines))
    head, body, tail = lines[: start + 1], lines[start + 1: end], lines[end:]
    entries: list[tuple[Optional[str], str]] = []
    pending = ""
    for ln in body:
        m = re.match(r"  ([^\s#-]\S*?):(\s|$)", ln)
        if m:
            entries.append((m.group(1).strip("'\""), pending + ln))
            pending = ""
        elif not ln.strip() or ln.lstrip().startswith("#"):
            pending += ln
        elif entries:
            k, t = entries[-1]
            entries[-1] = (k, t + pending + ln)
            pending = ""
        else:
            pending += ln
    if pending:
        entries.append((None, pending))
    return head, entries, tail


def promoted_text(src_text: str, dst_text: str) -> str:
    """The destination stack file with the source's release-pinned entries (verbatim) and its own
    environment and other entries and comments."""
    _, src_entries, _ = _chunks(src_text)
    head, dst_entries, tail = _chunks(dst_text)
    release = [(k, t) for k, t in src_entries if k and _key_of(k) in RELEASE_KEYS]
    for _, t in release:
        if not t.endswith("\n"):
            raise PromotionError("source stack file does not end with a newline")
    keep = [(k, t) for k, t in dst_entries if not (k and _key_of(k) in RELEASE_KEYS)]
    out = "".join(head) + "".join(t for _, t in release) + "".join(t for _, t in keep) + "".join(tail)
    return out


def _config(text: str, name: str = "stack file") -> dict[str, Any]:
    try:
        data = yaml_text.load(text) or {}
    except yaml.YAMLError as e:
        raise PromotionError(f"{name} is not valid YAML: {e}") from None
    cfg = data.get("config") if isinstance(data, dict) else data
    if cfg is None:
        return {}
    if not isinstance(cfg, dict):
        raise PromotionError(f"{name}: {'config' if isinstance(data, dict) else 'the file'} is a {type(cfg).__name__}, "
                             f"not a mapping of {NS}:<key> entries")
    return cfg


def _dynamo(cfg: dict[str, Any]) -> dict[str, Any]:
    return {k[len(NS) + 1:]: v for k, v in cfg.items() if isinstance(k, str) and k.startswith(NS + ":")}


def plan_promotion(src: str, dst: str, root: Path = REPO_ROOT) -> tuple[str, str]:
    """(old text, new text) of the destination stack file; raises PromotionError on floating values."""
    from stacks.program.render import stack_file

    sp, dp = stack_file(src, root), stack_file(dst, root)
    for name, p in ((src, sp), (dst, dp)):
        if not p.is_file():
            raise PromotionError(f"stack {name!r} has no {p.name}; committed stacks: {', '.join(stack_names(root))}")
    if sp == dp:
        raise PromotionError("--from and --to name the same stack")
    src_text, dst_text = sp.read_text(), dp.read_text()
    src_cfg = _dynamo(_config(src_text, sp.name))
    dst_cfg = _dynamo(_config(dst_text, dp.name))
    release = {k: v for k, v in src_cfg.items() if k in RELEASE_KEYS}
    bad = floating_values(release)
    serve = promoted_serve(src, dst, src_cfg, dst_cfg) if "serve" in src_cfg or "serve" in dst_cfg else None
    if serve is not None:
        for entry in serve:
            bad += [b.replace(f"{NS}:", f"{NS}:serve[{entry['name']}].", 1) for b in floating_values(entry)]
    if bad:
        raise PromotionError(f"refusing to promote {src} -> {dst}:\n  " + "\n  ".join(bad))
    new_text = promoted_text(src_text, dst_text)
    if serve is not None:
        new_text = replace_entry(new_text, f"{NS}:serve", serve)
    # The text edit must mean exactly: destination's non-release keys + source's release keys (+ merged entries).
    want = {k: v for k, v in _config(dst_text).items() if _key_of(k) not in RELEASE_KEYS}
    want.update({f"{NS}:{k}": v for k, v in release.items()})
    if serve is not None:
        want[f"{NS}:serve"] = serve
    got = _config(new_text)
    if got != want:
        raise PromotionError(f"internal: promoted {dp.name} does not parse to the expected config: {got!r} != {want!r}")
    ami = promoted_ami_release(src, dst, src_cfg, dst_cfg)
    if ami is not None:
        new_text = set_cluster_key(new_text, "amiReleaseVersion", ami)
        want[f"{NS}:cluster"] = {**dst_cfg["cluster"], "amiReleaseVersion": ami}
        got = _config(new_text)
        if got != want:
            raise PromotionError(f"internal: promoted {dp.name} does not parse to the expected config: {got!r} != {want!r}")
    env = environment(dst)
    if env != "dev":
        try:
            program = _program_raw(_dynamo(got), dst)
        except ConfigError:
            program = None  # cmd_promote refuses a result that would not deploy, with the program's own message
        promoted = {e["name"] for e in src_cfg["serve"]} if serve is not None else None
        bad = (unpinned_release(program, env, promoted) + unguarded_release(program, env)) if program is not None else []
        if bad:
            raise PromotionError(f"refusing to promote {src} -> {dst}:\n  " + "\n  ".join(bad))
    return dst_text, new_text


def promoted_ami_release(src: str, dst: str, src_cfg: dict[str, Any], dst_cfg: dict[str, Any]) -> Optional[str]:
    """The AMI release an EKS destination takes from the source: the source's ``cluster.amiReleaseVersion``, else the
    release this commit pins for the source's Kubernetes version (what the source runs). None when the destination
    builds no EKS cluster. So a staging or prod stack's nodes move to a new AMI only by a promotion, never because the
    registry's pin moved. Refused when the two stacks run different Kubernetes versions (a release is per version)."""
    from stacks.config.eks import ami_release_versions
    from stacks.registry.versions import versions

    dst_cluster, src_cluster = dst_cfg.get("cluster"), src_cfg.get("cluster") or {}
    if not isinstance(dst_cluster, dict) or dst_cluster.get("mode") != "eks" or not isinstance(src_cluster, dict):
        return None
    default = str(versions()["eks"]["kubernetesVersion"])
    src_k8s, dst_k8s = str(src_cluster.get("kubernetesVersion", default)), str(dst_cluster.get("kubernetesVersion", default))
    ami = src_cluster.get("amiReleaseVersion") or ami_release_versions().get(src_k8s)
    if ami is None:
        return None  # the source's own config is refused with its reason when it runs
    if not str(ami).startswith(dst_k8s + "."):
        raise PromotionError(f"refusing to promote {src} -> {dst}: {src}'s AMI release {ami} is for Kubernetes {src_k8s}, and {dst} "
                             f"runs {dst_k8s} ({NS}:cluster.kubernetesVersion); bring {dst} to {src_k8s} first (docs/deploy-aws.md, "
                             f"\"Upgrading Kubernetes\")")
    return str(ami)


def set_cluster_key(text: str, key: str, value: str) -> str:
    """``text`` with ``dynamo:cluster``'s ``key`` set to ``value`` in place (the line replaced, or added after ``mode:``),
    every other line and comment of the stack file as it was."""
    head, entries, tail = _chunks(text)
    out = []
    for k, chunk in entries:
        if k == f"{NS}:cluster":
            lines = chunk.splitlines(keepends=True)
            line = f"    {key}: {value}\n"
            at = next((i for i, ln in enumerate(lines) if re.match(rf"    {key}:", ln)), None)
            if at is not None:
                lines[at] = line
            else:
                mode = next(i for i, ln in enumerate(lines) if re.match(r"    mode:", ln))
                lines.insert(mode + 1, line)
            chunk = "".join(lines)
        out.append((k, chunk))
    return "".join(head) + "".join(c for _, c in out) + "".join(tail)


# In a dynamo:serve entry, what a release changes (what runs) as opposed to where and how much it runs.
ENTRY_RELEASE_KEYS = RELEASE_KEYS | {"overrides"}


def promoted_serve(src: str, dst: str, src_cfg: dict[str, Any], dst_cfg: dict[str, Any]) -> list[dict]:
    """The destination's ``dynamo:serve`` entries with each entry's release keys (target or axes, images,
    modelRevision, fabricProfile, overrides) taken from the source entry of the same ``name``; its
    environment keys (namespace, replicas, storage, wait...) stay. Entries are matched by name, so every
    entry of both stacks needs one; an entry only the source has must first be added to the destination
    with its environment keys (promotion never invents a namespace), one only the destination has stays."""
    entries: dict[str, list[dict]] = {}
    for name, cfg in ((src, src_cfg), (dst, dst_cfg)):
        serve = cfg.get("serve")
        if not isinstance(serve, list):
            raise PromotionError(f"stack {name!r} has no {NS}:serve list; both stacks of a promotion must use {NS}:serve, or neither")
        for i, e in enumerate(serve):
            if not isinstance(e, dict) or not e.get("name"):
                raise PromotionError(f"stack {name!r}: {NS}:serve[{i}] has no name; promotion matches entries by name")
        entries[name] = serve
    by_name = {e["name"]: e for e in entries[src]}
    missing = sorted(set(by_name) - {e["name"] for e in entries[dst]})
    if missing:
        raise PromotionError(f"{NS}:serve entries {', '.join(missing)} of {src!r} are not in {dst!r}: add them there first "
                             f"with their namespace (and replicas), then promote")
    out = []
    for e in entries[dst]:
        s = by_name.get(e["name"])
        if s is None:
            out.append(dict(e))
            continue
        merged = {k: v for k, v in e.items() if k not in ENTRY_RELEASE_KEYS}
        merged.update({k: v for k, v in s.items() if k in ENTRY_RELEASE_KEYS})
        out.append({"name": e["name"], **{k: v for k, v in merged.items() if k != "name"}})
    return out


def replace_entry(text: str, full_key: str, value: Any) -> str:
    """``text`` with the config entry ``full_key`` rewritten as YAML (its leading comments kept)."""
    head, entries, tail = _chunks(text)
    out = []
    for k, t in entries:
        if k == full_key:
            lines = t.splitlines(keepends=True)
            lead = [ln for ln in lines[: next(i for i, ln in enumerate(lines) if ln.startswith(f"  {full_key}:"))]]
            body = yaml.safe_dump({full_key: value}, sort_keys=False, default_flow_style=False, width=4096)
            t = "".join(lead) + "".join("  " + ln for ln in body.splitlines(keepends=True))
        out.append((k, t))
    return "".join(head) + "".join(t for _, t in out) + "".join(tail)


def _program_raw(raw: dict[str, Any], stack: str):
    """The program ``pulumi up`` of ``stack`` would run from this config: the same ``build_program`` (every serving,
    cluster and secret check) that ``up`` and ``render --stack`` run."""
    from stacks.program import build_program
    from stacks.program.render import split_secrets

    plain, secret = split_secrets(raw)
    return build_program(plain, stack, secret)


def _render_raw(raw: dict[str, Any], stack: str) -> list[dict]:
    """The serving objects ``pulumi up`` of ``stack`` would create from this config."""
    return _program_raw(raw, stack).objects()


def cmd_promote(args) -> int:
    from stacks.program.render import stack_file

    root = Path(args.root or REPO_ROOT).resolve()
    try:
        old_text, new_text = plan_promotion(args.src, args.dst, root)
    except PromotionError as e:
        print(f"error: {e}", file=sys.stderr)
        return 1
    path = stack_file(args.dst, root)
    # Refuse a result the program would reject before printing anything (a promotion that cannot deploy).
    try:
        after = _render_raw(_dynamo(_config(new_text)), args.dst)
    except ConfigError as e:
        print(f"error: promoted {path.name} would not deploy: {e}", file=sys.stderr)
        return 2
    if old_text == new_text:
        print(f"{path.name}: already at {args.src}'s release; nothing to promote")
        return 0
    print(f"## {path.name}\n```diff")
    old_shown, new_shown = redact_text(old_text), redact_text(new_text)
    sys.stdout.writelines(difflib.unified_diff(old_shown.splitlines(True), new_shown.splitlines(True), f"a/{path.name}", f"b/{path.name}"))
    print("```\n")
    try:
        before = _render_raw(_dynamo(_config(old_text)), args.dst)
    except ConfigError as e:  # the destination may not render yet (e.g. a first promotion)
        before = []
        print(f"(the current {path.name} does not render: {e})")
    lines = diff_objects({f"stack {args.dst}": before}, {f"stack {args.dst}": after})
    print("## rendered objects")
    print("\n".join(lines) if lines else "(no change to the rendered objects)")
    if args.yes:
        path.write_text(new_text)
        print(f"\nwrote {path.name}")
    else:
        print(f"\ndry run: re-run with --yes to write {path.name}")
    return 0


def add_subparsers(sub) -> None:
    d = sub.add_parser("diff", help="per-object diff of every stack and target between two git refs (markdown)",
                       description="Render every committed stack and catalog target at two git refs, each with that "
                                   "ref's own code, and print what changes per Kubernetes object (markdown).")
    d.add_argument("--base", required=True, help="git ref to compare against, e.g. origin/main")
    d.add_argument("--head", default=None, help="git ref (default: the working tree)")
    d.add_argument("--repo", default=None, help="git repository (default: this checkout)")
    d.set_defaults(fn=cmd_diff)
    p = sub.add_parser("promote", help="copy release-pinned config (selection, images, revisions) from one stack to another",
                       description="Copy the release-pinned keys (target selection, images, model revision) from one "
                                   "committed stack file to another, keeping the destination's environment keys; "
                                   "prints the file and rendered-object diff (a dry run unless --yes).")
    p.add_argument("--from", dest="src", required=True, metavar="STACK", help="the stack whose release to copy, e.g. staging")
    p.add_argument("--to", dest="dst", required=True, metavar="STACK", help="the stack file to update, e.g. prod")
    p.add_argument("--yes", action="store_true", help="write the destination stack file (default: dry run)")
    p.add_argument("--root", default=None, help="directory with the Pulumi.<stack>.yaml files (default: the repo)")
    p.set_defaults(fn=cmd_promote)
