"""Where the serving objects go: a directory of YAML (no cluster), an existing cluster, or a new EKS cluster."""
from __future__ import annotations

import os
from typing import Any, Literal, Optional

from pydantic import ValidationError

from .config import NS, ConfigError, _Model, _error_text


class ClusterConfig(_Model):
    # render: write manifests to render_dir (no cluster, no credentials); kubeconfig: an existing cluster.
    mode: Literal["render", "kubeconfig", "eks"] = "render"
    render_dir: str = "rendered"
    kubeconfig_path: Optional[str] = None
    context: Optional[str] = None


def cluster_config(raw: dict[str, Any]) -> ClusterConfig:
    try:
        return ClusterConfig.model_validate(raw.get("cluster") or {})
    except ValidationError as e:
        errs = [dict(x, loc=("cluster",) + tuple(x["loc"])) for x in e.errors()]
        raise ConfigError("invalid stack config:\n  " + "\n  ".join(_error_text(x) for x in errs)) from None


def kubernetes_provider(raw: dict[str, Any], dynamo_config):
    import pulumi
    import pulumi_kubernetes as k8s

    cc = cluster_config(raw)
    if cc.mode == "render":
        return k8s.Provider("render", render_yaml_to_directory=cc.render_dir)
    if cc.mode == "kubeconfig":
        kubeconfig = dynamo_config.get_secret("kubeconfig")  # content, kept secret
        if kubeconfig is None:
            path = cc.kubeconfig_path or os.environ.get("KUBECONFIG")
            if not path:
                raise pulumi.RunError(f"{NS}:cluster.mode is kubeconfig but neither {NS}:kubeconfig (secret) nor {NS}:cluster.kubeconfigPath nor KUBECONFIG is set")
            kubeconfig = pulumi.Output.secret(open(os.path.expanduser(path)).read())
        return k8s.Provider("cluster", kubeconfig=kubeconfig, context=cc.context)
    raise pulumi.RunError(f"{NS}:cluster.mode 'eks' needs the cluster layer, which this program does not build yet")
