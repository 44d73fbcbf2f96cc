"""Compare what the catalog renders with the upstream Dynamo recipe files.

The upstream tree is ``$DYNAMO_RECIPES_DIR`` (a Dynamo checkout's ``recipes/``),
else ``$DYNAMO_REFERENCE/dynamo-recipes``, else ``../shared/reference/dynamo-recipes``
next to this repository. Objects match when identical once parsed, ignoring
``metadata.namespace``, Pulumi's own annotations/labels, comments and key order,
with the placeholders ``your-storage-class-name`` and ``your-image-pull-secret``
standing for the configured storage class and pull secret.
"""
from __future__ import annotations

import copy
import os
import re
from pathlib import Path
from typing import Any, Iterable

import yaml

from .catalog import k8s

REPO_ROOT = Path(__file__).resolve().parent.parent

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
        if (ref / path).is_file():
            picked.append(path)
    return sorted(picked)


def load_docs(path: Path) -> list[dict]:
    return [d for d in yaml.safe_load_all(path.read_text()) if d]


def obj_key(d: dict) -> tuple[str, str]:
    return (d.get("kind", ""), (d.get("metadata") or {}).get("name", ""))


def substitute_placeholders(doc: Any, storage_class: str | None, pull_secrets: Iterable[str]) -> Any:
    """Upstream placeholders replaced by the configured values (None storage class drops the key)."""
    pulls = [{"name": n} for n in pull_secrets]

    def walk(x):
        if isinstance(x, dict):
            out = {}
            for k, v in x.items():
                if k == "storageClassName" and v == k8s.PLACEHOLDER_STORAGE_CLASS:
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
            return [f"{where}: list length {len(expected)} != {len(got)}: upstream {str(expected)[:300]} vs rendered {str(got)[:300]}"]
        for i, (a, b) in enumerate(zip(expected, got)):
            out += differences(a, b, f"{where}[{i}]")
        return out
    return [] if expected == got else [f"{where}: upstream {expected!r:.200} != rendered {got!r:.200}"]


def compare_file(upstream: list[dict], rendered: list[dict], *, storage_class: str | None, pull_secrets: Iterable[str]) -> list[str]:
    """Differences between the upstream objects of one file and the rendered objects (extra rendered objects are fine)."""
    got = {obj_key(d): normalize(d) for d in rendered}
    diffs: list[str] = []
    for d in upstream:
        k = obj_key(d)
        if k not in got:
            diffs.append(f"{k[0]}/{k[1]}: not rendered")
            continue
        want = normalize(substitute_placeholders(d, storage_class, pull_secrets))
        diffs += differences(want, got[k], f"{k[0]}/{k[1]}")
    return diffs


def compare_model_cache(ref: Path, render_target, storage_class: str | None = None, pull_secrets: Iterable[str] = ()) -> dict[str, dict[str, list[str]]]:
    """Per model, per ``model-cache/*.yaml``: differences against the union of that model's renders."""
    from .catalog import targets

    out: dict[str, dict[str, list[str]]] = {}
    models = sorted({p.split("/")[0] for p in in_scope_files(ref)})
    for model in models:
        rendered: list[dict] = []
        for t in targets().values():
            if t.upstream and t.upstream.split("/")[0] == model:
                rendered += render_target(t.id)
        out[model] = {}
        for f in sorted((ref / model / "model-cache").glob("*.yaml")):
            out[model][f"{model}/model-cache/{f.name}"] = compare_file(load_docs(f), rendered, storage_class=storage_class, pull_secrets=pull_secrets)
    return out
