"""Where the serving objects go (``dynamo:cluster``): a directory of YAML, an existing cluster, or a new EKS cluster."""
from __future__ import annotations

from typing import Any, Literal, Optional

from pydantic import ValidationError

from .cluster import EksConfig
from .config import ConfigError, _error_text


class ClusterConfig(EksConfig):
    # render: write manifests to render_dir (no cluster, no credentials); kubeconfig: an existing cluster
    # (secret dynamo:kubeconfig, or kubeconfigPath/KUBECONFIG, and context); eks: create the cluster (EKS keys).
    mode: Literal["render", "kubeconfig", "eks"] = "render"
    render_dir: str = "rendered"
    kubeconfig_path: Optional[str] = None
    context: Optional[str] = None
    # Device plugins for the target's fabric and the NVIDIA stack on an existing cluster (EKS always installs them).
    install_device_plugins: bool = False
    # Dynamo platform: default on for eks, off for existing clusters (they usually have it).
    install_platform: Optional[bool] = None  # type: ignore[assignment]

    def platform_wanted(self) -> bool:
        return self.mode == "eks" if self.install_platform is None else bool(self.install_platform)


def cluster_config(raw: dict[str, Any]) -> ClusterConfig:
    try:
        return ClusterConfig.model_validate(raw.get("cluster") or {})
    except ValidationError as e:
        errs = [dict(x, loc=("cluster",) + tuple(x["loc"])) for x in e.errors()]
        raise ConfigError("invalid stack config:\n  " + "\n  ".join(_error_text(x) for x in errs)) from None
