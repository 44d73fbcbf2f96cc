"""vLLM's engine command-line flags, read from vLLM's own source: the flag table the local node's worker image checks a
rendered ``python3 -m dynamo.vllm ...`` command line against.

vLLM's ``EngineArgs.add_cli_args`` / ``AsyncEngineArgs.add_cli_args`` (``vllm/engine/arg_utils.py``) add every engine
flag with ``add_argument("--flag", **<group>_kwargs["field"])``, where ``<group>_kwargs = get_kwargs(<Config class>)``
derives argparse keywords from the config dataclass field's annotation (``vllm/engine/arg_utils.py`` ``get_kwargs``:
a ``bool`` becomes ``argparse.BooleanOptionalAction``, i.e. ``--flag`` and ``--no-flag``; a ``Literal`` becomes
``choices``; ``int``/``float`` a typed value; a ``list`` ``nargs="+"``; config classes and dicts a JSON string). vLLM
cannot be imported here (it needs torch and CUDA), so this module reads the same source without running it (Python's
``ast``): the option strings of every ``add_argument`` call in those two functions, and the annotation of the field
each one is built from. The source is the sdist of the vLLM release the pinned Dynamo wheel requires
(``ai-dynamo==1.6.1``: ``Requires-Dist: vllm[flashinfer,otel,runai]==0.31.0; extra == 'vllm'``), pinned by URL and
SHA-256 in ``tools/node/images.lock``.

Output: a list of ``{"flags": [...], "kind": "bool"|"int"|"float"|"choice"|"list"|"str", "choices": [...]}``.
"""

from __future__ import annotations

import ast
import json
import sys
import tarfile
from pathlib import Path
from typing import Optional

SIMPLE = {"int": "int", "float": "float", "bool": "bool", "str": "str"}


def _annotation_kind(node: Optional[ast.expr], aliases: dict[str, ast.expr], depth: int = 0) -> tuple[str, list]:
    """(kind, choices) of a dataclass field annotation, as vLLM's get_kwargs turns it into argparse keywords."""
    if node is None or depth > 5:
        return "str", []
    if isinstance(node, ast.Constant) and isinstance(node.value, str):  # a string annotation
        try:
            return _annotation_kind(ast.parse(node.value, mode="eval").body, aliases, depth + 1)
        except SyntaxError:
            return "str", []
    # X | None, Optional[X]: the X
    if isinstance(node, ast.BinOp) and isinstance(node.op, ast.BitOr):
        parts = [p for p in (node.left, node.right) if not (isinstance(p, ast.Constant) and p.value is None)]
        kinds = [_annotation_kind(p, aliases, depth + 1) for p in parts]
        if any(k == "list" for k, _ in kinds):  # get_kwargs: a union with a list takes one or more values
            return "list", []
        if len(kinds) == 1:
            return kinds[0]
        if all(k == "choice" for k, _ in kinds):
            return "choice", [c for _, cs in kinds for c in cs]
        if {k for k, _ in kinds} <= {"int", "float"}:
            return "float", []
        return "str", []
    if isinstance(node, ast.Subscript):
        head = ast.unparse(node.value)
        if head in ("Optional", "typing.Optional"):
            return _annotation_kind(node.slice, aliases, depth + 1)
        if head in ("Literal", "typing.Literal"):
            items = node.slice.elts if isinstance(node.slice, ast.Tuple) else [node.slice]
            values = []
            for e in items:  # a Literal nests other Literal aliases (vllm/config/speculative.py SpeculativeMethod)
                if isinstance(e, ast.Constant):
                    values.append(e.value)
                elif isinstance(e, ast.Name) and e.id in aliases:
                    kind, nested = _annotation_kind(aliases[e.id], aliases, depth + 1)
                    values += nested if kind == "choice" else []
            if values and all(isinstance(v, str) for v in values):
                return "choice", values
            if values and all(isinstance(v, int) and not isinstance(v, bool) for v in values):
                return "int", []
            return "str", []
        if head in ("list", "List", "typing.List"):
            return "list", []
        return "str", []  # dict[...] and other generics: a JSON string
    if isinstance(node, ast.Name):
        if node.id in SIMPLE:
            return SIMPLE[node.id], []
        if node.id in aliases:
            return _annotation_kind(aliases[node.id], aliases, depth + 1)
    return "str", []


def _config_fields(files: dict[str, str]) -> tuple[dict[str, dict[str, ast.expr]], dict[str, ast.expr]]:
    """class name -> {field: annotation}, and module-level type aliases, of every file under vllm/config/ (and a few
    modules whose classes the engine flags are built from)."""
    classes: dict[str, dict[str, ast.expr]] = {}
    aliases: dict[str, ast.expr] = {}
    for text in files.values():
        tree = ast.parse(text)
        for node in tree.body:
            if isinstance(node, ast.ClassDef):
                fields = classes.setdefault(node.name, {})
                for item in node.body:
                    if isinstance(item, ast.AnnAssign) and isinstance(item.target, ast.Name):
                        fields.setdefault(item.target.id, item.annotation)
            elif isinstance(node, ast.Assign) and len(node.targets) == 1 and isinstance(node.targets[0], ast.Name):
                aliases.setdefault(node.targets[0].id, node.value)
            elif isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name) and node.value is not None:
                if "TypeAlias" in ast.unparse(node.annotation):
                    aliases.setdefault(node.target.id, node.value)
            elif type(node).__name__ == "TypeAlias":  # `type X = ...` (Python 3.12 syntax)
                aliases.setdefault(node.name.id, node.value)  # type: ignore[attr-defined]
    return classes, aliases


def _explicit_kind(call: ast.Call) -> Optional[tuple[str, list]]:
    """(kind, choices) from an add_argument call's own keywords (type=, action=, choices=, nargs=), if it has them."""
    kw = {k.arg: k.value for k in call.keywords if k.arg}
    if "action" in kw:
        action = ast.unparse(kw["action"])
        if "BooleanOptionalAction" in action:
            return "bool", []
        if "store_true" in action or "store_false" in action:
            return "flag", []
    if "choices" in kw and isinstance(kw["choices"], (ast.List, ast.Tuple)):
        values = [e.value for e in kw["choices"].elts if isinstance(e, ast.Constant)]
        return "choice", values
    if "nargs" in kw:
        return "list", []
    if "type" in kw:
        t = ast.unparse(kw["type"])
        if t in ("int", "float"):
            return t, []
        return "str", []
    return None


def engine_flags(arg_utils: str, config_files: dict[str, str]) -> list[dict]:
    """The flag table of vLLM's EngineArgs.add_cli_args and AsyncEngineArgs.add_cli_args (module docstring)."""
    classes, aliases = _config_fields({"arg_utils": arg_utils, **config_files})
    tree = ast.parse(arg_utils)
    out: list[dict] = []
    for cls in (n for n in tree.body if isinstance(n, ast.ClassDef) and n.name in ("EngineArgs", "AsyncEngineArgs")):
        for fn in (n for n in cls.body if isinstance(n, ast.FunctionDef) and n.name == "add_cli_args"):
            kwargs_of: dict[str, tuple[str, Optional[str]]] = {}  # <name>_kwargs -> (config class, field or None)
            for node in ast.walk(fn):
                if isinstance(node, ast.Assign) and len(node.targets) == 1 and isinstance(node.targets[0], ast.Name):
                    v = node.value
                    if isinstance(v, ast.Call) and ast.unparse(v.func) == "get_kwargs" and v.args:
                        kwargs_of[node.targets[0].id] = (ast.unparse(v.args[0]), None)
                    elif (
                        isinstance(v, ast.Subscript)
                        and isinstance(v.value, ast.Call)
                        and ast.unparse(v.value.func) == "get_kwargs"
                    ):
                        kwargs_of[node.targets[0].id] = (ast.unparse(v.value.args[0]), ast.literal_eval(v.slice))
            for node in ast.walk(fn):
                if not (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr == "add_argument"):
                    continue
                flags = [a.value for a in node.args if isinstance(a, ast.Constant) and isinstance(a.value, str)]
                if not flags or not flags[0].startswith("-"):
                    continue
                kind = _explicit_kind(node)
                if kind is None:
                    unpacked = []  # **<name>_kwargs["field"], **<name>_kwargs, or **{**<name>_kwargs["field"], ...}
                    for k in node.keywords:
                        if k.arg is None and isinstance(k.value, ast.Dict):
                            unpacked += [v for key, v in zip(k.value.keys, k.value.values) if key is None]
                        elif k.arg is None:
                            unpacked.append(k.value)
                    for v in unpacked:
                        if isinstance(v, ast.Subscript) and isinstance(v.value, ast.Name) and v.value.id in kwargs_of:
                            cls_name, field = kwargs_of[v.value.id][0], ast.literal_eval(v.slice)
                        elif isinstance(v, ast.Name) and v.id in kwargs_of and kwargs_of[v.id][1]:
                            cls_name, field = kwargs_of[v.id]
                        else:
                            continue
                        kind = _annotation_kind(classes.get(cls_name, {}).get(field), aliases)
                out.append({"flags": flags, "kind": (kind or ("str", []))[0], "choices": (kind or ("str", []))[1]})
    return out


def from_sdist(sdist: Path) -> list[dict]:
    """The flag table read from a vLLM sdist (``vllm-<version>.tar.gz``) without unpacking it."""
    with tarfile.open(sdist) as tar:
        arg_utils, config = None, {}
        for m in tar.getmembers():
            parts = m.name.split("/")
            if not m.isfile() or len(parts) < 3:
                continue
            rel = "/".join(parts[1:])
            if rel == "vllm/engine/arg_utils.py":
                arg_utils = tar.extractfile(m).read().decode()  # type: ignore[union-attr]
            elif rel.startswith("vllm/config/") and rel.endswith(".py"):
                config[rel] = tar.extractfile(m).read().decode()  # type: ignore[union-attr]
    if arg_utils is None:
        raise SystemExit(f"{sdist}: no vllm/engine/arg_utils.py")
    return engine_flags(arg_utils, config)


if __name__ == "__main__":
    json.dump(from_sdist(Path(sys.argv[1])), sys.stdout, indent=1)
