"""Worker starts against a live DGD's compile cache: does a second replica find the first one's compile artifacts on the
shared model-cache volume?

What is real: the DGD, the PersistentVolumeClaim and the ConfigMaps are read back from the API server after the real
Pulumi engine's ``up``; each replica's environment is the one the Dynamo operator gives the container (the DGD's
``spec.env`` first, the container's own entries of the same name winning: DynamoGraphDeployment CRD, ``spec.env``);
the path ``VLLM_CACHE_ROOT`` names is resolved through the container's ``volumeMounts`` (the longest ``mountPath``
that holds it, its ``subPath`` and ``readOnly``) to the pod volume and the claim it mounts, as the kubelet does; and a
real compiler compiles, with its cache put under that directory, in one process per replica started one after another.

What stands in, and why: vLLM's torch.compile (Inductor) and Triton's JIT cannot run here (no GPU; the PyPI torch wheel
needs the CUDA libraries and download.pytorch.org's CPU wheels are not reachable), so the compiler is CPython's own
bytecode compiler, whose on-disk cache an environment variable redirects as ``VLLM_CACHE_ROOT`` redirects vLLM's:
``PYTHONPYCACHEPREFIX`` ("If this is set, Python will write .pyc files in a mirror directory tree at this path,
instead of in __pycache__ directories within the source tree", https://docs.python.org/3/using/cmdline.html). Like
vLLM's cache it is keyed by what was compiled (the source's path, size and modification time, and the interpreter's
magic number) and written atomically (importlib's ``_write_atomic``: a temporary file, then ``os.replace``), so a
concurrent writer never leaves a torn artifact. Every replica "image" holds the model code at the same path, as the
replicas of one component run one image. ``python -v`` says which start compiled ("created '<pyc>'") and which loaded
("code object from '<pyc>'").

The host directory that stands for a claim's volume is one per claim (``volumes/<claimName>``): every pod that mounts
the claim sees the same files, which is what ReadWriteMany promises across nodes.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path, PurePosixPath

# vLLM's variable (https://docs.vllm.ai/en/latest/api/vllm/envs/: VLLM_CACHE_ROOT, default ~/.cache/vllm, holds
# torch_compile_cache/).
VLLM_CACHE_ROOT = "VLLM_CACHE_ROOT"
MODEL_CODE = "def forward(x):\n    return [v * 2 + 1 for v in x]\n"


@dataclass(frozen=True)
class Start:
    """One replica's start: where its compile cache lives on the volume, and whether it compiled or loaded."""

    replica: int
    claim: str
    path: Path  # the host directory standing for $VLLM_CACHE_ROOT in this replica
    compiled: bool
    loaded: bool


def effective_env(dgd: dict, container: dict) -> dict[str, str]:
    """The container's environment as the operator gives it: the DGD's ``spec.env`` first, the container's own entries
    of the same name winning (DynamoGraphDeployment CRD v1beta1, ``spec.env``)."""
    out: dict[str, str] = {}
    for e in [*(dgd["spec"].get("env") or []), *(container.get("env") or [])]:
        if "value" in e:
            out[e["name"]] = str(e["value"])
    return out


def volume_path(pod_spec: dict, container: dict, path: str, volumes_root: Path) -> tuple[str, Path]:
    """(claim name, host directory) of ``path`` inside ``container``: the mount with the longest ``mountPath`` that
    holds it (the kubelet's view), which must be a writable mount of a PersistentVolumeClaim."""
    p = PurePosixPath(path)
    mounts = [
        m
        for m in container.get("volumeMounts") or []
        if p == PurePosixPath(m["mountPath"]) or PurePosixPath(m["mountPath"]) in p.parents
    ]
    assert mounts, f"{path} is on no volume of container {container['name']}: it lives and dies with the container"
    mount = max(mounts, key=lambda m: len(PurePosixPath(m["mountPath"]).parts))
    assert not mount.get("readOnly"), f"{path} is under the read-only mount {mount['mountPath']}: nothing can be written there"
    volume = next(v for v in pod_spec.get("volumes") or [] if v["name"] == mount["name"])
    # A read-only claim source "will force the ReadOnly setting in VolumeMounts" (PersistentVolumeClaimVolumeSource,
    # Kubernetes API reference): every mount of the volume is read-only, whatever the mount says.
    assert not (volume.get("persistentVolumeClaim") or {}).get("readOnly"), (
        f"{path} is on volume {mount['name']}, whose claim source is read-only: the kubelet mounts it read-only"
    )
    claim = (volume.get("persistentVolumeClaim") or {}).get("claimName")
    assert claim, f"{path} is on volume {mount['name']}, which is not a PersistentVolumeClaim: {sorted(volume)}"
    rel = p.relative_to(PurePosixPath(mount["mountPath"]))
    return claim, volumes_root / claim / (mount.get("subPath") or "") / rel


def start_replicas(dgd: dict, component: str, replicas: int, work: Path) -> list[Start]:
    """Start ``replicas`` replicas of ``component`` one after another, each compiling the same model code with its
    compile cache where its container's ``VLLM_CACHE_ROOT`` lands on the volume."""
    comp = next(c for c in dgd["spec"]["components"] if c["name"] == component)
    spec = comp["podTemplate"]["spec"]
    container = next(c for c in spec["containers"] if VLLM_CACHE_ROOT in effective_env(dgd, c))
    root = effective_env(dgd, container)[VLLM_CACHE_ROOT]
    image = work / "image"  # the model code at one path, as in every replica of one image
    image.mkdir(parents=True, exist_ok=True)
    model = image / "standin_model.py"
    if not model.exists():
        model.write_text(MODEL_CODE)
    starts = []
    for replica in range(replicas):
        claim, path = volume_path(spec, container, root, work / "volumes")
        path.mkdir(parents=True, exist_ok=True)
        env = {
            "PATH": os.environ.get("PATH", ""),
            "PYTHONPATH": str(image),
            "PYTHONPYCACHEPREFIX": str(path / "bytecode"),
        }
        out = subprocess.run(
            [sys.executable, "-v", "-c", "import standin_model; assert standin_model.forward([1]) == [3]"],
            env=env,
            capture_output=True,
            text=True,
            check=True,
            timeout=60,
        ).stderr
        pyc = re.escape(str(path / "bytecode"))
        compiled = re.search(rf"# created '{pyc}/\S*standin_model\.\S+\.pyc'", out) is not None
        loaded = re.search(rf"# code object from '{pyc}/\S*standin_model\.\S+\.pyc'", out) is not None
        starts.append(Start(replica, claim, path, compiled, loaded))
    return starts
