"""``Pulumi.<stack>.yaml`` read as the Pulumi CLI reads it, so that ``render --stack`` plans from the values ``up``'s
program receives.

The CLI decodes the file with gopkg.in/yaml.v3 (v3.0.1) and hands each ``dynamo:`` value to the program as text (Pulumi
SDK v3.276.0, go/common/resource/config/object.go: ``object.UnmarshalYAML`` decodes into ``any``, ``unmarshalObject``
turns a ``time.Time`` into its ``String()``, ``object.MarshalString`` gives a string as it is and anything else as its
JSON). PyYAML, which ``render`` parses with, resolves plain scalars by YAML 1.1; yaml.v3 by YAML 1.2's core schema
with a few 1.1 keepsakes (resolve.go ``resolve``). Where they differ, the program would see another value than
``render`` planned from:

==============  =====================  ===============================================
plain scalar    PyYAML (YAML 1.1)      yaml.v3, as the program gets it (top level)
==============  =====================  ===============================================
``yes``/``on``  true                   the string ``yes``/``on``
``1e3``         the string ``1e3``     the number 1000 (text ``1000``)
``0o17``        the string ``0o17``    the number 15
``1:30``        the number 90          the string ``1:30``
``08``          the string ``08``      the number 8 (a float: not an octal integer)
``2026-01-01``  a date                 the text ``2026-01-01 00:00:00 +0000 UTC``
==============  =====================  ===============================================

So this module lets PyYAML parse the syntax (the same in both: anchors, flow and block styles, quoting) and resolves
every plain scalar itself, as yaml.v3 does; a duplicate key is refused, as yaml.v3 refuses it ("mapping key ...
already defined"). ``.inf`` and ``.nan`` are refused with the key: the CLI cannot write them as JSON, so ``up``
stops before the program. A timestamp with a numeric offset prints as ``+0200 +0200`` when the machine running the
CLI is on UTC (Go's ``time.Parse`` keeps the local zone's name when the offset matches it); stack files in this
project have none.
"""

from __future__ import annotations

import calendar
import json
import math
import re
from decimal import Decimal
from typing import Any, Optional

import yaml

from stacks.config.keys import ConfigError
from stacks.config.values import program_value

PLAIN = "!plain"  # the tag this loader gives a plain (unquoted, untagged) scalar; resolved below as yaml.v3 does
STR = "tag:yaml.org,2002:str"
MERGE = "<<"


class _Composer(yaml.SafeLoader):
    """PyYAML's parser and composer; every plain scalar is left unresolved (tag ``PLAIN``)."""

    def resolve(self, kind: Any, value: Any, implicit: Any) -> str:
        if kind is yaml.ScalarNode and implicit[0]:
            return PLAIN
        return super().resolve(kind, value, implicit)


# resolve.go resolveMap: the plain scalars looked up before anything else.
_MAP: dict[str, Any] = {
    **dict.fromkeys(("true", "True", "TRUE"), True),
    **dict.fromkeys(("false", "False", "FALSE"), False),
    **dict.fromkeys(("", "~", "null", "Null", "NULL"), None),
    **dict.fromkeys((".nan", ".NaN", ".NAN"), math.nan),
    **dict.fromkeys((".inf", ".Inf", ".INF", "+.inf", "+.Inf", "+.INF"), math.inf),
    **dict.fromkeys(("-.inf", "-.Inf", "-.INF"), -math.inf),
}
# resolve.go resolveTable: the first character decides what a plain scalar may be.
_SIGN, _DIGIT, _IN_MAP, _DOT = "S", "D", "M", "."
_FLOAT = re.compile(r"[-+]?(\.[0-9]+|[0-9]+(\.[0-9]*)?)([eE][-+]?[0-9]+)?")  # resolve.go yamlStyleFloat
# strconv.ParseInt(s, 0, 64): an optional sign, then 0x/0o/0b with digits, a leading 0 (octal), or decimal.
_INT = re.compile(r"([-+]?)(0[xX][0-9a-fA-F]+|0[oO][0-7]+|0[bB][01]+|0[0-7]*|[1-9][0-9]*)")
# resolve.go allowedTimestampFormats: 2006-1-2T15:4:5.999999999Z07:00 (T or t), 2006-1-2 15:4:5.999999999, 2006-1-2.
_TIMESTAMP = re.compile(
    r"(\d{4})-(\d{1,2})-(\d{1,2})"
    r"(?:(?P<t>[Tt])(\d{1,2}):(\d{1,2}):(\d{1,2})(?:[.,](\d{1,9}))?(?P<zone>Z|[+-]\d{2}:\d{2})"
    r"| (\d{1,2}):(\d{1,2}):(\d{1,2})(?:[.,](\d{1,9}))?)?"
)


class GoTime(str):
    """A timestamp as the program receives it: Go's ``time.Time.String()`` (``2006-01-02 15:04:05.999999999 -0700 MST``)."""


def _hint(text: str) -> str:
    if not text:
        return "N"
    c = text[0]
    if c in "+-":
        return _SIGN
    if c.isdigit() and c.isascii():
        return _DIGIT
    if c in "yYnNtTfFoO~":
        return _IN_MAP
    return _DOT if c == "." else ""


def _timestamp(text: str) -> Optional[GoTime]:
    """``parseTimestamp`` (resolve.go): four digits and a dash first, then one of the allowed layouts (Go's time.Parse:
    month and day of one or two digits, each in range)."""
    m = _TIMESTAMP.fullmatch(text)
    if not m:
        return None
    year, month, day = int(m[1]), int(m[2]), int(m[3])
    if not (1 <= month <= 12 and 1 <= day <= calendar.monthrange(year, month)[1]):
        return None
    if m["t"]:
        h, mi, s, frac, zone = m[5], m[6], m[7], m[8], m["zone"]
    elif m[10] is not None:
        h, mi, s, frac, zone = m[10], m[11], m[12], m[13], "Z"
    else:
        h, mi, s, frac, zone = "0", "0", "0", None, "Z"
    hour, minute, second = int(h), int(mi), int(s)
    if hour > 23 or minute > 59 or second > 59:
        return None
    nanos = (frac or "").ljust(9, "0").rstrip("0")
    if zone == "Z" or zone[1:] == "00:00":
        where = "+0000 UTC"
    else:
        offset = zone[0] + zone[1:3] + zone[4:6]
        where = f"{offset} {offset}"  # a fixed zone without a name prints its offset as the name
    return GoTime(f"{year:04d}-{month:02d}-{day:02d} {hour:02d}:{minute:02d}:{second:02d}{'.' + nanos if nanos else ''} {where}")


def _go_int(plain: str) -> Optional[int]:
    """strconv.ParseInt(plain, 0, 64), else ParseUint(plain, 0, 64) (no sign), as resolve.go tries them."""
    m = _INT.fullmatch(plain)
    if not m:
        return None
    sign, body = m.groups()
    if body[:2].lower() in ("0x", "0o", "0b"):
        value = int(body[2:], {"x": 16, "o": 8, "b": 2}[body[1].lower()])
    elif len(body) > 1 and body[0] == "0":
        value = int(body[1:], 8)
    else:
        value = int(body)
    value = -value if sign == "-" else value
    if -(2**63) <= value < 2**63 or (not sign and value < 2**64):
        return value
    return None


def _go_float(text: str) -> Optional[float]:
    """strconv.ParseFloat(text, 64) of a YAML-style float; None where Go reports a range error."""
    if not _FLOAT.fullmatch(text):
        return None
    value = float(text)
    return None if math.isinf(value) else value


def resolve_plain(text: str) -> Any:
    """A plain scalar as yaml.v3 resolves it (resolve.go ``resolve`` with no tag): bool, None, int, float, a
    ``GoTime``, or the text itself."""
    hint = _hint(text)
    if not hint:
        return text
    if text in _MAP:
        return _MAP[text]
    if hint == _DOT:
        value = _go_float(text)
        return text if value is None else value
    if hint in (_SIGN, _DIGIT):
        stamp = _timestamp(text)
        if stamp is not None:
            return stamp
        plain = text.replace("_", "")
        number = _go_int(plain)
        if number is not None:
            return number
        value = _go_float(plain)
        if value is not None:
            return value
    return text


def go_json(value: Any) -> str:
    """encoding/json's text of a value of the decoded file (floats as Go writes them: 1000, 1.5, 1e+21, 1e-7)."""
    if isinstance(value, float) and not isinstance(value, bool):
        if value == 0:
            return "-0" if math.copysign(1, value) < 0 else "0"
        if abs(value) < 1e-6 or abs(value) >= 1e21:
            text = repr(value)
            mantissa, _, exponent = text.partition("e")
            return (
                f"{mantissa.removesuffix('.0')}e{exponent[0]}{int(exponent[1:])}"
                if exponent[0] == "-"
                else f"{mantissa.removesuffix('.0')}e{exponent[0]}{int(exponent[1:]):02d}"
            )
        text = format(Decimal(repr(value)), "f")
        return text.rstrip("0").rstrip(".") if "." in text else text
    if isinstance(value, dict):
        return "{" + ",".join(f"{json.dumps(k)}:{_nested_json(v)}" for k, v in value.items()) + "}"
    if isinstance(value, list):
        return "[" + ",".join(_nested_json(v) for v in value) + "]"
    return json.dumps(value)


def _nested_json(value: Any) -> str:
    """An integer inside a list or mapping that only fits Go's uint64 (2**63 and up) reaches the program as a float64
    prints (measured with the pinned CLI: 2**63 in a mapping arrives as 9223372036854776000, at the top level as
    written; 2**53 + 1, an int64, arrives exact)."""
    if isinstance(value, int) and not isinstance(value, bool) and value >= 2**63:
        return go_json(float(value))
    return go_json(value)


def _key_text(value: Any) -> str:
    """A mapping key as Pulumi names it (``fmt.Sprintf("%v", k)`` of the decoded key)."""
    if isinstance(value, str):
        return value
    if value is None:
        return "<nil>"
    if isinstance(value, bool):
        return "true" if value else "false"
    return go_json(value)


def _decoded(node: yaml.Node, path: str = "") -> Any:
    """A node as yaml.v3 decodes it into ``any`` (maps, lists, scalars), with Pulumi's ``unmarshalObject`` on top:
    a timestamp becomes its text. ``path``: where the node is (``config.dynamo:cluster.region``), for errors."""
    if isinstance(node, yaml.MappingNode):
        out: dict[str, Any] = {}
        lines: dict[str, int] = {}
        merged: dict[str, Any] = {}
        for key_node, value_node in node.value:
            if key_node.tag == PLAIN and key_node.value == MERGE:
                sources = value_node.value if isinstance(value_node, yaml.SequenceNode) else [value_node]
                for source in sources:
                    for k, v in _decoded(source, path).items():
                        merged.setdefault(k, v)
                continue
            name = _key_text(_decoded(key_node, path))
            if name in out:
                raise yaml.constructor.ConstructorError(
                    None,
                    None,
                    f"mapping key {name!r} is given twice (line {lines[name] + 1} and line "
                    f"{key_node.start_mark.line + 1}); the Pulumi CLI refuses such a file: keep one",
                    key_node.start_mark,
                )
            lines[name] = key_node.start_mark.line
            out[name] = _decoded(value_node, f"{path}.{name}" if path else name)
        return {**merged, **out}
    if isinstance(node, yaml.SequenceNode):
        return [_decoded(item, f"{path}[{i}]") for i, item in enumerate(node.value)]
    if node.tag == STR or node.tag != PLAIN:
        return node.value  # quoted, a block literal, or tagged: the text (an explicit !!str keeps it a string)
    value = resolve_plain(node.value)
    if isinstance(value, float) and (math.isnan(value) or math.isinf(value)):
        raise ConfigError(
            f"{path.removeprefix('config.')}: {node.value!r} (line {node.start_mark.line + 1}) is not a number the Pulumi CLI can hand "
            f"to a program (JSON has no NaN or infinity); quote it if it is text"
        )
    return value


def load(text: str) -> Any:
    """The document as the Pulumi CLI decodes it (see the module docstring), or None when it is empty."""
    node = yaml.compose(text, Loader=_Composer)
    return None if node is None else _decoded(node)


def config_value(node_value: Any) -> Any:
    """One top-level config value of the decoded file, as ``up``'s program reads it: the text
    ``object.MarshalString`` gives (a string as is, anything else as JSON), then ``program_value``. A
    ``{secure: ...}`` value is kept as it is (its ciphertext is never read here)."""
    if isinstance(node_value, dict) and set(node_value) == {"secure"}:
        return node_value
    if node_value is None:
        return ""  # the Pulumi CLI hands a YAML null over as "", which parse_spec refuses (check_no_empty_values)
    return program_value(str(node_value) if isinstance(node_value, str) else go_json(node_value))
