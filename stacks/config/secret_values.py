"""The shape of each secret value a stack holds (``dynamo:hfToken``, ``ngcApiKey``, ``imagePullSecret``, ``kubeconfig``,
``frontDoorApiKeys``), checked before any resource and reported without the value itself."""

from __future__ import annotations

import json
import re
from typing import Any, Optional

from stacks.config.keys import NS, ConfigError
from stacks.config.front_door import api_key_problems


# Hugging Face user access tokens start with ``hf_`` (https://huggingface.co/docs/hub/security-tokens shows
# ``hf_...`` tokens), followed by letters and digits (``_`` tolerated: test canaries use it).
_HF_TOKEN = re.compile(r"hf_[A-Za-z0-9_]*[A-Za-z0-9][A-Za-z0-9_]*", re.ASCII)


def secret_value_problems(values: dict[str, Any]) -> list[str]:
    """``dynamo:<key>: <what is wrong>`` for every secret value of the wrong shape (the value itself never shown)."""
    out = []
    for key, value in sorted(values.items()):
        if value is None:
            continue
        text = value if isinstance(value, str) else json.dumps(value)
        if key in ("ngcApiKey", "hfToken", "imagePullSecret", "kubeconfig") and not text.strip():
            out.append(
                f"{NS}:{key}: the secret is empty; set it with `pulumi config set --secret {NS}:{key} <value>` or remove it"
            )
        elif key == "hfToken" and not _HF_TOKEN.fullmatch(text):
            out.append(
                f"{NS}:hfToken: the secret is not a Hugging Face token (hf_ followed by letters and digits, no spaces "
                f"or quotes; value not shown); copy it from https://huggingface.co/settings/tokens"
            )
        elif key == "ngcApiKey" and (text != text.strip() or any(c.isspace() or not c.isprintable() for c in text)):
            out.append(
                f"{NS}:ngcApiKey: the secret contains whitespace or control characters (value not shown); "
                f"paste the NGC API key alone"
            )
        elif key == "frontDoorApiKeys":
            try:
                out.extend(api_key_problems(json.loads(text) if isinstance(value, str) else value))
            except ValueError:
                out.extend(api_key_problems(None))
        elif key == "imagePullSecret":
            why = _dockerconfigjson_problem(text)
            if why:
                out.append(
                    f"{NS}:imagePullSecret: {why} (value not shown); it must be a whole .dockerconfigjson: "
                    '{"auths": {"<registry>": {"auth": "<base64 user:password>"}}}, e.g. the content of ~/.docker/config.json'
                )
    return out


def _dockerconfigjson_problem(text: str) -> Optional[str]:
    """A ``kubernetes.io/dockerconfigjson`` Secret's ``.dockerconfigjson`` is a JSON object whose ``auths`` maps each
    registry to its credentials (https://kubernetes.io/docs/concepts/configuration/secret/#docker-config-secrets)."""
    try:
        doc = json.loads(text)
    except ValueError:
        return "the secret is not JSON"
    if not isinstance(doc, dict) or not isinstance(doc.get("auths"), dict) or not doc["auths"]:
        return 'the secret is JSON without a non-empty "auths" mapping'
    if not all(isinstance(k, str) and k and isinstance(v, dict) for k, v in doc["auths"].items()):
        return 'an "auths" entry is not a registry mapped to its credentials'
    return None


def check_secret_values(values: dict[str, Any]) -> None:
    problems = secret_value_problems(values)
    if problems:
        raise ConfigError("invalid stack config:\n  " + "\n  ".join(problems))
