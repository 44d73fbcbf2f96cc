"""How one stack config value reaches the program, and the one reading of it that ``up`` and ``render --stack`` share.

The Pulumi engine hands a Python program each config value as text (``pulumi.runtime.config``): a string as it was
written, a bool or number as its JSON, a list or mapping as its JSON (Pulumi SDK v3.276.0,
go/common/resource/config/object.go ``object.MarshalString``). ``program_value`` turns that text into what
``parse_spec`` reads: lists, mappings and booleans decoded from their JSON; everything else, numbers included, kept as
text (``namespace: "123"`` and a numeric ``modelRevision`` are names, and the schema turns a string into a number where
it wants one). ``stacks.config.pulumi_config.raw_config`` applies it to what the engine hands over;
``stacks.program.stack_yaml`` to the text the Pulumi CLI would have handed over for a stack file.
"""

from __future__ import annotations

import json
from typing import Any


def program_value(text: str) -> Any:
    """The value ``parse_spec`` reads for one config value's text, as the engine hands it to the program."""
    if text[:1] in ("[", "{") or text in ("true", "false"):
        try:
            return json.loads(text)
        except json.JSONDecodeError:
            return text
    return text
