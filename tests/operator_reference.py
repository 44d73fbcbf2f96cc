"""Dynamo facts read from the upstream reference files, for tests that must not take their expectations from the
product's own constants.

- ``dynamo-next/OPERATOR-LABELS.md`` (located as tests/test_drift.py does: ``$DYNAMO_NEXT_DIR``, else
  ``$DYNAMO_REFERENCE/dynamo-next``, else ``../shared/reference/dynamo-next``): the pod label keys the Dynamo operator
  stamps (section 1) and its port names and numbers (section 2);
- ``platform/`` (``$DYNAMO_REFERENCE/platform``, else ``../shared/reference/platform``): the dynamo-platform chart's
  NATS client port (values.yaml ``nats.config.nats.port``), etcd port (values.yaml ``etcdAddr`` format) and install
  namespace (dynamo-platform.md, the documented ``helm install ... -n <namespace>``).

A missing file skips the test (fails under CI=true), as the other reference tests do (conftest.missing).
"""

from __future__ import annotations

import re
from functools import lru_cache
from pathlib import Path


from stacks.cli import fidelity
from stacks.registry import yaml_text

# A label row of OPERATOR-LABELS.md section 1 is picked by what it says the value is, never by the key itself:
# role -> (column, pattern the cell of that column matches). Each pattern must pick exactly one row.
_LABEL_ROWS = {
    "component_type": ("frontend", r"`frontend`"),
    "sub_component_type": ("prefill", r".*converted from v1alpha1.*"),
    "metrics_enabled": ("frontend", r'`"true"`'),
    "dgd_name": ("frontend", r"DGD name"),
    "component": ("frontend", r"component name.*"),
    "dynamo_namespace": ("frontend", r"dynamo namespace"),
    "worker_hash": ("worker", r"worker generation hash"),
    "selector": ("frontend", r"`<dcd-name>` \(Deployment selector\)"),
}
_COLUMNS = ("frontend", "worker", "prefill", "decode")


def _need(path: Path) -> Path:
    if not path.is_file():
        from conftest import REFERENCE_SETUP, missing

        missing(f"no reference file {path}", REFERENCE_SETUP)
    return path


def operator_labels_path() -> Path:
    return fidelity.snapshot_dir("dynamo-next") / "OPERATOR-LABELS.md"


def _section(text: str, number: int) -> list[str]:
    lines = text.splitlines()
    start = next(i for i, l in enumerate(lines) if l.startswith(f"## {number}."))
    end = next((i for i in range(start + 1, len(lines)) if lines[i].startswith("## ")), len(lines))
    return lines[start + 1 : end]


def _table(lines: list[str]) -> list[list[str]]:
    rows = [[c.strip() for c in l.strip().strip("|").split("|")] for l in lines if l.startswith("|")]
    return [r for r in rows[1:] if not set("".join(r)) <= set("-: ")]  # drop the header and the |---| line


@lru_cache(maxsize=None)
def _label_table(path: Path) -> tuple[tuple[tuple[str, ...], dict], ...]:
    out = []
    for row in _table(_section(path.read_text(), 1)):
        keys = tuple(re.findall(r"`([^`]+)`", row[0]))
        out.append((keys, dict(zip(_COLUMNS, row[1:5]))))
    return tuple(out)


def label_keys() -> dict[str, str]:
    """role -> the operator's pod label key (OPERATOR-LABELS.md section 1), plus ``discovery_backend`` and
    ``discovery_enabled`` (the row of two keys whose frontend values are ``kubernetes`` / ``"true"``)."""
    table = _label_table(_need(operator_labels_path()))
    out = {}
    for role, (column, pattern) in _LABEL_ROWS.items():
        hits = [keys for keys, cells in table if len(keys) == 1 and re.fullmatch(pattern, cells[column])]
        assert len(hits) == 1, (role, hits)
        out[role] = hits[0][0]
    [pair] = [keys for keys, cells in table if len(keys) == 2 and cells["frontend"].startswith('`kubernetes` / `"true"`')]
    out["discovery_backend"], out["discovery_enabled"] = pair
    return out


def operator_ports() -> dict[str, int]:
    """Port name -> number from OPERATOR-LABELS.md section 2: each row's first port name and the first number of
    its Number cell (``http`` 8000, ``system`` 9090, ``nixl`` 19090, ``metrics`` 9085 (planner), ``grpc`` 9002);
    rows without a number (``system-0``/``system-1``) are left out."""
    out = {}
    for row in _table(_section(_need(operator_labels_path()).read_text(), 2)):
        name, number = re.match(r"`([^`]+)`", row[0]), re.match(r"(\d+)\b", row[1])
        if name and number:
            out[name.group(1)] = int(number.group(1))
    return out


def platform_dir() -> Path:
    return fidelity.reference_root() / "platform"


def platform_facts() -> dict:
    """``nats_port``, ``etcd_port`` and ``namespace`` of the dynamo-platform chart (module docstring)."""
    values_path = _need(platform_dir() / "dynamo-platform-values.yaml")
    values = yaml_text.load(values_path.read_text())
    etcd = re.search(r"Format: `http://hostname:(\d+)`.*\n\s*etcdAddr:", values_path.read_text())
    install = re.search(
        r"helm install dynamo-platform \S+ -n (\S+) --create-namespace", _need(platform_dir() / "dynamo-platform.md").read_text()
    )
    assert etcd and install
    return {
        "nats_port": int(values["nats"]["config"]["nats"]["port"]),
        "etcd_port": int(etcd.group(1)),
        "namespace": install.group(1),
    }
