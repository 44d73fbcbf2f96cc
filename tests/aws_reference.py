"""The AWS instance facts of the reference data (``aws/FACTS.md``, table "Instances (GPU, EFA)"), parsed for the tests.

These are the tests' oracle for the EC2 instance data the product keeps in ``stacks/registry/gpus.py`` (GPUs per
instance, network cards, EFA interfaces, EFA devices per GPU, architecture): a test that wants one of these figures
reads it here, never from ``stacks.registry.gpus``, so a wrong figure in the product fails a test instead of blessing
itself. Each row of the table names its source (EC2 "EFA-supported instance types", amazon-vpc-cni-k8s
``vpc_ip_resource_limit.go``, ...).

The file is found like every other piece of reference data (``tests/conftest.py reference_file``: ``$DYNAMO_REFERENCE``,
else ``../shared/reference``); without it the calling test is skipped, or fails under ``CI=true``. Call these
functions inside a test (or a fixture), not at import time.

A figure the table does not state (``verify``: the p6e-gb200 EFA layout is to be read from DescribeInstanceTypes) is
``None``; a test must not take the product's value in its place silently.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path
from typing import Optional

from conftest import reference_file

FACTS = "aws/FACTS.md"
SECTION = "## Instances (GPU, EFA)"


@dataclass(frozen=True)
class InstanceFacts:
    instance_type: str
    gpus: int  # GPUs per instance
    gpu_model: str  # e.g. H100
    network_cards: int
    efa_interfaces: Optional[int]  # None: the table does not state it (see ``source``)
    efa_per_gpu: Optional[int]
    arch: str  # x86_64 | arm64
    source: str

    @property
    def kubernetes_arch(self) -> str:
        return {"x86_64": "amd64", "arm64": "arm64"}[self.arch]


def _cells(line: str) -> list[str]:
    return [c.strip() for c in line.strip().strip("|").split("|")]


def _column(header: list[str], starts: str) -> int:
    for i, name in enumerate(header):
        if name.lower().startswith(starts.lower()):
            return i
    raise AssertionError(f"{FACTS}: the table {SECTION!r} has no column starting {starts!r} (columns: {header})")


def parse(text: str, where: str = FACTS) -> dict[str, InstanceFacts]:
    """The rows of the "Instances (GPU, EFA)" table, by instance type. A row that contradicts itself (EFA per GPU not
    the EFA interfaces shared by the GPUs) is refused, naming it."""
    lines = text.splitlines()
    try:
        start = next(i for i, line in enumerate(lines) if line.strip() == SECTION)
    except StopIteration:
        raise AssertionError(f"{where}: no section {SECTION!r}") from None
    table = []
    for line in lines[start + 1 :]:
        if line.startswith("## "):
            break
        if line.strip().startswith("|"):
            table.append(_cells(line))
    if len(table) < 3:
        raise AssertionError(f"{where}: the section {SECTION!r} has no table rows")
    header, rows = table[0], [r for r in table[2:] if r and not set("".join(r)) <= set("-: ")]
    col = {k: _column(header, k) for k in ("Instance", "GPUs", "Network cards", "EFA per GPU", "Arch", "Source")}
    out: dict[str, InstanceFacts] = {}
    source = ""
    for r in rows:
        name = r[col["Instance"]]
        gpus = re.fullmatch(r"(\d+)\s+(\S+)", r[col["GPUs"]])
        if not gpus:
            raise AssertionError(f"{where}: {name}: GPUs {r[col['GPUs']]!r} is not '<count> <model>'")
        cards_efa = re.fullmatch(r"(\d+)\s*/\s*(\d+)", r[col["Network cards"]])
        if cards_efa:
            cards, efa = int(cards_efa.group(1)), int(cards_efa.group(2))
        else:  # e.g. "17 network cards; EFA layout to be taken from DescribeInstanceTypes ..."
            lead = re.match(r"(\d+)\s+network cards", r[col["Network cards"]])
            if not lead:
                raise AssertionError(f"{where}: {name}: network cards / EFA {r[col['Network cards']]!r} is not understood")
            cards, efa = int(lead.group(1)), None
        per_gpu = int(r[col["EFA per GPU"]]) if r[col["EFA per GPU"]].isdigit() else None
        source = source if r[col["Source"]] == "same" else r[col["Source"]]  # "same": the row above's source
        facts = InstanceFacts(name, int(gpus.group(1)), gpus.group(2), cards, efa, per_gpu, r[col["Arch"]], source)
        if facts.arch not in ("x86_64", "arm64"):
            raise AssertionError(f"{where}: {name}: arch {facts.arch!r} is neither x86_64 nor arm64")
        if (efa is None) != (per_gpu is None) or (efa is not None and efa // facts.gpus != per_gpu):
            raise AssertionError(f"{where}: {name}: {efa} EFA interfaces on {facts.gpus} GPUs is not {per_gpu} per GPU")
        out[name] = facts
    return out


@lru_cache(maxsize=None)
def _parsed(path: Path) -> dict[str, InstanceFacts]:
    return parse(path.read_text(), str(path))


def instances() -> dict[str, InstanceFacts]:
    """Every instance of the reference table (the test is skipped, or fails under CI=true, without the reference)."""
    return _parsed(reference_file(FACTS))


def instance(instance_type: str) -> InstanceFacts:
    """One instance's facts; an instance the reference does not list fails, naming the file."""
    facts = instances()
    if instance_type not in facts:
        raise AssertionError(
            f"{instance_type} is not in the reference's AWS instance facts ({FACTS}, {SECTION!r}: "
            f"{', '.join(sorted(facts))}); add its row, with its source, before a test relies on it"
        )
    return facts[instance_type]


def efa_interfaces(instance_type: str) -> int:
    """The instance's EFA interfaces (also the ``vpc.amazonaws.com/efa`` capacity its nodes advertise); fails when the
    reference does not state them."""
    facts = instance(instance_type)
    if facts.efa_interfaces is None:
        raise AssertionError(f"{FACTS} does not state the EFA interfaces of {instance_type} ({facts.source})")
    return facts.efa_interfaces


def efa_per_gpu(instance_type: str) -> int:
    efa_interfaces(instance_type)
    return instance(instance_type).efa_per_gpu
