"""Reading YAML: PyYAML's safe loading, with libyaml's parser where PyYAML was built with it.

The same constructors as ``yaml.safe_load`` (only standard tags, no Python objects), a C parser instead of the pure
Python one: the Dynamo CRDs (1.6 MB for the DGD's), the upstream recipes and the rendered manifests are read by the
fidelity check, ``drift``, ``diff`` and the simulators, and the pure Python parser spent most of their time there
(measured on this machine: about half of a run of the fidelity, drift and operator tests). Writing YAML stays with
``yaml.safe_dump``, whose output the goldens and reviews compare.
"""
from __future__ import annotations

from typing import Any, Iterator

import yaml

SafeLoader = getattr(yaml, "CSafeLoader", yaml.SafeLoader)


def load(text: str | bytes) -> Any:
    """One YAML document, as ``yaml.safe_load`` reads it."""
    return yaml.load(text, Loader=SafeLoader)


def load_all(text: str | bytes) -> Iterator[Any]:
    """Every document of a YAML stream, as ``yaml.safe_load_all`` reads them."""
    return yaml.load_all(text, Loader=SafeLoader)
