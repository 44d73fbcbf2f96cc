"""Compare what the catalog renders with the upstream Dynamo recipe files.

Each target names the reference snapshot its file is in (``Target.reference``): ``dynamo-recipes`` (ai-dynamo/dynamo
main frozen at 2026-08-21) or ``dynamo-next`` (the newest verifiable upstream files: Nemotron-3-Ultra's final Dynamo
1.6 profiles). The ``dynamo-recipes`` tree is ``$DYNAMO_RECIPES_DIR`` (a Dynamo checkout's ``recipes/``),
else ``$DYNAMO_REFERENCE/dynamo-recipes``, else ``../shared/reference/dynamo-recipes`` next to this repository;
``dynamo-next`` is ``$DYNAMO_NEXT_DIR``, else ``$DYNAMO_REFERENCE/dynamo-next``, else ``../shared/reference/dynamo-next``.
Both are compared with the same strictness. Upstream paths the catalog marks renamed (``ModelFamily.renamed_paths``:
the old id resolves to its successor) are not claimed by any target, so they are out of scope. Objects match when identical once parsed, ignoring
``metadata.namespace``, Pulumi's own annotations/labels, comments and key order,
with the placeholders ``your-storage-class-name`` and ``your-image-pull-secret``
standing for the configured storage class and pull secret.

The DGD's GPU worker containers depart in two recorded ways, each taken back out before comparing and anything else a
difference: the vLLM workers' compile caches on the model-cache volume (``stacks.serving.compile_cache``:
``VLLM_CACHE_ROOT`` and ``TRITON_CACHE_DIR`` with the paths and key the step computes for the target, and the writable
``compile-cache`` mount where the cache is read-only), and every GPU worker's fast startup probe
(``stacks.serving.startup_probe``: ``periodSeconds`` 5, ``timeoutSeconds`` at most 5 and the ``failureThreshold`` that
keeps upstream's period x threshold, exactly ``fast_probe`` of upstream's probe); the report counts the containers of
each (``Report.compile_cache``, ``Report.startup_probe``).

The model-cache Jobs may depart from upstream in exactly two recorded ways, each taken back out before comparing and
anything else a difference: the hardening (``stacks.serving.hardening``) and, when ``dynamo:modelRevision`` is set, the
revision pin of each download Job that takes one (``builders.RevisionPin`` on its ``DownloadJob``: the ``MODEL_REVISION``
env var and the listed script edits). Without a revision the Jobs are upstream's; ``check`` with ``render_pinned``
also compares each pinned download Job and names the ones that carry the pin (``Report.pinned_exact``).
"""

from __future__ import annotations

import copy
import os
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Iterable, Optional

from stacks.catalog import k8s
from stacks.config.keys import ConfigError
from stacks.serving import compile_cache, startup_probe
from stacks.serving.hardening import without_hardening
from stacks.registry import yaml_text

# The revision ``check`` renders the pinned download Jobs with (any valid 40-hex commit: only the departure's shape matters).
PROBE_REVISION = "0123456789abcdef0123456789abcdef01234567"

REPO_ROOT = Path(__file__).resolve().parents[2]

# Named in scope by the serving issue although upstream marks the 3P1D topology superseded.
IN_SCOPE_EXTRA = {
    "motif-3/vllm/disagg-b200-chat/deploy-generic-3p1d-kv.yaml",
    "motif-3/vllm/disagg-b200-chat/deploy-nscale-3p1d-kv.yaml",
}


def reference_root() -> Path:
    return Path(os.environ.get("DYNAMO_REFERENCE", REPO_ROOT.parent / "shared" / "reference"))


def recipes_dir() -> Path:
    env = os.environ.get("DYNAMO_RECIPES_DIR")
    return Path(env) if env else reference_root() / "dynamo-recipes"


SNAPSHOTS = ("dynamo-recipes", "dynamo-next")


def snapshot_dir(snapshot: str) -> Path:
    """Where a reference snapshot's recipe tree is (see the module docstring)."""
    if snapshot == "dynamo-recipes":
        return recipes_dir()
    if snapshot == "dynamo-next":
        env = os.environ.get("DYNAMO_NEXT_DIR")
        return Path(env) if env else reference_root() / "dynamo-next"
    raise ValueError(f"unknown reference snapshot {snapshot!r}; known: {', '.join(SNAPSHOTS)}")


def renamed_paths() -> dict[str, str]:
    """Upstream paths renamed since the frozen snapshot: old -> new (the catalog's ``renamed_paths``)."""
    from stacks.catalog import families

    return {old: new for f in families().values() for old, new in f.renamed_paths.items()}


class ReferenceMissing(RuntimeError):
    """The upstream recipe tree is not there: nothing can be compared (never a pass)."""


def require_reference(ref: Path | None = None) -> Path:
    """The upstream recipe tree, or ``ReferenceMissing`` saying where it was looked for and how to point at it."""
    ref = ref or recipes_dir()
    how = (
        "set DYNAMO_REFERENCE=/path/to/reference (with dynamo-recipes/ and dynamo-next/), or DYNAMO_RECIPES_DIR=/path/to/dynamo/recipes "
        f"and DYNAMO_NEXT_DIR; looked in {ref} (DYNAMO_RECIPES_DIR={os.environ.get('DYNAMO_RECIPES_DIR', '')!r}, "
        f"DYNAMO_NEXT_DIR={os.environ.get('DYNAMO_NEXT_DIR', '')!r}, DYNAMO_REFERENCE={os.environ.get('DYNAMO_REFERENCE', '')!r})"
    )
    if not ref.is_dir():
        raise ReferenceMissing(f"no upstream recipe tree at {ref}: nothing to compare; {how}")
    if not in_scope_files(ref):
        raise ReferenceMissing(f"{ref} holds no upstream deploy file (*/vllm|trtllm/**/deploy*.yaml): nothing to compare; {how}")
    return ref


def index_status(ref: Path) -> dict[str, str]:
    """Path -> status column of INDEX.md (empty when there is no INDEX, as in a Dynamo checkout)."""
    idx = ref / "INDEX.md"
    rows: dict[str, str] = {}
    if not idx.is_file():
        return rows
    for line in idx.read_text().splitlines():
        m = re.match(r"\| `([^`]+)` \|.*\| ([^|]*) \|\s*$", line)
        if m:
            rows[m.group(1)] = m.group(2).strip()
    return rows


def in_scope_files(ref: Path | None = None) -> list[str]:
    """Every DGD-bearing upstream deploy file in scope (superseded names excluded)."""
    ref = ref or recipes_dir()
    status = index_status(ref)
    candidates = set(status) | {str(p.relative_to(ref)) for p in ref.glob("*/*/**/deploy*.yaml")}
    picked = []
    for path in candidates:
        if not re.search(r"/(vllm|trtllm)/.*deploy[^/]*\.yaml$", path) or "/kustomize/" in path:
            continue
        if status.get(path, "").startswith("superseded") and path not in IN_SCOPE_EXTRA:
            continue
        if path in renamed_paths():  # claimed by no target: the old id resolves to the renamed file's target
            continue
        if (ref / path).is_file():
            picked.append(path)
    return sorted(picked)


def load_docs(path: Path) -> list[dict]:
    return [d for d in yaml_text.load_all(path.read_text()) if d]


def obj_key(d: dict) -> tuple[str, str]:
    return (d.get("kind", ""), (d.get("metadata") or {}).get("name", ""))


def substitute_placeholders(doc: Any, storage_class: str | None, pull_secrets: Iterable[str]) -> Any:
    """Upstream placeholders replaced by the configured values (None storage class drops the key)."""
    pulls = [{"name": n} for n in pull_secrets]
    placeholders = storage_class_placeholders()

    def walk(x):
        if isinstance(x, dict):
            out: dict[str, Any] = {}
            for k, v in x.items():
                if k == "storageClassName" and v in placeholders:
                    if storage_class is not None:
                        out[k] = storage_class
                    continue
                if k == "imagePullSecrets" and v == [{"name": k8s.PLACEHOLDER_PULL_SECRET}]:
                    if pulls:
                        out[k] = copy.deepcopy(pulls)
                    continue
                out[k] = walk(v)
            return out
        if isinstance(x, list):
            return [walk(v) for v in x]
        return x

    return walk(doc)


def normalize(doc: dict) -> dict:
    doc = copy.deepcopy(doc)
    md = doc.get("metadata") or {}
    md.pop("namespace", None)
    ann = {k: v for k, v in (md.get("annotations") or {}).items() if not k.startswith("pulumi.com/")}
    md.pop("annotations", None)
    if ann:
        md["annotations"] = ann
    lab = {k: v for k, v in (md.get("labels") or {}).items() if not (k == "app.kubernetes.io/managed-by" and v == "pulumi")}
    md.pop("labels", None)
    if lab:
        md["labels"] = lab
    return doc


def differences(expected: Any, got: Any, where: str = "") -> list[str]:
    """Every difference between two parsed objects, one line each."""
    out: list[str] = []
    if type(expected) is not type(got):
        return [f"{where}: upstream {expected!r:.200} != rendered {got!r:.200}"]
    if isinstance(expected, dict):
        for k in list(expected) + [k for k in got if k not in expected]:
            if k not in got:
                out.append(f"{where}.{k}: upstream {str(expected[k])[:160]}, missing in render")
            elif k not in expected:
                out.append(f"{where}.{k}: not upstream, rendered {str(got[k])[:160]}")
            else:
                out += differences(expected[k], got[k], f"{where}.{k}")
        return out
    if isinstance(expected, list):
        if len(expected) != len(got):
            return [
                f"{where}: list length {len(expected)} != {len(got)}: upstream {str(expected)[:300]} vs rendered {str(got)[:300]}"
            ]
        for i, (a, b) in enumerate(zip(expected, got)):
            out += differences(a, b, f"{where}[{i}]")
        return out
    return [] if expected == got else [f"{where}: upstream {expected!r:.200} != rendered {got!r:.200}"]


def revision_pins() -> list:
    """Every distinct ``builders.RevisionPin`` the catalog's download Jobs carry (the recorded revision departures)."""
    from stacks.catalog import families

    pins: list = []
    for f in families().values():
        for b in f.cache_job_builders.values():
            pin = getattr(b, "revision", None)
            if pin is not None and pin not in pins:
                pins.append(pin)
    return pins


def without_revision_pin(rendered: dict, upstream: dict) -> dict:
    """A rendered Job with a recorded revision pin taken out where it is exactly that pin applied to upstream's Job
    (its listed script edits and one ``MODEL_REVISION`` env entry); anything else stays and shows as a difference."""
    if rendered.get("kind") != "Job" or upstream.get("kind") != "Job":
        return rendered
    out = copy.deepcopy(rendered)
    for pin in revision_pins():
        if pin.undo(out, upstream):
            break
    return out


def without_compile_cache(rendered: dict, upstream: dict, objects: list[dict]) -> tuple[dict, int]:
    """A rendered DGD with exactly the compile-cache additions (``stacks.serving.compile_cache``) of the catalog target
    that renders it taken back out, and the number of containers they were taken from; anything else stays."""
    from stacks.catalog import family_of, targets

    # The targets that may have rendered it: by DGD name, and by the target id the cache paths name (stacks drift
    # compares a render renamed to upstream's DGD name); either way the additions must be exactly that target's.
    name = (rendered.get("metadata") or {}).get("name")
    named = set(re.findall(rf"/{compile_cache.SUBDIR}/([^/\"']+)/", repr(rendered)))
    cat = targets()
    candidates = [(t.id, t.runtime, t.gpu, family_of(t).cache.mount) for t in cat.values() if t.dgd_name == name or t.id in named]
    configmaps = {
        cm_name: d.get("data")
        for d in objects
        if d.get("kind") == "ConfigMap" and (cm_name := (d.get("metadata") or {}).get("name")) is not None
    }
    return compile_cache.without_compile_cache(rendered, upstream, candidates, configmaps)


def without_fast_startup_probe(rendered: dict, upstream: dict) -> tuple[dict, int]:
    """A rendered DGD with upstream's startupProbe back where a GPU worker's is exactly the fast probe of
    ``stacks.serving.startup_probe`` made from it, and the number of those containers; anything else stays."""
    return startup_probe.without_fast_startup_probe(rendered, upstream)


def compare_file(
    upstream: list[dict],
    rendered: list[dict],
    *,
    storage_class: str | None,
    pull_secrets: Iterable[str],
    compiled: Optional[dict[str, int]] = None,
    probed: Optional[dict[str, int]] = None,
) -> list[str]:
    """Differences between the upstream objects of one file and the rendered objects (extra rendered objects are fine).
    ``compiled``: filled with ``Kind/name`` -> the containers the compile-cache additions were taken out of; ``probed``:
    likewise for the fast startup probes."""
    got = {obj_key(d): normalize(d) for d in rendered}
    diffs: list[str] = []
    for d in upstream:
        k = obj_key(d)
        if k not in got:
            diffs.append(f"{k[0]}/{k[1]}: not rendered")
            continue
        want = normalize(substitute_placeholders(d, storage_class, pull_secrets))
        # The Jobs this program hardens and pins: exactly the recorded additions are allowed (stacks/serving/hardening.py,
        # builders.RevisionPin), nothing else.
        # The DGD's vLLM workers: exactly the compile-cache env (and mount) of stacks/serving/compile_cache.py.
        obj, n = without_compile_cache(got[k], want, rendered)
        if n and compiled is not None:
            compiled[f"{k[0]}/{k[1]}"] = n
        # The DGD's GPU workers: exactly the fast startup probe of stacks/serving/startup_probe.py, upstream's budget.
        obj, n = without_fast_startup_probe(obj, want)
        if n and probed is not None:
            probed[f"{k[0]}/{k[1]}"] = n
        diffs += differences(want, without_revision_pin(without_hardening(obj, want), want), f"{k[0]}/{k[1]}")
    return diffs


def storage_class_placeholders() -> set[str]:
    """Every model's storage-class placeholder (per model, as data: ``builders.Cache.storage_class``)."""
    from stacks.catalog import families

    return {k8s.PLACEHOLDER_STORAGE_CLASS} | {f.cache.storage_class for f in families().values() if f.cache.storage_class}


def compare_model_cache(
    ref: Path, render_target, storage_class: str | None = None, pull_secrets: Iterable[str] = (), snapshot: str = "dynamo-recipes"
) -> dict[str, dict[str, list[str]]]:
    """Per model, per ``model-cache/*.yaml``: differences against the union of that model's renders (targets following ``snapshot``)."""
    from stacks.catalog import targets

    out: dict[str, dict[str, list[str]]] = {}
    models = sorted({p.split("/")[0] for p in in_scope_files(ref)})
    for model in models:
        rendered: list[dict] = []
        for t in targets().values():
            if t.upstream and t.reference == snapshot and t.upstream.split("/")[0] == model:
                rendered += render_target(t.id)
        out[model] = {}
        for f in sorted((ref / model / "model-cache").glob("*.yaml")):
            out[model][f"{model}/model-cache/{f.name}"] = compare_file(
                load_docs(f), rendered, storage_class=storage_class, pull_secrets=pull_secrets
            )
    return out


# --------------------------------------------------------------------------- the whole check (python -m stacks fidelity)


@dataclass
class Report:
    """What ``check`` compared and found. ``ok`` only when something was compared and nothing failed."""

    only: Optional[str] = None
    snapshot: str = "dynamo-recipes"
    exact: list[str] = field(default_factory=list)  # upstream paths rendered exactly
    different: dict[str, tuple[str, list[str]]] = field(default_factory=dict)  # path -> (target id, differences)
    no_target: list[str] = field(default_factory=list)  # in-scope upstream files no target renders
    no_upstream: list[tuple[str, str]] = field(default_factory=list)  # (target id, path) whose upstream file is missing
    skipped: list[str] = field(default_factory=list)  # targets of our own (no upstream file): not compared
    cache_exact: list[str] = field(default_factory=list)  # "path#Kind/name" of model-cache objects rendered exactly
    cache_different: dict[str, list[str]] = field(default_factory=dict)
    # With render_pinned: the download Jobs that carry the recorded revision pin and are otherwise exact, and those
    # that differ beyond it.
    pinned_exact: list[str] = field(default_factory=list)
    pinned_different: dict[str, list[str]] = field(default_factory=dict)
    # Upstream deploy file -> the vLLM worker containers exact but for the compile-cache additions.
    compile_cache: dict[str, int] = field(default_factory=dict)
    # Upstream deploy file -> the GPU worker containers exact but for the fast startup probe.
    startup_probe: dict[str, int] = field(default_factory=dict)

    @property
    def files(self) -> int:
        return len(self.exact) + len(self.different) + len(self.no_target) + len(self.no_upstream)

    @property
    def ok(self) -> bool:
        return self.files > 0 and self.files == len(self.exact) and not self.cache_different and not self.pinned_different

    def departures(self) -> Optional[str]:
        """The recorded departures, one line each: the compile caches and the fast startup probes with the count of
        containers that carry them, the revision pin with the Jobs that carry it (None when none was found)."""
        lines = []
        if self.compile_cache:
            lines.append(
                f"compile caches on the model-cache volume: {sum(self.compile_cache.values())} vLLM worker container(s) "
                f"in {len(self.compile_cache)} upstream file(s) exact but for {compile_cache.VLLM_VAR} and "
                f"{compile_cache.TRITON_VAR} (and, where the cache is mounted read-only, its {compile_cache.SUBDIR} "
                f"mount, and the read-only claim source it releases) of stacks.serving.compile_cache"
            )
        if self.startup_probe:
            lines.append(
                f"fast startup probes: {sum(self.startup_probe.values())} GPU worker container(s) in "
                f"{len(self.startup_probe)} upstream file(s) exact but for startupProbe periodSeconds "
                f"{startup_probe.FAST_PERIOD_SECONDS}, timeoutSeconds at most {startup_probe.FAST_PERIOD_SECONDS} and "
                f"upstream's periodSeconds x failureThreshold (stacks.serving.startup_probe)"
            )
        if self.pinned_exact:
            lines.append(
                f"with dynamo:modelRevision: {len(self.pinned_exact)} download Job(s) exact but for the recorded revision pin "
                f"(MODEL_REVISION and the script edits of builders.RevisionPin): {', '.join(self.pinned_exact)}"
            )
        return "\n".join(lines) or None

    def summary(self) -> str:
        cache = len(self.cache_exact) + len(self.cache_different)
        who = f" ({self.only})" if self.only else ""
        who += f" vs {self.snapshot}" if self.snapshot != "dynamo-recipes" else ""
        skipped = (
            f"; skipped {len(self.skipped)} target(s) without an upstream file: {', '.join(self.skipped)}"
            if self.skipped
            else "; skipped: none"
        )
        return (
            f"fidelity{who}: {len(self.exact)}/{self.files} upstream deploy files exact, "
            f"{len(self.cache_exact)}/{cache} model-cache objects exact{skipped}"
        )


def check(
    render_target,
    ref: Path | None = None,
    only: Optional[str] = None,
    *,
    storage_class: Optional[str] = None,
    pull_secrets: Iterable[str] = (),
    snapshot: str = "dynamo-recipes",
    render_pinned: Optional[Callable[[str], list[dict]]] = None,
) -> Report:
    """Compare every target (or only target ``only``) with its upstream file, and the model-cache objects.

    Raises ``ReferenceMissing`` when there is no upstream tree. A target whose upstream file is missing
    and an in-scope upstream file without a target are failures; targets of our own are skipped (listed).
    Only the targets that follow ``snapshot`` (``Target.reference``) are compared, with ``ref`` (default: that
    snapshot's tree). With ``only``, the model-cache objects compared are those the target itself renders. ``storage_class`` and
    ``pull_secrets``: what ``render_target`` configured in place of upstream's placeholders. ``render_pinned``: the same
    render with ``dynamo:modelRevision`` set; each model-cache Job it changes is compared too (``Report.pinned_*``)."""
    from stacks.catalog import targets

    ref = require_reference(ref or snapshot_dir(snapshot))
    cat = targets()
    report = Report(only=only, snapshot=snapshot)
    picked = [cat[only]] if only else [t for t in cat.values() if t.reference == snapshot]
    scope = [] if only else in_scope_files(ref)
    rendered: dict[str, list[dict]] = {}

    def render(tid: str) -> list[dict]:
        if tid not in rendered:
            rendered[tid] = render_target(tid)
        return rendered[tid]

    by_upstream = {t.upstream: t for t in picked if t.upstream}
    for t in sorted(picked, key=lambda t: t.id):
        if not t.upstream:
            report.skipped.append(t.id)
        elif not (ref / t.upstream).is_file():
            report.no_upstream.append((t.id, t.upstream))
    for path in sorted(set(scope) | {p for p in by_upstream if (ref / p).is_file()}):
        target = by_upstream.get(path)
        if target is None:
            report.no_target.append(path)
            continue
        compiled: dict[str, int] = {}
        probed: dict[str, int] = {}
        diffs = compare_file(
            load_docs(ref / path),
            render(target.id),
            storage_class=storage_class,
            pull_secrets=pull_secrets,
            compiled=compiled,
            probed=probed,
        )
        if diffs:
            report.different[path] = (target.id, diffs)
        else:
            report.exact.append(path)
            if compiled:
                report.compile_cache[path] = sum(compiled.values())
            if probed:
                report.startup_probe[path] = sum(probed.values())

    models = sorted({t.upstream.split("/")[0] for t in picked if t.upstream})
    for model in models:
        mine = [t for t in picked if t.upstream and t.upstream.split("/")[0] == model]
        objs = [d for t in mine for d in render(t.id)]
        keys = {obj_key(d) for d in objs}
        for f in sorted((ref / model / "model-cache").glob("*.yaml")):
            for d in load_docs(f):
                k = obj_key(d)
                name = f"{model}/model-cache/{f.name}#{k[0]}/{k[1]}"
                if only and k not in keys:
                    continue  # another target's cache object
                diffs = compare_file([d], objs, storage_class=storage_class, pull_secrets=pull_secrets)
                if diffs:
                    report.cache_different[name] = diffs
                else:
                    report.cache_exact.append(name)
                if render_pinned is None or k[0] != "Job":
                    continue
                owner = next((t for t in mine if any(obj_key(o) == k for o in render(t.id))), None)
                if owner is None:
                    continue
                plain = next(o for o in render(owner.id) if obj_key(o) == k)
                try:
                    pinned = [o for o in render_pinned(owner.id) if obj_key(o) == k]
                except ConfigError:  # the model's download Jobs take no revision: nothing pinned to compare
                    pinned = []
                if pinned and pinned[0] != plain:  # the Job takes the revision
                    diffs = compare_file([d], pinned, storage_class=storage_class, pull_secrets=pull_secrets)
                    if diffs:
                        report.pinned_different[name] = diffs
                    else:
                        report.pinned_exact.append(name)
    return report
