"""Where the serving objects go (``dynamo:cluster``): a directory of YAML, an existing cluster, a new EKS cluster,
or the cluster of another stack (``mode: stack``, a Pulumi StackReference to a cluster-only stack)."""
from __future__ import annotations

from typing import Any, Literal, Optional

from pydantic import ValidationError, field_validator, model_validator

from .cluster import EksConfig
from .config import NS, ConfigError, _camel, _key_error, validation_error

import re

MODES = ("render", "kubeconfig", "eks", "stack")
# A stack name as StackReference takes it: org/project/stack (Pulumi Cloud: the org or user; a DIY backend: the
# literal "organization"), or the bare stack name on a legacy DIY backend (Pulumi automation docs,
# fullyQualifiedStackName: "legacy DIY backends ... only use the stack name").
_STACK_REF = re.compile(r"(?:[A-Za-z0-9][-A-Za-z0-9_.]*/[A-Za-z0-9][-A-Za-z0-9_.]*/)?[A-Za-z0-9][-A-Za-z0-9_.]*")


class ClusterConfig(EksConfig):
    # render: write manifests to render_dir (no cluster, no credentials); kubeconfig: an existing cluster
    # (secret dynamo:kubeconfig, or kubeconfigPath/KUBECONFIG, and context); eks: create the cluster (EKS keys).
    # stack: the cluster of a cluster-only stack (``stack``: org/project/name), through a Pulumi StackReference.
    mode: Literal["render", "kubeconfig", "eks", "stack"] = "render"
    stack: Optional[str] = None
    render_dir: str = "rendered"
    kubeconfig_path: Optional[str] = None
    context: Optional[str] = None
    # Device plugins for the target's fabric and the NVIDIA stack on an existing cluster (EKS always installs them).
    install_device_plugins: bool = False
    # Dynamo platform: default on for eks, off for existing clusters (they usually have it).
    install_platform: Optional[bool] = None  # type: ignore[assignment]

    @field_validator("render_dir", "kubeconfig_path", "context")
    @classmethod
    def _not_blank(cls, v, info):
        if v is not None and (not v.strip() or v != v.strip() or "\x00" in v):
            extra = ("; a render stack writes its manifests to this directory and never talks to a cluster"
                     if info.field_name == "render_dir" else "")
            raise ValueError(f"{v!r} is empty or has surrounding whitespace{extra}")
        return v

    @model_validator(mode="after")
    def _keys_for_mode(self):
        """A key of another mode would be ignored silently (e.g. ``region`` on a render stack): refuse it."""
        own = {
            "render": {"render_dir"},
            "kubeconfig": {"kubeconfig_path", "context", "install_device_plugins", "install_platform"},
            "eks": set(EksConfig.model_fields) | {"install_platform"},
            "stack": {"stack"},
        }
        for key in sorted(self.model_fields_set - {"mode"}):
            if key not in own[self.mode]:
                modes = [m for m in MODES if key in own[m]]
                raise _key_error(_camel(key), f"{getattr(self, key)!r} has no effect with cluster.mode {self.mode!r}; "
                                              f"it applies to mode {' or '.join(repr(m) for m in modes)}")
        if self.mode == "stack":
            if not self.stack:
                raise _key_error("stack", "not set; cluster.mode stack serves on the cluster of a cluster-only stack: "
                                          "set cluster.stack to its name, e.g. org/dynamo/h100-cluster")
            if not _STACK_REF.fullmatch(self.stack):
                raise _key_error("stack", f"{self.stack!r} is not a stack name org/project/stack (e.g. org/dynamo/h100-cluster; "
                                          "a DIY backend's org is 'organization') or a bare stack name (legacy DIY backends)")
            # Pulumi limits stack (and project) names to 100 characters (pulumi/pulumi pkg/backend/diy store.go:
            # "stack names are limited to 100 characters and may only contain alphanumeric, hyphens, underscores, or periods").
            long = [p for p in self.stack.split("/") if len(p) > 100]
            if long:
                raise _key_error("stack", f"{self.stack[:40]!r}... has a name part of {len(long[0])} characters; Pulumi stack and "
                                          "project names are at most 100 characters (org/project/stack)")
        return self

    def platform_wanted(self) -> bool:
        # mode stack: the cluster stack installs the platform
        return self.mode == "eks" if self.install_platform is None else bool(self.install_platform)


def cluster_config(raw: dict[str, Any]) -> ClusterConfig:
    value = raw.get("cluster")
    if value is None:
        value = {}
    if not isinstance(value, dict):
        raise ConfigError(f"{NS}:cluster: {value!r} is not a mapping; set cluster.mode to one of {', '.join(repr(m) for m in MODES)} "
                          "with its keys, e.g. {mode: render, renderDir: rendered}")
    try:
        return ClusterConfig.model_validate(value, by_name=False)  # camelCase keys only, as in the stack file
    except ValidationError as e:
        raise validation_error(e, ("cluster",), ClusterConfig) from None
