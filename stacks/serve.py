"""Several recipe targets in one stack (``dynamo:serve``), sharing one cluster and their model caches.

``dynamo:serve`` is a list of entries. Each entry takes the same keys as a single-target stack
(``target`` or the axes, ``namespace``, ``replicas``, ``images``, ``storage``, ``wait``...) plus
``name`` and ``overrides``; keys set at the top level are every entry's defaults. Entries whose
download Jobs fetch the same checkpoint into the same namespace share one cache PVC and one
download; other entries get their own, in their own namespace (a PersistentVolumeClaim is
namespaced, and the recipes name every model's cache claim and download Job alike).

``overrides`` tune a component without forking the catalog::

    overrides:
      decode:
        args: {set: {--max-num-seqs: "64"}, append: [--enforce-eager], remove: [--async-scheduling]}
        env: {VLLM_LOGGING_LEVEL: DEBUG}
        resources: {limits: {memory: 400Gi}}

All pure: config in, serving plans out.
"""
from __future__ import annotations

import copy
import hashlib
import json
import re
from dataclasses import dataclass, field
from typing import Any, Optional

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator

from .config import NS, ConfigError
from .serving import ServingPlan, build_plan

SERVE = "serve"
# Keys that belong to the stack, not to an entry.
STACK_KEYS = frozenset({"cluster", "kubeconfig", "hfToken", "ngcApiKey", "imagePullSecret", SERVE, "observability", "benchmark"})
ENTRY_ONLY = frozenset({"name", "overrides"})
_NAME = re.compile(r"[a-z0-9]([-a-z0-9]{0,38}[a-z0-9])?")
_NOT_PER_ENTRY = ("cluster", "hfToken", "kubeconfig", "ngcApiKey", "imagePullSecret", SERVE)


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class ArgsOverride(_Strict):
    """Engine arguments: ``set`` replaces a flag's value (the flag must exist), ``append`` adds tokens,
    ``remove`` drops a flag and its value."""

    set: dict[str, str] = Field(default_factory=dict)
    append: list[str] = Field(default_factory=list)
    remove: list[str] = Field(default_factory=list)

    @field_validator("set", "remove")
    @classmethod
    def _flags(cls, v):
        for flag in v:
            if not str(flag).startswith("-"):
                raise ValueError(f"{flag!r} is not a flag (flags start with '-')")
        return v


class ResourcesOverride(_Strict):
    limits: dict[str, str] = Field(default_factory=dict)
    requests: dict[str, str] = Field(default_factory=dict)

    @field_validator("limits", "requests")
    @classmethod
    def _quantities(cls, v):
        from .config import quantity_bytes

        for k, q in v.items():
            if isinstance(q, bool):
                raise ValueError(f"{k}: {q!r} is a boolean, not a quantity")
            try:
                n = quantity_bytes(str(q))
                if n < 0:
                    raise ValueError(f"{q!r} is negative")
            except ValueError as e:
                raise ValueError(f"{k}: {e}") from None
            # Extended resources (a domain-prefixed name such as nvidia.com/gpu or vpc.amazonaws.com/efa) are counted in
            # whole units: the API server refuses a quantity whose milli-value is not a multiple of 1000
            # (kubernetes/kubernetes pkg/apis/core/helper/helpers.go IsIntegerResourceName: every extended resource;
            # pkg/apis/core/validation ValidateResourceQuantityValue: "must be an integer").
            if "/" in str(k) and not str(k).startswith("kubernetes.io/") and n != n.to_integral_value():
                raise ValueError(f"{k}: {q!r} is not a whole number; {k} is an extended resource, counted in whole units "
                                 f"(a GPU cannot be split by a request); use 0, 1, 2...")
        return v


class ComponentOverride(_Strict):
    args: ArgsOverride = Field(default_factory=ArgsOverride)
    env: dict[str, str] = Field(default_factory=dict)
    resources: ResourcesOverride = Field(default_factory=ResourcesOverride)

    @field_validator("env")
    @classmethod
    def _env_names(cls, v):
        for k in v:
            if not re.fullmatch(r"[A-Za-z_][A-Za-z0-9_.-]*", k):
                raise ValueError(f"{k!r} is not an environment variable name")
        return v


@dataclass
class Entry:
    """One serving entry: its stable name, where its errors point, and its validated plan."""

    name: str
    key: str  # "dynamo:serve[1]" (or "dynamo" for a single-target stack)
    raw: dict[str, Any]
    plan: ServingPlan
    cache_key: str = ""
    owns_cache: bool = True  # False: another entry's PVC and download serve this one
    cache_owner: str = ""
    owns_namespace: bool = True
    owns_secret: bool = True
    namespace_owner: str = ""  # the entry that creates the namespace and HF token Secret this one uses
    overrides: dict[str, ComponentOverride] = field(default_factory=dict)
    cfg: Any = None  # the entry's StackConfig


def entry_prefix(message: str, key: str) -> str:
    """Point a ConfigError about per-entry keys at the entry: ``dynamo:gpu`` -> ``dynamo:serve[1].gpu``."""
    skip = "|".join(_NOT_PER_ENTRY)
    return re.sub(rf"(?<![\w.\[]){NS}:(?!(?:{skip})\b)(?=[A-Za-z])", f"{key}.", message.replace(f"{NS}: ", f"{key}: "))


# Dynamo 1.6.0 renamed the vLLM services (breaking change "vLLM worker services renamed",
# https://docs.nvidia.com/dynamo/v1.6.0/reference/releases/deprecations; the Ultra recipes under their
# final names use them: ../shared/reference/dynamo-next/INDEX.md): an override keyed by the old name is refused
# with the new one, before any resource.
RENAMED_COMPONENTS = {"VllmWorker": "worker", "VllmPrefillWorker": "prefill", "VllmDecodeWorker": "decode"}


def _parse_override(raw: Any, key: str, components: list[str]) -> dict[str, ComponentOverride]:
    if raw is None:
        return {}
    if not isinstance(raw, dict):
        raise ConfigError(f"{key}.overrides: {raw!r} is not a mapping of component name to override")
    out = {}
    for comp, body in raw.items():
        new = RENAMED_COMPONENTS.get(comp)
        if comp not in components and new in components:
            raise ConfigError(f"{key}.overrides.{comp}: component {comp!r} was renamed {new!r} in Dynamo 1.6 (this target's recipe uses "
                              f"the new names); key the override {new!r}; components: {', '.join(components)}")
        if comp not in components:
            from difflib import get_close_matches

            near = get_close_matches(str(comp), components, n=1)
            hint = f" (did you mean {near[0]!r}?)" if near else ""
            raise ConfigError(f"{key}.overrides.{comp}: component {comp!r} is not in this target{hint}; components: {', '.join(components)}")
        try:
            out[comp] = ComponentOverride.model_validate(body or {})
        except ValidationError as e:
            lines = []
            for err in e.errors():
                where = ".".join(str(p) for p in err["loc"])
                msg = err["msg"].removeprefix("Value error, ")
                if err["type"] == "extra_forbidden":
                    msg = "unknown key; valid keys: " + {"": "args, env, resources", "args": "set, append, remove",
                                                        "resources": "limits, requests"}.get(".".join(str(p) for p in err["loc"][:-1]), "")
                lines.append(f"{key}.overrides.{comp}.{where}: {msg} (got {err.get('input')!r})")
            raise ConfigError("invalid stack config:\n  " + "\n  ".join(lines)) from None
    return out


def _flag_index(args: list, flag: str) -> Optional[int]:
    for i, a in enumerate(args):
        if a == flag or (isinstance(a, str) and a.startswith(flag + "=")):
            return i
    return None


def _takes_value(args: list, i: int) -> bool:
    return "=" not in str(args[i]) and i + 1 < len(args) and not str(args[i + 1]).startswith("-")


def apply_overrides(dgd: dict, overrides: dict[str, ComponentOverride], key: str) -> None:
    """Change the named components' engine container in place (the container that runs the engine:
    ``main``, else the first)."""
    for comp in dgd["spec"]["components"]:
        ov = overrides.get(comp["name"])
        if not ov:
            continue
        where = f"{key}.overrides.{comp['name']}"
        containers = comp["podTemplate"]["spec"]["containers"]
        c = next((x for x in containers if x.get("name") == "main"), containers[0])
        args = list(c.get("args") or [])
        if (ov.args.set or ov.args.remove) and any(a in ("-c", "-lc") for a in (c.get("command") or []) + args[:1]):
            raise ConfigError(f"{where}.args: the component runs a shell script, so flags cannot be set or removed; use args.append")
        for flag, value in ov.args.set.items():
            i = _flag_index(args, flag)
            if i is None:
                raise ConfigError(f"{where}.args.set: {flag!r} is not among the component's arguments; use args.append to add it")
            if "=" in str(args[i]):
                args[i] = f"{flag}={value}"
            elif _takes_value(args, i):
                args[i + 1] = value
            else:
                args.insert(i + 1, value)
        for flag in ov.args.remove:
            i = _flag_index(args, flag)
            if i is None:
                raise ConfigError(f"{where}.args.remove: {flag!r} is not among the component's arguments")
            del args[i:i + (2 if _takes_value(args, i) else 1)]
        args += list(ov.args.append)
        if ov.args.set or ov.args.remove or ov.args.append:
            c["args"] = args
        if ov.env:
            env = c.setdefault("env", [])
            for name, value in ov.env.items():
                existing = next((e for e in env if e.get("name") == name), None)
                if existing is not None:
                    existing.pop("valueFrom", None)
                    existing["value"] = value
                else:
                    env.append({"name": name, "value": value})
        for kind in ("limits", "requests"):
            values = getattr(ov.resources, kind)
            if values:
                c.setdefault("resources", {}).setdefault(kind, {}).update(values)
                if kind == "limits" and "nvidia.com/gpu" in values:
                    c["resources"].setdefault("requests", {})["nvidia.com/gpu"] = values["nvidia.com/gpu"]


def cache_identity(plan: ServingPlan) -> str:
    """Entries whose download Jobs are the same (same checkpoint, revision, claim) share one cache."""
    jobs = []
    for j in plan.jobs:
        j = copy.deepcopy(j)
        j["metadata"].pop("annotations", None)
        jobs.append(j)
    blob = json.dumps({"claim": plan.claim_name, "ns": plan.dgd["metadata"]["namespace"], "jobs": jobs}, sort_keys=True)
    return hashlib.sha256(blob.encode()).hexdigest()[:12]


def entry_configs(raw: dict[str, Any]) -> list[tuple[str, dict[str, Any]]]:
    """``(error key, entry config)`` per entry: the stack's top-level serving keys are the defaults."""
    entries = raw.get(SERVE)
    if "name" in raw:  # an entry's name; at the top level it would name nothing (or every entry alike)
        raise ConfigError(f"{NS}:name: {raw['name']!r} names a {NS}:serve entry and has no effect at the top level; "
                          f"set it inside an entry ({NS}:serve[0].name), or remove it (a single-target stack is named by its stack)")
    defaults = {k: v for k, v in raw.items() if k not in STACK_KEYS}
    if entries is None:
        return [(NS, dict(raw))]
    if entries == [] and isinstance(raw.get("cluster"), dict) and raw["cluster"].get("mode") == "eks":
        return []  # a cluster-only stack (stacks/program.py checks it sets nothing to serve)
    if not isinstance(entries, list) or not entries:
        raise ConfigError(f"{NS}:{SERVE}: {entries!r} is not a non-empty list of serving entries (each a mapping with target or axes); "
                          f"an empty list is a cluster-only stack, which needs {NS}:cluster.mode: eks")
    out = []
    for i, e in enumerate(entries):
        key = f"{NS}:{SERVE}[{i}]"
        if not isinstance(e, dict):
            raise ConfigError(f"{key}: {e!r} is not a mapping (target or axes, namespace, replicas, images, overrides...)")
        bad = sorted(set(e) & STACK_KEYS)
        if bad:
            raise ConfigError(f"{key}.{bad[0]}: is a stack-wide key; set it once at the top level ({NS}:{bad[0]})")
        merged = {**defaults, **e}
        for sub in ("storage", "wait"):  # mappings merge key by key
            if isinstance(defaults.get(sub), dict) and isinstance(e.get(sub), dict):
                merged[sub] = {**defaults[sub], **e[sub]}
        merged.update({k: raw[k] for k in ("cluster",) if k in raw})
        out.append((key, merged))
    return out


def build_entries(raw: dict[str, Any], build=None) -> list[Entry]:
    """Validate every entry and build its serving plan; mark which entries share a cache, namespace
    and HF Secret. ``build(entry_raw) -> ServingPlan`` defaults to the plain serving builder."""
    from .config import parse

    build = build or (lambda r: build_plan(parse(r)))
    entries: list[Entry] = []
    names: dict[str, str] = {}
    for key, cfg_raw in entry_configs(raw):
        body = {k: v for k, v in cfg_raw.items() if k not in ENTRY_ONLY}
        try:
            plan = build(body)
        except ConfigError as e:
            raise ConfigError(entry_prefix(str(e), key) if key != NS else str(e)) from None
        comps = [c["name"] for c in plan.dgd["spec"]["components"]]
        overrides = _parse_override(cfg_raw.get("overrides"), key, comps)
        apply_overrides(plan.dgd, overrides, key)
        name = cfg_raw["name"] if "name" in cfg_raw else plan.dgd["metadata"]["name"]
        if "name" not in cfg_raw and name in names:  # the same target in another namespace
            name = f"{name}-{plan.dgd['metadata']['namespace']}"[:40].rstrip("-")
        if key != NS and not (isinstance(name, str) and _NAME.fullmatch(name)):
            raise ConfigError(f"{key}.name: {name!r} is not a valid entry name (1-40 lowercase letters, digits and '-')")
        if name in names:
            raise ConfigError(f"{key}.name: {name!r} is already the name of {names[name]}; give one of them its own name")
        names[name] = key
        entries.append(Entry(name=name, key=key, raw=cfg_raw, plan=plan, overrides=overrides))
    _share(entries)
    return entries


def _share(entries: list[Entry]) -> None:
    seen_ns: dict[str, Entry] = {}
    caches: dict[str, Entry] = {}
    dgds: dict[tuple[str, str], Entry] = {}
    for e in entries:
        p = e.plan
        ns = p.dgd["metadata"]["namespace"]
        other = dgds.get((ns, p.dgd["metadata"]["name"]))
        if other:
            raise ConfigError(f"{e.key}: its DynamoGraphDeployment {p.dgd['metadata']['name']!r} is also {other.key}'s in namespace {ns!r}; "
                              f"give one of them its own namespace")
        dgds[(ns, p.dgd["metadata"]["name"])] = e
        first = seen_ns.get(ns)
        if first:
            e.owns_namespace = False
            e.owns_secret = False
            e.namespace_owner = first.name
            p.namespace = None
            p.hf_secret = None
            if p.hf_secret_name != first.plan.hf_secret_name:
                raise ConfigError(f"{e.key}.hfTokenSecretName: {p.hf_secret_name!r} differs from {first.key}'s "
                                  f"{first.plan.hf_secret_name!r} in namespace {ns!r}; entries of one namespace share its HF token Secret")
        else:
            seen_ns[ns] = e
        if p.cache_pvc is None and not p.jobs:
            continue
        e.cache_key = cache_identity(p)
        owner = caches.get(e.cache_key)
        if owner:
            if owner.plan.cache_pvc != p.cache_pvc:
                raise ConfigError(f"{e.key}.storage: shares {owner.key}'s model cache ({p.claim_name!r} in {ns!r}) but asks for "
                                  f"different storage settings; set storage once for both (top level) or give one its own namespace")
            e.owns_cache = False
            e.cache_owner = owner.name
            p.cache_pvc = None
            p.jobs = []
            continue
        if not e.owns_namespace:
            raise ConfigError(
                f"{e.key}.namespace: {ns!r}: this entry needs its own model cache (a different checkpoint or storage from "
                f"{first.key}'s), and the recipes name their cache claim and download Jobs alike; give it its own namespace"
            )
        caches[e.cache_key] = e
