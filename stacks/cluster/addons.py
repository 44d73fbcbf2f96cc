"""EKS add-ons: the pinned add-on versions for a control-plane version (the add-ons themselves are listed by
``stacks.cluster.plan.assemble_plan``)."""
from __future__ import annotations

from stacks.cluster.config import _eks_pin


def addon_versions(kubernetes_version: str) -> dict[str, str]:
    """The pinned EKS add-on versions for a control-plane version (stacks/registry/versions.yaml eks.addons); an add-on
    without a pin there gets EKS's default version for the cluster's Kubernetes version (CreateAddon without
    addonVersion)."""
    return dict((_eks_pin("addons") or {}).get(str(kubernetes_version)) or {})
