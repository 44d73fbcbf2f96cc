"""What ``pulumi destroy`` keeps (resources registered with retainOnDelete), why, and how to delete or re-adopt each.

Pulumi removes a retainOnDelete resource from the stack's state without calling the provider's Delete, so it stays in
the cluster or account while the destroy summary counts it as deleted
(https://www.pulumi.com/docs/iac/concepts/options/retainondelete/). Two readers of the same items:

- the program itself, whenever the engine drops a kept object (a destroy, a removed entry, a namespace change):
  components/hooks.py binds one ``after_delete`` hook under a fixed name to each kept Kubernetes object, which logs
  ``kept_message(kept_item(<the object's last state>))``. Delete hooks run only when the program runs, so the stack is
  destroyed with ``pulumi destroy --run-program``; a plain ``pulumi destroy`` of a stack whose state records delete
  hooks stops before deleting anything and asks for that flag (engine: pulumi/pulumi pkg/engine/destroy.go
  ``newDestroySource``, pulumi/pulumi#19933; docs: https://www.pulumi.com/docs/iac/concepts/resources/options/hooks/ and
  ResourceHookBinding "delete hooks require that destroy operations are run with --run-program",
  https://www.pulumi.com/docs/reference/pkg/nodejs/pulumi/pulumi/interfaces/ResourceHookBinding.html);
- ``python -m stacks destroy-report --stack NAME`` (stacks/cli/retained.py), before or after a destroy, from the stack
  file alone; it also names what the cluster layer keeps on EKS (file system, its network).

Items are dicts with ``kind``, ``name``, ``why``, ``delete``, ``adopt``; they name objects only, never a secret value.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Mapping, Optional

from stacks.config.keys import NS

if TYPE_CHECKING:  # stacks.program imports this module (and re-exports its functions)
    from stacks.program import ProgramPlan

# A destroy that runs the program also runs its checks on the objects' last outputs: a download Job that ended Failed
# would stop `pulumi destroy --run-program` with the same error as `up`, and a plain destroy is refused while the
# kept objects' delete hooks are in the state. The program cannot tell a destroy from an `up` (the engine runs it the
# same way: pulumi/pulumi#18751, "custom resources ... becoming same steps"), so the teardown says so itself: with
# this variable set to 1 the program skips the Job-failure check (components/serving.py); `make local-down` sets it.
TEARDOWN_ENV = "DYNAMO_DESTROY"
TEARDOWN_HINT = (
    f"to destroy the stack instead: {TEARDOWN_ENV}=1 pulumi destroy --run-program (it skips this check and says what it keeps)"
)


def adopt_claim(ns: str) -> str:
    return (
        f"a `pulumi up` whose config serves this model in namespace {ns} finds the claim and keeps its cached model (the "
        f"protected claim is applied onto, never recreated); or point another stack at it with {NS}:storage.existingClaim"
    )


def namespace_item(ns: str) -> dict[str, str]:
    """The namespace of a protected model cache (deleting a namespace deletes its claims)."""
    return {
        "kind": "Namespace",
        "name": ns,
        "why": f"it holds the protected model cache (deleting a namespace deletes its claims); {NS}:storage.protect is true",
        "delete": f"kubectl delete namespace {ns}   (deletes the claim and the cached model with it)",
        "adopt": f"a `pulumi up` whose config serves namespace {ns} applies onto it",
    }


def claim_item(ns: str, claim: str) -> dict[str, str]:
    """The protected model-cache claim."""
    return {
        "kind": "PersistentVolumeClaim",
        "name": f"{ns}/{claim}",
        "why": f"the downloaded model is kept for the next `up` ({NS}:storage.protect: true)",
        "delete": f"kubectl delete pvc {claim} -n {ns}",
        "adopt": adopt_claim(ns),
    }


def kept_item(obj: Mapping[str, Any]) -> Optional[dict[str, str]]:
    """What was kept, from the kept object's own last state (the engine's ``old_outputs`` or ``old_inputs`` of the
    resource it just dropped): its kind, namespace and name, never what the current config would name. So after a
    namespace change or a removed entry the message names the object that is left behind, not the live one.
    None for an object the program does not keep."""
    md = obj.get("metadata") or {}
    kind, name = obj.get("kind"), md.get("name")
    if not isinstance(name, str) or not name:
        return None
    if kind == "Namespace":
        return namespace_item(name)
    if kind == "PersistentVolumeClaim" and isinstance(md.get("namespace"), str):
        return claim_item(md["namespace"], name)
    return None


def kept_message(item: dict[str, str]) -> str:
    """What the program logs when the engine drops a kept object from the state (the after_delete hook)."""
    return (
        f"kept {item['kind']} {item['name']} (retainOnDelete: it left the stack's state, the summary counts it as deleted, "
        f"it is still in the cluster)\n"
        f"    why:    {item['why']}\n    delete: {item['delete']}\n    adopt:  {item['adopt']}"
    )


def retained_after_destroy(program: "ProgramPlan") -> list[dict[str, str]]:
    """What ``pulumi destroy`` leaves behind, why, and how to delete or re-adopt each. Empty when
    ``storage.protect: false`` everywhere."""
    out: list[dict[str, str]] = []
    for e in program.entries:
        plan = e.plan
        if plan.cache_pvc is None or not e.cfg.storage.protect:
            continue
        ns, claim = plan.dgd["metadata"]["namespace"], plan.claim_name
        if e.owns_namespace and plan.namespace is not None:
            out.append(namespace_item(ns))
        out.append(claim_item(ns, claim))
    out += program.mode.retained_after_destroy(program.cluster_plan)
    return out


def retained_report(program: "ProgramPlan") -> str:
    items = retained_after_destroy(program)
    if not items:
        return (
            f"`pulumi destroy` of stack {program.stack} keeps nothing: {NS}:storage.protect is false, so the namespace, "
            f"the model cache and any file system are deleted"
        )
    lines = [
        f"`pulumi destroy` of stack {program.stack} deletes everything else, and keeps (retainOnDelete; the summary counts "
        f"them as deleted because they leave the stack's state):"
    ]
    for it in items:
        lines += [
            f"- {it['kind']} {it['name']}",
            f"    why:    {it['why']}",
            f"    delete: {it['delete']}",
            f"    adopt:  {it['adopt']}",
        ]
    return "\n".join(lines)


# --------------------------------------------------------------------------- deletes of an object the config still asks for


def object_identity(api_version: Any, kind: Any, metadata: Mapping[str, Any]) -> Optional[tuple[str, str, str, str]]:
    """What identifies a Kubernetes object in the cluster: (API group, kind, namespace, name); the version is left out
    (one object answers at every served version). None when the name is not known yet."""
    name = metadata.get("name") if isinstance(metadata, Mapping) else None
    if not isinstance(name, str) or not isinstance(kind, str):
        return None
    group = api_version.rsplit("/", 1)[0] if isinstance(api_version, str) and "/" in api_version else ""
    ns = metadata.get("namespace")
    return group, kind, ns if isinstance(ns, str) else "", name


def delete_refusal(urn: str, identity: tuple[str, str, str, str], declared_as: str) -> str:
    """Why the program refuses to delete the object under ``urn``: this run declares the same object (``identity``)
    under another resource name, so the engine would delete the live object the new name just adopted (the provider
    creates with server-side apply, which takes over an existing object of that name). The way through keeps the
    object: drop the old name from the state only, then the next `up` manages it under the new name."""
    group, kind, ns, name = identity
    where = f"{ns}/{name}" if ns else name
    return (
        f"refusing to delete {kind} {where}{' (' + group + ')' if group else ''}: this `up` still declares it, as "
        f"resource {declared_as!r}, and deleting the old resource {urn} would delete the live object in the cluster. "
        f"Keep it: `pulumi state delete '{urn}' --yes` (removes the old name from the state only), then `pulumi up` again"
    )
