"""The spec: the raw stack config parsed once into typed models. May import the registry and the catalog.

The stack config, parsed once at the edge into one typed spec.

``parse_spec`` is the only place the raw ``dynamo:`` mapping is read: ``pulumi up`` (``__main__.py`` through
``stacks.program.build_program``) and ``python -m stacks render --stack`` (``stacks.program.render.program_for_stack``)
both go through it, so both refuse a configuration with the same message, before any resource. What comes out:

- ``ProgramSpec.cluster``: where the objects go, a discriminated union on ``cluster.mode`` (``RenderCluster``,
  ``KubeconfigCluster``, ``StackCluster``, ``EksCluster``); the EKS keys themselves are ``stacks.cluster.config.EksConfig``;
- ``ProgramSpec.entries``: one typed ``ServeEntry`` per serving entry (a single-target stack has one, keyed
  ``dynamo``), each with its validated ``StackConfig``;
- the stack-wide sections (``observability``, ``benchmark``) and what is known of the secrets (names only).

The planning layers (``stacks.serving.serve``, ``stacks.cluster``, ``stacks.program``...) read only this spec.

May import: the registry and catalog (targets are validated against the catalog: ``stacks.spec.config.select_target``)
and ``stacks.spec.config`` (the serving keys' models). One name comes from a planning module: ``stacks.cluster.config.EksConfig``
(and its region helpers), which stays there while the EKS keys are extended; tests/test_layout.py lists that
exception by name.

The names above are defined in ``stacks.spec.stack`` and read from this package (``from stacks.spec import
parse_spec``), which loads that module on first use: so importing ``stacks.spec.config`` alone, as ``render --target``
and ``render --all`` do, loads neither it nor the EKS plan package its ``EksConfig`` comes from.
"""
from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from stacks.spec.stack import *  # noqa: F403  (what type checkers see of the names below)


def __getattr__(name: str) -> Any:
    """A name of ``stacks.spec.stack``, loaded on first use (the module docstring says why); kept here once read."""
    if name.startswith("__"):
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    import stacks.spec.stack as stack

    if name in globals():  # a submodule the import above loaded (``stacks.spec.front_door``)
        return globals()[name]
    try:
        value = getattr(stack, name)
    except AttributeError:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}") from None
    globals()[name] = value
    return value
