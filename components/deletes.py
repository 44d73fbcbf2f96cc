"""The program's delete hooks: registered under fixed names at the start of every run, so that the engine finds them
whatever this run declares, and each names its object from its own arguments (the deleted resource's last state).

Delete hooks are recorded in the state by name, and the engine calls them when it deletes a resource, including one
the program no longer declares (a removed ``dynamo:serve`` entry, a namespace change, a move between the single-target
and serve forms): a hook whose name this run did not register stops the update ("hook ... was not registered").
Named hooks are required for delete hooks precisely so that "the engine needs to be able to identify a hook when a
resource is deleted" (https://www.pulumi.com/docs/reference/pkg/nodejs/pulumi/pulumi/interfaces/ResourceHookBinding.html).

- ``dynamo-kept`` (after_delete, on the retainOnDelete namespace and model-cache claim): says which object was left in
  the cluster, where, why, and how to delete or re-adopt it (stacks/program/retained.py ``kept_item``).
- ``dynamo-delete-guard`` (before_delete, on every serving-layer object, also on preview): refuses the delete of an
  object that this run declares again under another resource name, the create-then-delete that would take down a live
  deployment when a URN changes without an alias (``delete_refusal`` says how to keep it).
"""
from __future__ import annotations

from typing import Any, Optional

import pulumi
from pulumi.resource_hooks import ResourceHookBinding, ResourceHookOptions

from stacks.program.retained import delete_refusal, kept_item, kept_message, object_identity

KEPT_HOOK = "dynamo-kept"
GUARD_HOOK = "dynamo-delete-guard"


class DeleteHooks:
    """The two hooks of one program run, and the objects this run declares (identity -> resource name)."""

    def __init__(self) -> None:
        self.declared: dict[tuple[str, str, str, str], str] = {}
        self.kept = pulumi.ResourceHook(KEPT_HOOK, self._say_kept)
        self.guard = pulumi.ResourceHook(GUARD_HOOK, self._refuse_moved, ResourceHookOptions(on_dry_run=True))

    @staticmethod
    def _last_state(args: Any) -> dict:
        return dict(args.old_outputs or args.old_inputs or {})

    def _say_kept(self, args: Any) -> None:
        item = kept_item(self._last_state(args))  # names only: never the object's data
        if item is not None:
            pulumi.log.warn(kept_message(item))

    def _refuse_moved(self, args: Any) -> None:
        obj = self._last_state(args)
        identity = object_identity(obj.get("apiVersion"), obj.get("kind"), obj.get("metadata") or {})
        declared_as = self.declared.get(identity) if identity else None
        if declared_as is not None and declared_as != args.name:
            raise Exception(delete_refusal(args.urn, identity, declared_as))

    def bind(self, resource_name: str, api_version: str, kind: str, metadata: dict, *, kept: bool = False,
             hooks: Optional[ResourceHookBinding] = None) -> ResourceHookBinding:
        """The hooks of one Kubernetes object (added to ``hooks`` when given): the guard, and the kept message when the
        object is retained on delete. Records the object as declared by this run under ``resource_name``."""
        identity = object_identity(api_version, kind, metadata)
        if identity is not None:
            self.declared[identity] = resource_name
        binding = hooks or ResourceHookBinding()
        binding.before_delete = list(binding.before_delete or []) + [self.guard]
        if kept:
            binding.after_delete = list(binding.after_delete or []) + [self.kept]
        return binding


_RUNS: dict[int, DeleteHooks] = {}


def delete_hooks() -> DeleteHooks:
    """This run's hooks, registered on the first call (one set per engine connection: unit tests run several programs
    in one process, each against its own mock monitor)."""
    key = id(pulumi.runtime.settings.get_monitor())
    if key not in _RUNS:
        _RUNS[key] = DeleteHooks()
    return _RUNS[key]
