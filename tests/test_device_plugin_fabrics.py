"""The platform layer of an existing cluster installs the device plugins of every entry's fabric, not the first entry's
only: a ``dynamo:serve`` stack with an InfiniBand and an EFA target gets the RDMA shared device plugin and the EFA
device plugin (names from the upstream manifests in ../shared/reference/device-plugins/), and two fabrics that need one
plugin configured two ways are refused before any resource, naming the key and the entries."""

from __future__ import annotations

import re

import pytest

from stacks import catalog
from stacks.cluster.platform import fabrics_objects
from conftest import reference_file
from stacks.program import build_program
from stacks.config.keys import ConfigError

PLUGINS = "device-plugins"  # in the reference data (tests/conftest.py reference_file)


def _first(fabric: str) -> str:
    return next(tid for tid, t in sorted(catalog.targets().items()) if t.fabric == fabric and t.topology == "disagg")


def _stack(*tids: str) -> dict:
    return {
        "cluster": {"mode": "kubeconfig", "kubeconfigPath": "/dev/null", "installDevicePlugins": True},
        "serve": [{"target": t, "namespace": f"ns{i}"} for i, t in enumerate(tids)],
    }


def test_an_infiniband_and_an_efa_entry_get_both_device_plugins():
    program = build_program(_stack(_first("infiniband"), _first("aws-efa")), "s")
    daemonsets = {o["metadata"]["name"] for o in fabrics_objects(program.device_plugin_fabrics()) if o["kind"] == "DaemonSet"}
    rdma = re.search(r"^  name: (\S+)", reference_file(f"{PLUGINS}/rdma-shared/daemonset.yaml").read_text(), re.M).group(1)
    efa_chart = reference_file(f"{PLUGINS}/aws-efa/daemonset.yaml").read_text()
    assert "aws-efa-k8s-device-plugin" in efa_chart  # the chart's fullname template: the release name
    assert rdma in daemonsets and "aws-efa-k8s-device-plugin" in daemonsets, daemonsets


def test_fabrics_that_configure_one_plugin_differently_are_refused_naming_the_entries():
    fabrics = sorted({t.fabric for t in catalog.targets().values()})
    pair = [f for f in ("infiniband", "nscale") if f in fabrics]
    if len(pair) < 2:
        pytest.skip("the catalog has no nscale and infiniband targets to pair")
    with pytest.raises(
        ConfigError, match=r"dynamo:cluster.installDevicePlugins: .*dynamo:serve\[0\] on infiniband.*dynamo:serve\[1\] on nscale"
    ):
        build_program(
            _stack(_first("infiniband"), next(tid for tid, t in sorted(catalog.targets().items()) if t.fabric == "nscale")), "s"
        )
