"""KEDA in the one layer shape: its chart (stacks/serving/autoscaling.py ``keda_chart``), once per stack, planned where
an entry scales with KEDA and the mode installs charts; every ScaledObject waits for it (``gates="autoscalers"``,
KEDA's CRDs). The ScaledObjects themselves are serving objects (``ServingPlan.autoscalers``).

The release keeps its URN: named ``keda`` (``chart_names``); it was a top-level resource before the layer was a
component, so it carries that URN as its alias (``moved_from_top_level``).
"""

from __future__ import annotations

from stacks.layers import LayerPlan
from stacks.serving.autoscaling import keda_chart


def plan_keda() -> LayerPlan:
    """KEDA's chart in its own namespace, waiting for nothing but the provider."""
    return LayerPlan(
        key="keda",
        kind="Keda",
        title="KEDA (autoscaling)",
        charts=[keda_chart()],
        chart_names={0: "keda"},
        after="nothing",
        gates="autoscalers",
        moved_from_top_level=True,
    )
