"""Reading YAML: PyYAML's safe loading, with libyaml's parser where PyYAML was built with it; and writing the
multi-document YAML people read (``to_yaml``: key order kept, multi-line strings as block literals).

The same constructors as ``yaml.safe_load`` (only standard tags, no Python objects), a C parser instead of the pure
Python one: the Dynamo CRDs (1.6 MB for the DGD's), the upstream recipes and the rendered manifests are read by the
fidelity check, ``drift``, ``diff`` and the simulators, and the pure Python parser spent most of their time there
(measured on this machine: about half of a run of the fidelity, drift and operator tests). Other writers stay with
``yaml.safe_dump``, whose output the goldens and reviews compare.
"""

from __future__ import annotations

from typing import Any, Iterable, Iterator

import yaml

SafeLoader = getattr(yaml, "CSafeLoader", yaml.SafeLoader)


def load(text: str | bytes) -> Any:
    """One YAML document, as ``yaml.safe_load`` reads it."""
    return yaml.load(text, Loader=SafeLoader)


def load_all(text: str | bytes) -> Iterator[Any]:
    """Every document of a YAML stream, as ``yaml.safe_load_all`` reads them."""
    return yaml.load_all(text, Loader=SafeLoader)


# libyaml's emitter where PyYAML was built with it, fed by a representer that builds the node tree in one pass: the same
# nodes yaml.SafeDumper's representers build (tags, block style for multi-line strings, anchors for a dict or list that
# appears twice) and so the same text, byte for byte, for every catalog target and committed stack
# (tests/test_program.py compares it with the pure Python SafeDumper). Measured here, render --all's YAML takes 0.26 s
# with libyaml behind PyYAML's generic representer against 1.30 s with the pure Python emitter; the one-pass
# representer and the memoised scalar resolution take most of the rest off.
_STR, _INT, _BOOL, _NULL = (f"tag:yaml.org,2002:{t}" for t in ("str", "int", "bool", "null"))
_MAP, _SEQ = "tag:yaml.org,2002:map", "tag:yaml.org,2002:seq"
_Scalar, _Mapping, _Sequence = yaml.ScalarNode, yaml.MappingNode, yaml.SequenceNode


# libyaml's dumper or the pure Python one, whichever this PyYAML has (chosen at run time).
_DumperBase: Any = getattr(yaml, "CSafeDumper", yaml.SafeDumper)


class _Dumper(_DumperBase):
    _resolved: dict = {}

    def represent(self, data):
        self.serialize(self._node(data, {}))

    def _node(self, data, seen: dict):
        """``data``'s node; ``seen``: the nodes of this document's dicts and lists by id (a second appearance is an
        alias, as PyYAML's representer makes it)."""
        kind = type(data)
        if kind is str:
            return _Scalar(_STR, data, style="|" if "\n" in data else None)
        if kind is dict or kind is list:
            node = seen.get(id(data))
            if node is not None:
                return node
            value: list = []
            node = seen[id(data)] = (_Mapping if kind is dict else _Sequence)(
                _MAP if kind is dict else _SEQ, value, flow_style=self.default_flow_style
            )
            if kind is dict:
                value.extend((self._node(k, seen), self._node(v, seen)) for k, v in data.items())
            else:
                value.extend(self._node(v, seen) for v in data)
            return node
        if kind is bool:
            return _Scalar(_BOOL, "true" if data else "false")
        if kind is int:
            return _Scalar(_INT, str(data))
        if data is None:
            return _Scalar(_NULL, "null")
        # floats, subclasses and the rest: PyYAML's own representers (which track their own aliases)
        self.represented_objects: dict[int, Any] = {}
        self.object_keeper: list[Any] = []
        return super().represent_data(data)

    def resolve(self, kind, value, implicit):
        # A scalar's implicit tag depends only on its text (no path resolvers are registered), and the serializer asks
        # twice per scalar: memoised per (text, implicit) across documents.
        if kind is not yaml.ScalarNode or self.yaml_path_resolvers:
            return super().resolve(kind, value, implicit)
        key = (value, implicit)
        tag = self._resolved.get(key)
        if tag is None:
            tag = self._resolved[key] = super().resolve(kind, value, implicit)
        return tag


def _str(dumper: yaml.SafeDumper, s: str):
    if "\n" in s:
        return dumper.represent_scalar("tag:yaml.org,2002:str", s, style="|")
    return dumper.represent_scalar("tag:yaml.org,2002:str", s)


_Dumper.add_representer(str, _str)


def to_yaml(objs: Iterable[dict]) -> str:
    return yaml.dump_all(list(objs), Dumper=_Dumper, sort_keys=False, width=4096, default_flow_style=False)
