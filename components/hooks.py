"""The program's resource hooks: registered under fixed names at the start of every run, so that the engine finds them
whatever this run declares, and each works from its own arguments (the resource's last state, its name).

Hooks are recorded in the state by name, and the engine calls a resource's delete and error hooks also when it deletes
a resource the program no longer declares (a removed ``dynamo:serve`` entry, a namespace change, a renamed object): a
hook whose name this run did not register stops the update ("hook ... was not registered"). Named hooks exist for
exactly that: "the engine needs to be able to identify a hook when a resource is deleted"
(https://www.pulumi.com/docs/reference/pkg/nodejs/pulumi/pulumi/interfaces/ResourceHookBinding.html).

- ``dynamo-kept`` (after_delete, on the retainOnDelete namespace and model-cache claim): says which object was left in
  the cluster, where, why, and how to delete or re-adopt it (stacks/program/retained.py ``kept_item``).
- ``dynamo-delete-guard`` (before_delete, on every serving-layer object, also on preview): refuses the delete of an
  object that this run declares again as another resource, the create-then-delete that would take down a live
  deployment when a URN changes without an alias (``delete_refusal`` says how to keep it). A teardown that says so
  (``DYNAMO_DESTROY=1``) is never refused.
- ``dynamo-wait-failed`` (on_error, on every awaited object): says what was awaited, what was seen last and how to
  look (stacks/serving/waits.py); for an object this run does not declare, the engine's errors as they are.

Delete hooks make the engine refuse a ``pulumi destroy`` without ``--run-program`` (it could not call them), so every
stack is destroyed with ``pulumi destroy --run-program`` (``make local-down`` does).
"""

from __future__ import annotations

import os
from typing import Any, Callable, Optional

import pulumi
from pulumi.resource_hooks import ErrorHook, ResourceHookBinding, ResourceHookOptions

from stacks.program.retained import TEARDOWN_ENV, delete_refusal, kept_item, kept_message, object_identity

KEPT_HOOK = "dynamo-kept"
GUARD_HOOK = "dynamo-delete-guard"
WAIT_HOOK = "dynamo-wait-failed"


class ProgramHooks:
    """The hooks of one program run; what this run declares (identity -> (type, resource name)) and awaits."""

    def __init__(self) -> None:
        self.declared: dict[tuple[str, str, str, str], tuple[str, str]] = {}
        self.waits: dict[str, Callable[[list[str]], None]] = {}
        self.kept = pulumi.ResourceHook(KEPT_HOOK, self._say_kept)
        self.guard = pulumi.ResourceHook(GUARD_HOOK, self._refuse_moved, ResourceHookOptions(on_dry_run=True))
        self.wait_failed = ErrorHook(WAIT_HOOK, self._say_wait_failed)

    @staticmethod
    def _last_state(args: Any) -> dict:
        return dict(args.old_outputs or args.old_inputs or {})

    def _say_kept(self, args: Any) -> None:
        item = kept_item(self._last_state(args))  # names only: never the object's data
        if item is not None:
            pulumi.log.warn(kept_message(item))

    def _refuse_moved(self, args: Any) -> None:
        if os.environ.get(TEARDOWN_ENV) == "1":
            return
        obj = self._last_state(args)
        identity = object_identity(obj.get("apiVersion"), obj.get("kind"), obj.get("metadata") or {})
        if not identity:
            return
        declared = self.declared.get(identity)
        if declared is not None and declared != (args.type, args.name):
            raise Exception(delete_refusal(args.urn, identity, declared[1]))

    def _say_wait_failed(self, args: Any) -> bool:
        say = self.waits.get(args.name)
        if say is not None:
            say(list(args.errors or []))
        return False  # never retry: the message is the point

    def bind(
        self,
        resource_name: str,
        api_version: str,
        kind: str,
        metadata: dict,
        *,
        kept: bool = False,
        on_error: Optional[Callable[[list[str]], None]] = None,
        hooks: Optional[ResourceHookBinding] = None,
    ) -> ResourceHookBinding:
        """The hooks of one Kubernetes object (added to ``hooks`` when given): the guard; the kept message when the
        object is retained on delete; ``on_error(errors)`` when its create, update or delete fails. Records the object as
        declared by this run as the resource ``resource_name`` of the provider's type for ``api_version`` and ``kind``."""
        identity = object_identity(api_version, kind, metadata)
        if identity is not None:
            self.declared[identity] = (resource_type(api_version, kind), resource_name)
        binding = hooks or ResourceHookBinding()
        binding.before_delete = list(binding.before_delete or []) + [self.guard]
        if kept:
            binding.after_delete = list(binding.after_delete or []) + [self.kept]
        if on_error is not None:
            self.waits[resource_name] = on_error
            binding.on_error = list(binding.on_error or []) + [self.wait_failed]
        return binding


def resource_type(api_version: str, kind: str) -> str:
    """The Kubernetes provider's type token of an object: ``kubernetes:core/v1:Namespace``,
    ``kubernetes:nvidia.com/v1beta1:DynamoGraphDeployment`` (the core group is spelled ``core``)."""
    return f"kubernetes:{api_version if '/' in api_version else 'core/' + api_version}:{kind}"


_RUNS: dict[int, ProgramHooks] = {}


def program_hooks() -> ProgramHooks:
    """This run's hooks, registered on the first call (one set per engine connection: unit tests run several programs
    in one process, each against its own mock monitor)."""
    from pulumi.runtime.settings import get_monitor

    key = id(get_monitor())
    if key not in _RUNS:
        _RUNS[key] = ProgramHooks()
    return _RUNS[key]
