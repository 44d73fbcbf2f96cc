"""The config layer: the raw ``dynamo:`` stack config parsed once, at the edge, into typed models (the stack's
``ProgramSpec``). May import the registry and the catalog.

Its modules: ``keys`` (the serving keys of one entry, ``StackConfig``, and the shared ``ConfigError``, ``NS`` and
message helpers), ``eks`` (the ``mode: eks`` cluster keys, ``EksConfig``), ``front_door`` (``dynamo:frontDoor``),
``secret_values`` (the shape of secret values, checked without printing them), ``pulumi_config`` (reading the
config from the Pulumi engine) and ``stack`` (the whole stack: ``parse_spec``, the cluster-mode union).

``parse_spec`` is the only place the raw ``dynamo:`` mapping is read: ``pulumi up`` (``__main__.py`` through
``stacks.program.build_program``) and ``python -m stacks render --stack`` (``stacks.program.render.program_for_stack``)
both go through it, so both refuse a configuration with the same message, before any resource. What comes out:

- ``ProgramSpec.cluster``: where the objects go, a discriminated union on ``cluster.mode`` (``RenderCluster``,
  ``KubeconfigCluster``, ``StackCluster``, ``EksCluster``); the EKS keys themselves are ``stacks.config.eks.EksConfig``;
- ``ProgramSpec.entries``: one typed ``ServeEntry`` per serving entry (a single-target stack has one, keyed
  ``dynamo``), each with its validated ``StackConfig``;
- the stack-wide sections (``observability``, ``benchmark``) and what is known of the secrets (names only).

The planning layers (``stacks.serving.serve``, ``stacks.cluster``, ``stacks.program``...) read only this spec.

May import: the registry and catalog (targets are validated against the catalog: ``stacks.config.keys.select_target``).
Nothing here imports a plan (tests/test_layout.py).

The names above are defined in ``stacks.config.stack`` and read from this package (``from stacks.config import
parse_spec``), which loads that module on first use: so importing ``stacks.config.keys`` alone, as ``render --target``
and ``render --all`` do, loads neither it nor the EKS keys.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from stacks.config.stack import *  # noqa: F403  (what type checkers see of the names below)


def __getattr__(name: str) -> Any:
    """A name of ``stacks.config.stack``, loaded on first use (the module docstring says why); kept here once read."""
    if name.startswith("__"):
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    import stacks.config.stack as stack

    if name in globals():  # a submodule the import above loaded (``stacks.config.front_door``)
        return globals()[name]
    try:
        value = getattr(stack, name)
    except AttributeError:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}") from None
    globals()[name] = value
    return value
