"""Secrets on a cluster this ``up`` creates: the checks on ``dynamo:ngcApiKey`` / ``dynamo:imagePullSecret`` and the
HF token, and the image pull Secret (``.dockerconfigjson``) the stack writes."""

from __future__ import annotations

import base64
from typing import Optional

from stacks.config.keys import NS, ConfigError


NGC_KEY = "ngcApiKey"  # NGC API key: the stack writes the nvcr.io .dockerconfigjson from it
PULL_SECRET_KEY = "imagePullSecret"  # or a whole .dockerconfigjson (any registry)


def check_secrets_on_new_cluster(
    hf_token_secret_name: Optional[str], image_pull_secrets: tuple[str, ...], raw: dict, secret_keys: frozenset[str] | set[str]
) -> None:
    """On a cluster the same ``pulumi up`` creates, nothing else can have made a Secret: the HF token comes from
    ``dynamo:hfToken`` and every image pull secret is created from ``dynamo:ngcApiKey`` (both Pulumi secrets)."""
    if hf_token_secret_name:
        raise ConfigError(
            f"{NS}:hfTokenSecretName: {hf_token_secret_name!r} names a Secret in the EKS cluster this `pulumi up` creates, "
            f"so nothing could have made it; remove it and run `pulumi config set --secret {NS}:hfToken <token>`"
        )
    for key in (NGC_KEY, PULL_SECRET_KEY):
        if key in (raw or {}):
            raise ConfigError(
                f"{NS}:{key} is set in plain text; set it as a secret: `pulumi config set --secret {NS}:{key} <value>`"
            )
    if image_pull_secrets and not {NGC_KEY, PULL_SECRET_KEY} & set(secret_keys):
        raise ConfigError(
            f"{NS}:{NGC_KEY} is not set, but {NS}:imagePullSecrets names {list(image_pull_secrets)}, which this stack must create "
            f"on its new cluster; run `pulumi config set --secret {NS}:{NGC_KEY} <NGC API key>` (nvcr.io), or set the secret "
            f"{NS}:{PULL_SECRET_KEY} to a whole .dockerconfigjson, or remove {NS}:imagePullSecrets for public images"
        )


NGC_REGISTRY = "nvcr.io"


def pull_secret(name: str, namespace: str) -> dict:
    """A ``kubernetes.io/dockerconfigjson`` Secret for nvcr.io; ``.dockerconfigjson`` is filled by the wiring from
    the secret ``dynamo:ngcApiKey`` (user ``$oauthtoken``, NGC's documented login) and stays a Pulumi secret."""
    return {
        "apiVersion": "v1",
        "kind": "Secret",
        "metadata": {"name": name, "namespace": namespace},
        "type": "kubernetes.io/dockerconfigjson",
        "stringData": {".dockerconfigjson": "<redacted: Pulumi secret>"},
    }


def dockerconfigjson(api_key: str, registry: str = NGC_REGISTRY) -> str:
    import json

    auth = base64.b64encode(f"$oauthtoken:{api_key}".encode()).decode()
    return json.dumps({"auths": {registry: {"username": "$oauthtoken", "password": api_key, "auth": auth}}})
