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

from pydantic import ValidationError

from stacks.config.keys import NS, ConfigError
from stacks.serving import ServingPlan, build_plan
from stacks.serving.engine_args import SHELL_FLAGS, append_engine_args
from stacks.config import (
    ENTRY_ONLY,  # noqa: F401  (re-exported)
    SERVE,  # noqa: F401  (re-exported)
    STACK_KEYS,  # noqa: F401  (re-exported)
    ArgsOverride,  # noqa: F401  (re-exported)
    ComponentOverride,
    ResourcesOverride,  # noqa: F401  (re-exported)
    ServeEntry,  # noqa: F401
    entry_configs,  # noqa: F401  (re-exported)
    entry_prefix,
    serve_entries,
)

_NAME = re.compile(r"[a-z0-9]([-a-z0-9]{0,38}[a-z0-9])?")


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
            raise ConfigError(
                f"{key}.overrides.{comp}: component {comp!r} was renamed {new!r} in Dynamo 1.6 (this target's recipe uses "
                f"the new names); key the override {new!r}; components: {', '.join(components)}"
            )
        if comp not in components:
            from difflib import get_close_matches

            near = get_close_matches(str(comp), components, n=1)
            hint = f" (did you mean {near[0]!r}?)" if near else ""
            raise ConfigError(
                f"{key}.overrides.{comp}: component {comp!r} is not in this target{hint}; components: {', '.join(components)}"
            )
        try:
            out[comp] = ComponentOverride.model_validate(body or {})
        except ValidationError as e:
            lines = []
            for err in e.errors():
                where = ".".join(str(p) for p in err["loc"])
                msg = err["msg"].removeprefix("Value error, ")
                if err["type"] == "extra_forbidden":
                    msg = "unknown key; valid keys: " + {
                        "": "args, env, resources",
                        "args": "set, append, remove",
                        "resources": "limits, requests",
                    }.get(".".join(str(p) for p in err["loc"][:-1]), "")
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
        if (ov.args.set or ov.args.remove) and any(a in SHELL_FLAGS for a in (c.get("command") or []) + args[:1]):
            raise ConfigError(
                f"{where}.args: the component runs a shell script, so flags cannot be set or removed; use args.append"
            )
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
            del args[i : i + (2 if _takes_value(args, i) else 1)]
        if ov.args.set or ov.args.remove:
            c["args"] = args
        try:  # at the end of the engine's command line, also where it is the last command of a script
            append_engine_args(c, list(ov.args.append))
        except ValueError as e:
            raise ConfigError(f"{where}.args.append: {e}") from None
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


def build_entries(source, build=None) -> list[Entry]:
    """Build every entry's serving plan, apply its overrides, name it; mark which entries share a cache, namespace
    and HF Secret. ``source``: the parsed entries (``stacks.config.ServeEntry``), or a raw ``dynamo:`` mapping (parsed
    here by ``stacks.config.serve_entries``); ``build(entry) -> ServingPlan`` defaults to the plain serving builder."""
    specs = serve_entries(source) if isinstance(source, dict) else list(source)
    build = build or (lambda e: build_plan(e.config))
    entries: list[Entry] = []
    names: dict[str, str] = {}
    for spec in specs:
        key = spec.key
        try:
            plan = build(spec)
        except ConfigError as e:
            raise ConfigError(entry_prefix(str(e), key) if key != NS else str(e)) from None
        comps = [c["name"] for c in plan.dgd["spec"]["components"]]
        overrides = _parse_override(spec.overrides, key, comps)
        apply_overrides(plan.dgd, overrides, key)
        name = spec.name if spec.named else plan.dgd["metadata"]["name"]
        if not spec.named and name in names:  # the same target in another namespace
            name = f"{name}-{plan.dgd['metadata']['namespace']}"[:40].rstrip("-")
        if key != NS and not (isinstance(name, str) and _NAME.fullmatch(name)):
            raise ConfigError(f"{key}.name: {name!r} is not a valid entry name (1-40 lowercase letters, digits and '-')")
        if name in names:
            raise ConfigError(f"{key}.name: {name!r} is already the name of {names[name]}; give one of them its own name")
        names[name] = key
        entries.append(Entry(name=name, key=key, raw=spec.raw, plan=plan, overrides=overrides, cfg=spec.config))
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
            raise ConfigError(
                f"{e.key}: its DynamoGraphDeployment {p.dgd['metadata']['name']!r} is also {other.key}'s in namespace {ns!r}; "
                f"give one of them its own namespace"
            )
        dgds[(ns, p.dgd["metadata"]["name"])] = e
        first = seen_ns.get(ns)
        if first:
            e.owns_namespace = False
            e.owns_secret = False
            e.namespace_owner = first.name
            p.namespace = None
            p.hf_secret = None
            if p.hf_secret_name != first.plan.hf_secret_name:
                raise ConfigError(
                    f"{e.key}.hfTokenSecretName: {p.hf_secret_name!r} differs from {first.key}'s "
                    f"{first.plan.hf_secret_name!r} in namespace {ns!r}; entries of one namespace share its HF token Secret"
                )
        else:
            seen_ns[ns] = e
        if p.cache_pvc is None and not p.jobs:
            continue
        e.cache_key = cache_identity(p)
        owner = caches.get(e.cache_key)
        if owner:
            if owner.plan.cache_pvc != p.cache_pvc:
                raise ConfigError(
                    f"{e.key}.storage: shares {owner.key}'s model cache ({p.claim_name!r} in {ns!r}) but asks for "
                    f"different storage settings; set storage once for both (top level) or give one its own namespace"
                )
            e.owns_cache = False
            e.cache_owner = owner.name
            p.cache_pvc = None
            p.jobs = []
            continue
        if not e.owns_namespace:
            assert first is not None, "an entry owns its namespace unless an earlier entry has it"
            raise ConfigError(
                f"{e.key}.namespace: {ns!r}: this entry needs its own model cache (a different checkpoint or storage from "
                f"{first.key}'s), and the recipes name their cache claim and download Jobs alike; give it its own namespace"
            )
        caches[e.cache_key] = e
