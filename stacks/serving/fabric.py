"""Fabric profiles: move a disaggregated DGD's KV transfer onto another RDMA fabric.

Upstream ships these as agent-applied profiles (recipes/addons/providers); here they are
data plus one pure function. Only AWS EFA is implemented: it is the one fabric that needs
a non-default NIXL backend (LIBFABRIC), an EFA device count derived from the worker's GPU
count, and privileges for registering GPU memory. Used when a target's native fabric
(InfiniBand, GKE RDMA, Nscale) is not what the cluster has, e.g. an H200 recipe on EKS.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field

NATIVE_FABRIC_RESOURCES = ("rdma/", "networking.gke.io.networks/")
GKE_INTERFACES_ANNOTATION = "networking.gke.io/interfaces"


@dataclass(frozen=True)
class FabricProfile:
    name: str
    device: str
    devices_per_gpu: int
    env: dict[str, str]
    engine_env: dict[str, dict[str, str]]
    kv_backend: str
    capabilities: tuple[str, ...] = ("IPC_LOCK", "SYS_PTRACE")
    privileged: bool = True
    notes: list[str] = field(default_factory=list)


PROFILES = {
    "aws-efa": FabricProfile(
        name="aws-efa",
        device="vpc.amazonaws.com/efa",
        devices_per_gpu=4,  # fallback only: apply_profile takes the instance's figure from stacks/registry/gpus.py
        env={"FI_PROVIDER": "efa", "FI_EFA_USE_DEVICE_RDMA": "1", "FI_EFA_ENABLE_SHM_TRANSFER": "0", "FI_LOG_LEVEL": "warn"},
        engine_env={
            "vllm": {"DYN_KVBM_NIXL_BACKEND_LIBFABRIC": "true", "DYN_KVBM_NIXL_BACKEND_UCX": "false"},
            "trtllm": {"TRTLLM_NIXL_KVCACHE_BACKEND": "LIBFABRIC"},
        },
        kv_backend="LIBFABRIC",
    )
}


class FabricError(ValueError):
    pass


def _with_backend(text: str, backend: str) -> str:
    cfg = json.loads(text)
    extra = cfg.setdefault("kv_connector_extra_config", {})
    # UCX over EFA is not RDMA: the profile's backend replaces it rather than trailing it.
    extra["backends"] = [b for b in extra.get("backends", []) if b not in ("UCX", backend)] + [backend]
    return json.dumps(cfg, separators=(",", ":"))


SCRIPT_KV_CONFIG = re.compile(r"(--kv-transfer-config[ =]')(\{[^']*\})(')")


def _select_backend(args: list[str], backend: str) -> bool:
    """Select the backend in ``--kv-transfer-config``, as a flag or inside a launcher script."""
    for i, a in enumerate(args):
        if isinstance(a, str) and SCRIPT_KV_CONFIG.search(a):
            args[i] = SCRIPT_KV_CONFIG.sub(lambda m: m.group(1) + _with_backend(m.group(2), backend) + m.group(3), a)
            return True
        if a == "--kv-transfer-config" and i + 1 < len(args):
            args[i + 1] = _with_backend(args[i + 1], backend)
            return True
        if isinstance(a, str) and a.startswith("--kv-transfer-config="):
            args[i] = "--kv-transfer-config=" + _with_backend(a.split("=", 1)[1], backend)
            return True
    return False


def _role(comp: dict) -> str | None:
    for ctr in comp["podTemplate"]["spec"]["containers"]:
        args = (ctr.get("command") or []) + (ctr.get("args") or [])
        for i, a in enumerate(args):
            if a == "--disaggregation-mode" and i + 1 < len(args):
                return args[i + 1]
            if isinstance(a, str) and a.startswith("--disaggregation-mode="):
                return a.split("=", 1)[1]
    return None


def apply_profile(dgd: dict, profile_name: str, target_id: str, devices_per_gpu: int | None = None) -> None:
    """Rewrite the prefill/decode workers of ``dgd`` in place for the named fabric profile.
    ``devices_per_gpu``: the instance's EFA devices per GPU (``stacks.registry.gpus.InstanceShape.efa_per_gpu``:
    p5/p5e 4, p5en 2, p6-b200 1); each worker requests its GPU count times that."""
    profile = PROFILES[profile_name]
    per_gpu = profile.devices_per_gpu if devices_per_gpu is None else devices_per_gpu
    framework = dgd["spec"].get("backendFramework", "vllm")
    workers = [c for c in dgd["spec"]["components"] if c.get("type") in ("prefill", "decode")]
    if not workers:  # Motif-3 marks both roles as type worker and tells them apart by --disaggregation-mode
        workers = [c for c in dgd["spec"]["components"] if c.get("type") != "frontend" and _role(c) in ("prefill", "decode")]
    if not workers:
        raise FabricError(f"{target_id} has no disaggregated workers: a fabric profile only applies to prefill/decode workers")
    for comp in workers:
        pod = comp["podTemplate"]["spec"]
        (comp["podTemplate"].get("metadata") or {}).get("annotations", {}).pop(GKE_INTERFACES_ANNOTATION, None)
        main = next(c for c in pod["containers"] if c["name"] == "main")
        res = main.setdefault("resources", {})
        gpus = int((res.get("limits") or res.get("requests") or {}).get("nvidia.com/gpu", 0))
        for part in ("requests", "limits"):
            section = res.setdefault(part, {})
            for k in [k for k in section if k.startswith(NATIVE_FABRIC_RESOURCES)]:
                del section[k]
            section[profile.device] = str(gpus * per_gpu)
        sc = main.setdefault("securityContext", {})
        if profile.privileged:
            sc["privileged"] = True
        caps = sc.setdefault("capabilities", {}).setdefault("add", [])
        caps += [c for c in profile.capabilities if c not in caps]
        env = main.setdefault("env", [])
        wanted = {**profile.env, **profile.engine_env.get(framework, {})}
        env[:] = [e for e in env if e.get("name") not in wanted] + [{"name": k, "value": v} for k, v in wanted.items()]
        if (
            framework == "vllm"
            and not _select_backend(main.setdefault("args", []), profile.kv_backend)
            and not _select_backend(main.get("command") or [], profile.kv_backend)
        ):
            raise FabricError(
                f"{target_id} {comp['name']}: no --kv-transfer-config argument to select the {profile.kv_backend} backend in"
            )
