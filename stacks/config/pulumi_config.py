"""Reads the ``dynamo:`` stack config from the Pulumi runtime as one plain mapping.

Secret keys are left out: they are only read through ``pulumi.Config.get_secret``
so they stay Pulumi secrets.
"""

from __future__ import annotations

from typing import Any

from pulumi.runtime import config as rc

from stacks.config.keys import NS, check_config_namespaces
from stacks.config.secret_values import check_secret_values
from stacks.config.values import program_value


def _all_config() -> dict[str, Any]:
    merged: dict[str, Any] = {}
    merged.update(rc.get_config_env())
    merged.update(rc.CONFIG.get())
    return merged


def raw_config() -> dict[str, Any]:
    """The plain ``dynamo:`` keys, namespace stripped, as ``stacks.program.render.stack_raw_config`` reads them from the file:
    a top-level empty value (YAML ``gpu:`` or ``gpu: ""``, which the Pulumi CLI hands over as "") is handed on as
    it arrives, and ``parse_spec`` refuses it (``check_no_empty_values``)."""
    merged = _all_config()
    check_config_namespaces(merged)  # a misspelt project prefix (dyanmo:gpu) would be ignored silently
    out: dict[str, Any] = {}
    for key, value in merged.items():
        if not key.startswith(NS + ":") or rc.is_config_secret(key) or key in rc.get_config_secret_keys_env():
            continue
        # Objects, lists and booleans arrive JSON-encoded; the rest stays text (stacks.config.values.program_value).
        out[key[len(NS) + 1 :]] = program_value(value) if isinstance(value, str) else value
    return out


def secret_config_keys() -> frozenset[str]:
    """The ``dynamo:`` keys set as Pulumi secrets (names only; values stay with ``get_secret``). Their values are
    checked for shape here (``stacks.config.secret_values.check_secret_values``: an empty secret, an HF token that is not one, a
    ``.dockerconfigjson`` without ``auths``), with messages that name the key and never the value."""
    merged = _all_config()
    secret = set(rc.get_config_secret_keys_env())
    keys = [k for k in merged if k.startswith(NS + ":") and (rc.is_config_secret(k) or k in secret)]
    check_secret_values({k[len(NS) + 1 :]: merged[k] for k in keys})
    return frozenset(k[len(NS) + 1 :] for k in keys)
