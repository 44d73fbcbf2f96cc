"""Pulumi.yaml documents every ``dynamo:`` key the program reads, and nothing else.

The keys sit under ``template.config`` (description, ``secret``), not the project ``config:`` block: in
Pulumi v3.274 a project ``config:`` key without ``default`` is required in every stack (preview/up fail with
"Stack '<name>' is missing configuration values"), and a ``default`` is written into every stack that leaves
the key out (pulumi/pulumi#21797; project.go ValidateStackConfigAndApplyProjectConfig).
"""

from __future__ import annotations

from pathlib import Path


from stacks.config.keys import NS, SECRET_KEYS, StackConfig
from stacks.serving.serve import SERVE
from stacks.config import STACK_KEYS
from stacks.registry import yaml_text

ROOT = Path(__file__).resolve().parent.parent
PROJECT = yaml_text.load((ROOT / "Pulumi.yaml").read_text())


def _program_keys() -> set[str]:
    keys = {f.alias or name for name, f in StackConfig.model_fields.items()}
    return keys | {"cluster"} | set(SECRET_KEYS) | {SERVE} | set(STACK_KEYS)


def _documented() -> dict[str, dict]:
    return (PROJECT.get("template") or {}).get("config") or {}


def test_every_key_documented_and_nothing_else():
    documented = _documented()
    assert all(k.startswith(f"{NS}:") for k in documented), sorted(documented)
    names = {k[len(NS) + 1 :] for k in documented}
    program = _program_keys()
    assert not program - names, f"keys without docs in Pulumi.yaml template.config: {sorted(program - names)}"
    assert not names - program, f"documented keys the program does not read: {sorted(names - program)}"


def test_each_key_has_a_type_and_description():
    for key, spec in _documented().items():
        desc = (spec or {}).get("description", "")
        assert desc.startswith("(") and ")" in desc and len(desc.split(")", 1)[1].strip()) > 10, key


def test_secrets_are_marked_secret():
    for key, spec in _documented().items():
        assert bool(spec.get("secret")) == (key[len(NS) + 1 :] in SECRET_KEYS), key


def test_project_config_never_makes_a_key_required():
    # A project `config:` key with no default would make every committed stack fail on preview/up.
    for key, spec in (PROJECT.get("config") or {}).items():
        assert isinstance(spec, dict) and ("default" in spec or "value" in spec), key


def test_stack_config_camel_aliases():
    # The aliases are what stacks write (storage, hfTokenSecretName...), not the Python field names.
    keys = _program_keys()
    assert {"hfTokenSecretName", "imagePullSecrets", "modelRevision", "createNamespace"} <= keys
    assert not any("_" in k for k in keys)


def test_cluster_network_keys_are_documented():
    # dynamo:cluster is one mapping; its network keys (egress, endpoints, API endpoint CIDRs) are named in its description.
    from stacks.cluster import EksConfig

    desc = _documented()[f"{NS}:cluster"]["description"]
    for field in ("nat_gateways", "s3_gateway_endpoint", "ecr_endpoints", "public_access_cidrs"):
        assert EksConfig.model_fields[field].alias in desc, field


def test_cluster_capacity_keys_are_documented():
    # The GPU capacity mode (managed node group or Karpenter NodePool) and the Karpenter pool keys, same spelling per pool.
    from stacks.cluster import EksConfig, GpuPoolConfig

    desc = _documented()[f"{NS}:cluster"]["description"]
    for field in ("capacity", "max_nodes", "consolidate_after", "ami_alias"):
        assert EksConfig.model_fields[field].alias in desc, field
        assert GpuPoolConfig.model_fields[field].alias == EksConfig.model_fields[field].alias
    assert "node-group" in desc and "karpenter" in desc
