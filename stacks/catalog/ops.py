"""Small, typed patch operations: the per-target deltas of the catalog.

Upstream Dynamo keeps one base manifest per recipe family and expresses each
target as a kustomize overlay. We do the same with data: a family builder
returns the base objects, and a target lists ``Op`` values that move it to the
exact upstream shape (insert a flag after another, add an env var, set a
field). Ops are pure: ``apply(docs)`` returns nothing and mutates the docs the
builder just created, which are never shared.

Component selectors (``on=``): ``frontend``, ``workers`` (every non-frontend
component), ``prefill``, ``decode``, ``all``, or an exact component name.
"""

from __future__ import annotations

import copy
from dataclasses import dataclass
from typing import Any, Iterable, Mapping, Sequence

Doc = dict[str, Any]

FRONTEND = "frontend"
WORKERS = "workers"
ALL = "all"


class PatchError(ValueError):
    """A catalog op did not find what it patches: the catalog data is wrong."""


def dgd_of(docs: Sequence[Doc]) -> Doc:
    for d in docs:
        if d.get("kind") == "DynamoGraphDeployment":
            return d
    raise PatchError("no DynamoGraphDeployment among the recipe objects")


def configmap_of(docs: Sequence[Doc]) -> Doc:
    for d in docs:
        if d.get("kind") == "ConfigMap":
            return d
    raise PatchError("no ConfigMap among the recipe objects")


def components(docs: Sequence[Doc], on: str) -> list[Doc]:
    comps = dgd_of(docs)["spec"]["components"]
    if on == ALL:
        picked = comps
    elif on == FRONTEND:
        picked = [c for c in comps if c.get("type") == "frontend"]
    elif on == WORKERS:
        picked = [c for c in comps if c.get("type") != "frontend"]
    elif on in ("prefill", "decode", "worker"):
        picked = [c for c in comps if c.get("type") == on]
    else:
        picked = [c for c in comps if c.get("name") == on]
    if not picked:
        raise PatchError(f"component selector {on!r} matched nothing")
    return picked


def main_container(component: Doc) -> Doc:
    for c in component["podTemplate"]["spec"]["containers"]:
        if c.get("name") == "main":
            return c
    raise PatchError(f"component {component.get('name')} has no 'main' container")


def _path(obj: Any, path: Sequence[Any], create: bool) -> tuple[Any, Any]:
    for key in path[:-1]:
        if isinstance(obj, list):
            obj = obj[key]
            continue
        if key not in obj:
            if not create:
                raise PatchError(f"path {list(path)} missing at {key!r}")
            obj[key] = {}
        obj = obj[key]
    return obj, path[-1]


def _split(path: str | Sequence[Any]) -> list[Any]:
    if isinstance(path, str):
        return [int(p) if p.isdigit() else p.replace("~1", "/") for p in path.split("/")]
    return list(path)


def env_entry(name: str, value: Any) -> Doc:
    """``value`` is a string (plain env) or a dict (a full env entry without name)."""
    if isinstance(value, Mapping):
        return {"name": name, **copy.deepcopy(dict(value))}
    return {"name": name, "value": value}


@dataclass(frozen=True)
class Op:
    """Base class; subclasses implement ``apply``."""

    def apply(self, docs: list[Doc]) -> None:  # pragma: no cover - interface
        raise NotImplementedError


def _scope(docs: list[Doc], scope: str, on: str) -> list[Any]:
    if scope == "dgd":
        return [dgd_of(docs)]
    if scope == "configmap":
        return [configmap_of(docs)]
    comps = components(docs, on)
    if scope == "component":
        return comps
    if scope == "pod":
        return [c["podTemplate"]["spec"] for c in comps]
    if scope == "container":
        return [main_container(c) for c in comps]
    raise PatchError(f"unknown scope {scope!r}")


@dataclass(frozen=True)
class Set(Op):
    """Set a field (path like ``resources/requests/memory``) in a scope."""

    path: str | tuple
    value: Any
    scope: str = "container"
    on: str = WORKERS

    def apply(self, docs):
        for obj in _scope(docs, self.scope, self.on):
            parent, key = _path(obj, _split(self.path), create=True)
            parent[key] = copy.deepcopy(self.value)


@dataclass(frozen=True)
class Delete(Op):
    path: str | tuple
    scope: str = "container"
    on: str = WORKERS

    def apply(self, docs):
        for obj in _scope(docs, self.scope, self.on):
            parent, key = _path(obj, _split(self.path), create=False)
            if isinstance(parent, list):
                del parent[key]
            elif key in parent:
                del parent[key]
            else:
                raise PatchError(f"cannot delete missing {self.path!r}")


@dataclass(frozen=True)
class Append(Op):
    """Append items to a list field (created when absent)."""

    path: str | tuple
    items: tuple
    scope: str = "pod"
    on: str = WORKERS

    def apply(self, docs):
        for obj in _scope(docs, self.scope, self.on):
            parent, key = _path(obj, _split(self.path), create=True)
            parent.setdefault(key, []).extend(copy.deepcopy(list(self.items)))


def _find_flag(args: list, flag: str) -> int:
    for i, a in enumerate(args):
        if a == flag or (isinstance(a, str) and a.startswith(flag + "=")):
            return i
    raise PatchError(f"flag {flag!r} not found in {args}")


@dataclass(frozen=True)
class ArgsInsert(Op):
    """Insert args after ``after`` (a flag, skipping its ``skip`` values) or before ``before``.

    With neither, items go at the end; ``after=""`` means at the start.
    """

    items: tuple
    after: str | None = None
    before: str | None = None
    skip: int = 1
    field: str = "args"
    on: str = WORKERS

    def apply(self, docs):
        for c in _scope(docs, "container", self.on):
            args = c.setdefault(self.field, [])
            if self.after == "":
                at = 0
            elif self.after is not None:
                at = _find_flag(args, self.after) + 1 + self.skip
            elif self.before is not None:
                at = _find_flag(args, self.before)
            else:
                at = len(args)
            args[at:at] = list(self.items)


@dataclass(frozen=True)
class ArgsRemove(Op):
    """Remove a flag and its ``values`` following values."""

    flag: str
    values: int = 1
    field: str = "args"
    on: str = WORKERS

    def apply(self, docs):
        for c in _scope(docs, "container", self.on):
            args = c[self.field]
            i = _find_flag(args, self.flag)
            del args[i : i + 1 + self.values]


@dataclass(frozen=True)
class ArgSet(Op):
    """Replace the value that follows ``flag``."""

    flag: str
    value: str
    field: str = "args"
    on: str = WORKERS

    def apply(self, docs):
        for c in _scope(docs, "container", self.on):
            args = c[self.field]
            args[_find_flag(args, self.flag) + 1] = self.value


@dataclass(frozen=True)
class ArgsReplace(Op):
    """Replace the whole arg (or command) list of the selected containers."""

    items: tuple
    field: str = "args"
    on: str = WORKERS

    def apply(self, docs):
        for c in _scope(docs, "container", self.on):
            c[self.field] = list(self.items)


def _env_index(env: list, name: str) -> int:
    for i, e in enumerate(env):
        if e.get("name") == name:
            return i
    raise PatchError(f"env {name!r} not found")


@dataclass(frozen=True)
class EnvInsert(Op):
    """Insert env vars (name -> value or entry dict) after/before a named var, else append."""

    entries: tuple  # of (name, value)
    after: str | None = None
    before: str | None = None
    on: str = WORKERS

    def apply(self, docs):
        for c in _scope(docs, "container", self.on):
            env = c.setdefault("env", [])
            if self.after is not None:
                at = _env_index(env, self.after) + 1
            elif self.before is not None:
                at = _env_index(env, self.before)
            else:
                at = len(env)
            env[at:at] = [env_entry(n, v) for n, v in self.entries]


@dataclass(frozen=True)
class EnvSet(Op):
    """Change the value of an existing env var in place."""

    name: str
    value: Any
    on: str = WORKERS

    def apply(self, docs):
        for c in _scope(docs, "container", self.on):
            env = c["env"]
            env[_env_index(env, self.name)] = env_entry(self.name, self.value)


@dataclass(frozen=True)
class EnvRemove(Op):
    names: tuple
    on: str = WORKERS

    def apply(self, docs):
        for c in _scope(docs, "container", self.on):
            for n in self.names:
                del c["env"][_env_index(c["env"], n)]


def env_insert(
    entries: Mapping[str, Any], *, after: str | None = None, before: str | None = None, on: str = WORKERS
) -> EnvInsert:
    return EnvInsert(tuple(entries.items()), after=after, before=before, on=on)


def apply_all(docs: list[Doc], ops: Iterable[Op]) -> list[Doc]:
    for op in ops:
        op.apply(docs)
    return docs
