"""EKS add-ons: the pinned add-on versions for a control-plane version (the add-ons themselves are listed by
``stacks.cluster.plan.assemble_plan``)."""

from __future__ import annotations

from typing import Iterable

from stacks.config.keys import NS, ConfigError
from stacks.config.eks import _eks_pin

MANIFEST = "stacks/registry/versions.yaml"


def unpinned_addons() -> dict[str, str]:
    """Add-ons installed at EKS's default version for the cluster's Kubernetes version, each with the reason no pin
    was confirmed (versions.yaml eks.unpinnedAddons)."""
    return dict(_eks_pin("unpinnedAddons") or {})


def addon_versions(kubernetes_version: str, addons: Iterable[str] = ()) -> dict[str, str]:
    """The pinned EKS add-on versions of ``addons`` for a control-plane version (versions.yaml eks.addons). An add-on
    neither pinned for that version nor listed in eks.unpinnedAddons is refused before any resource: an unpinned add-on
    would silently take whatever EKS's default is on the day of the `up`."""
    pins = dict((_eks_pin("addons") or {}).get(str(kubernetes_version)) or {})
    unpinned = unpinned_addons()
    missing = [a for a in addons if a not in pins and a not in unpinned]
    if missing:
        raise ConfigError(
            f"{NS}:cluster.kubernetesVersion: {kubernetes_version!r} has no pinned EKS add-on version for "
            f'{", ".join(missing)} ({MANIFEST} eks.addons["{kubernetes_version}"]); choose a Kubernetes '
            f"version whose add-ons are pinned there, or pin them with their source"
        )
    return {a: pins[a] for a in addons if a in pins}
