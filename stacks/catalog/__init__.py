"""The catalog layer: may import the registry only.

The serving catalog: every upstream recipe target as data (see ``model.Target``).

The model families are the data modules named in ``stacks.registry.MODELS``; their pods,
recipes and cache Jobs are built by the generic builders of ``builders.py``.
``recipe_objects(target)`` builds the target's ConfigMap and DynamoGraphDeployment
from its family base plus its deltas; ``cache_objects`` builds the model-cache
PVC (named per model: ``cache_claim``) and the download/validate Jobs the target needs. Both are pure.
"""

from __future__ import annotations

import importlib
from functools import lru_cache
from typing import Optional

from stacks import registry
from stacks.catalog.model import AXES, SELECT_ORDER, ModelFamily, Perf, Target
from stacks.catalog.ops import apply_all


@lru_cache(maxsize=1)
def families() -> dict[str, ModelFamily]:
    """Every model family, from its data module named in ``stacks.registry.MODELS``."""
    out: dict[str, ModelFamily] = {}
    for model in registry.MODELS.values():
        fam = importlib.import_module(model.module).FAMILY
        if fam.id != model.id:
            raise ValueError(f"{model.module}.FAMILY has id {fam.id!r}, but the registry names it {model.id!r}")
        out[fam.id] = fam
    return out


def reload() -> None:
    """Forget the loaded families and targets (after changing ``stacks.registry``, e.g. in a test)."""
    families.cache_clear()
    targets.cache_clear()


class Catalog(dict[str, Target]):
    """Target id -> Target. Iteration, ``len`` and ``items`` cover the catalog's own targets; a lookup by an id
    upstream renamed (``ModelFamily.renamed``) finds its successor, so today's ids keep working (``resolve`` gives
    the warning ``up`` prints for them)."""

    def __init__(self, items, aliases: dict[str, str], respelled: Optional[dict[str, str]] = None):
        super().__init__(items)
        self.aliases = aliases
        self.respelled = dict(respelled or {})

    def __missing__(self, key):
        if key in self.aliases:
            return dict.__getitem__(self, self.aliases[key])
        if key in self.respelled:
            return dict.__getitem__(self, self.respelled[key])
        raise KeyError(key)

    def __contains__(self, key) -> bool:
        return dict.__contains__(self, key) or key in self.aliases or key in self.respelled

    def get(self, key, default=None):
        return self[key] if key in self else default


@lru_cache(maxsize=1)
def targets() -> Catalog:
    out: dict[str, Target] = {}
    aliases: dict[str, str] = {}
    respelled: dict[str, str] = {}
    for fam in families().values():
        for t in fam.targets:
            if t.id in out:
                raise ValueError(f"duplicate catalog target id {t.id!r}")
            out[t.id] = t
        aliases.update(fam.renamed)
        respelled.update(fam.respelled)
    folded: dict[str, str] = {}
    for tid in out:  # render writes <id>.yaml: ids equal but for case would overwrite each other on macOS or Windows
        if tid.lower() in folded:
            raise ValueError(f"catalog target ids {folded[tid.lower()]!r} and {tid!r} differ only by case")
        folded[tid.lower()] = tid
    for old, new in {**aliases, **respelled}.items():
        if old in out:
            raise ValueError(f"renamed id {old!r} is still a catalog target")
        if new not in out:
            raise ValueError(f"renamed id {old!r} names {new!r}, which is not a catalog target")
    return Catalog(out, aliases, respelled)


def renamed() -> dict[str, str]:
    """Ids upstream renamed: old id -> the successor target's id (every successor is a catalog target)."""
    return dict(targets().aliases)


def resolve(tid: str) -> tuple[Optional[Target], Optional[str]]:
    """The target an id names and the warning ``up`` prints for it: a renamed id resolves to its successor
    (warning: the DGD and components are renamed); a deprecated target resolves to itself (warning names the
    successor); an unknown id is (None, None)."""
    cat = targets()
    if tid in cat.respelled:
        t, deprecated = resolve(cat.respelled[tid])
        assert t is not None, f"respelled id {tid!r} names a catalog target (checked by targets())"
        said = (
            f"target {tid!r} is now {t.id!r} (the same recipe, DynamoGraphDeployment {t.dgd_name!r} and objects: the old id "
            f"differed from another target's only by case); set dynamo:target: {t.id}"
        )
        return t, said + (f". {deprecated[0].upper()}{deprecated[1:]}" if deprecated else "")
    if tid in renamed():
        new = cat[tid]
        return new, (
            f"target {tid!r} was renamed upstream to {new.id!r} (Dynamo 1.6 recipe names); this stack now deploys "
            f"{new.id}: DynamoGraphDeployment {new.dgd_name!r}, components {', '.join(component_names(new))} "
            f"(see README 'Upgrading Dynamo'); set dynamo:target: {new.id} to silence this warning"
        )
    if tid not in cat:
        return None, None
    t = cat[tid]
    if t.successor:
        return t, (
            f"target {tid!r} is deprecated: upstream dropped this recipe (it still renders its last published file); "
            f"its successor is {t.successor!r} (see README 'Upgrading Dynamo')"
        )
    if t.legacy:
        return t, (
            f"target {tid!r} {t.legacy}; it still renders that published file, which upstream no longer maintains "
            f"(`dynamo-stacks drift` lists it as legacy)"
        )
    return t, None


def component_names(t: Target) -> list[str]:
    """The DGD component names a target renders."""
    dgd = next(d for d in recipe_objects(t) if d["kind"] == "DynamoGraphDeployment")
    return [c["name"] for c in dgd["spec"]["components"]]


def family_of(t: Target) -> ModelFamily:
    return families()[t.model]


def recipe_objects(t: Target) -> list[dict]:
    """ConfigMap(s) and the DGD for one target, exactly as its upstream file has them."""
    docs = family_of(t).builders[t.family](t)
    return apply_all(docs, t.ops)


def cache_objects(t: Target, size: str | None = None) -> list[dict]:
    """Model-cache PVC plus the Jobs that fill (and validate) it, in run order."""
    fam = family_of(t)
    return [fam.cache.pvc(size)] + [fam.cache_job_builders[name]() for name in t.cache_jobs]


def revision_pins(t: Target) -> dict:
    """Job name -> ``builders.RevisionPin`` for each of the target's cache Jobs that takes ``dynamo:modelRevision``."""
    fam = family_of(t)
    return {name: pin for name in t.cache_jobs if (pin := getattr(fam.cache_job_builders[name], "revision", None)) is not None}


def revision_models() -> list[str]:
    """The models whose download Jobs take ``dynamo:modelRevision`` (from the catalog data: ``DownloadJob.revision``)."""
    return sorted(
        f.id for f in families().values() if any(getattr(b, "revision", None) is not None for b in f.cache_job_builders.values())
    )


def cache_claim(t: Target) -> str:
    """The name of the target's own model-cache PVC (per model: ``shared-model-cache`` for the seed models)."""
    return family_of(t).cache.claim


def gpus_needed(dgd: dict) -> int:
    """Total GPUs the DGD requests: replicas x nvidia.com/gpu over all components."""
    total = 0
    for c in dgd["spec"]["components"]:
        for ctr in c["podTemplate"]["spec"]["containers"]:
            req = (ctr.get("resources") or {}).get("limits") or (ctr.get("resources") or {}).get("requests") or {}
            total += int(c.get("replicas", 1)) * int(req.get("nvidia.com/gpu", 0))
    return total


__all__ = [
    "AXES",
    "SELECT_ORDER",
    "Perf",
    "Target",
    "ModelFamily",
    "targets",
    "families",
    "recipe_objects",
    "cache_objects",
    "cache_claim",
    "revision_pins",
    "revision_models",
    "gpus_needed",
    "reload",
    "renamed",
    "resolve",
    "component_names",
]
