"""The pinned charts and plugin images of ``versions.yaml`` as the plans use them: ``chart_pin``, ``plugin_image`` and
``HelmSpec`` (one Helm release: chart, version, namespace, values), plus the names several layers share (the platform's
namespace, the toleration of every GPU node taint). Data only: every plan layer reads it, none is read back."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Optional

from stacks.registry.versions import MANIFEST, versions

# The Dynamo platform's namespace (the operator, etcd, NATS), which the serving layer's NetworkPolicies admit.
PLATFORM_NAMESPACE = "dynamo-system"
# Tolerates ``nvidia.com/gpu=<anything>:NoSchedule`` (our ``true`` and the ``present`` some GB200 pools use): every
# DaemonSet that must run on GPU nodes (device plugins, DCGM exporter) carries it.
GPU_TOLERATION = {"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}


def _pin(section: str, key: str) -> dict:
    entries = versions().get(section) or {}
    if key not in entries:
        raise KeyError(f"{section}.{key} is not in {MANIFEST.name}; known: {sorted(entries)}")
    return entries[key]


def chart_pin(key: str) -> dict:
    """``{repo, chart, version}`` for a Helm chart in ``versions.yaml`` ``charts:``."""
    return _pin("charts", key)


def plugin_image(key: str) -> str:
    """The pinned image of a device plugin in ``versions.yaml`` ``plugins:``."""
    return _pin("plugins", key)["image"]


@dataclass(frozen=True)
class HelmSpec:
    """One Helm release: what ``helm install <name> <repo>/<chart> --version <version> -n <namespace>`` would do."""

    name: str
    chart: str
    version: str
    repo: str
    namespace: str
    values: dict = field(default_factory=dict, hash=False, compare=False)

    @property
    def archive_url(self) -> str:
        """The packaged chart's URL (NGC documents installing ``dynamo-platform`` from it)."""
        return f"{self.repo.rstrip('/')}/charts/{self.chart}-{self.version}.tgz"


def helm_spec(key: str, name: str, namespace: str, values: dict, version: Optional[str] = None) -> HelmSpec:
    """The release ``name`` of the chart pinned as ``charts.<key>`` (``version`` overrides the pin), in ``namespace``."""
    pin = chart_pin(key)
    return HelmSpec(
        name=name,
        chart=pin["chart"],
        version=str(version or pin["version"]),
        repo=pin["repo"],
        namespace=namespace,
        values=values,
    )
