"""The one table of cluster modes: ``dynamo:cluster.mode`` -> its ``ClusterMode`` (stacks/modes/__init__.py). The
program and the shells look a stack's mode up here (``cluster_mode``) and ask it; nothing else chooses by mode name
(tests/test_layout.py refuses comparisons of a mode with a mode name outside stacks/modes/)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from stacks.modes import ClusterMode
from stacks.modes.eks import EksMode
from stacks.modes.kubeconfig import KubeconfigMode
from stacks.modes.render import RenderMode
from stacks.modes.stack import StackMode

if TYPE_CHECKING:
    from stacks.config import ClusterConfig

CLUSTER_MODES: dict[str, ClusterMode] = {m.name: m for m in (RenderMode(), KubeconfigMode(), StackMode(), EksMode())}


def cluster_mode(cluster: "ClusterConfig") -> ClusterMode:
    """The mode of a parsed ``dynamo:cluster`` (the config variant's ``mode``)."""
    return CLUSTER_MODES[cluster.mode]
