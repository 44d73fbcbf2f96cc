"""What several engine tests start for themselves: a local control plane of their own (``tools/kube-local.sh``, in a
state directory the test owns) and a local Helm repository serving stand-in charts (there is no network here)."""
from __future__ import annotations

import contextlib
import hashlib
import io
import os
import subprocess
import tarfile
from pathlib import Path
from typing import Iterator

import yaml

ROOT = Path(__file__).resolve().parent.parent
KUBE_LOCAL = ROOT / "tools" / "kube-local.sh"


@contextlib.contextmanager
def control_plane(state: Path, *, apiserver_only: bool = False, crds: bool = True, timeout: float = 900,
                  quiet: bool = True) -> Iterator[dict]:
    """Start ``tools/kube-local.sh`` with its state (kubeconfig, certs, logs) in ``state``; stop it on exit. Yields
    the environment it ran with. ``apiserver_only``: etcd and kube-apiserver, no KWOK simulation or
    controller manager; ``crds``: install the Dynamo CRDs."""
    env = {**os.environ, "KUBE_LOCAL_DIR": str(state)}
    if apiserver_only:
        env.update(KUBE_LOCAL_NO_SIM="1", KUBE_LOCAL_NO_KCM="1")
    if not crds:
        env["KUBE_LOCAL_SKIP_CRDS"] = "1"
    out = subprocess.DEVNULL if quiet else None
    subprocess.run([str(KUBE_LOCAL), "start"], check=True, env=env, timeout=timeout, stdout=out)
    try:
        yield env
    finally:
        subprocess.run([str(KUBE_LOCAL), "stop"], env=env, timeout=120, stdout=out)


def chart_repo(root: Path, name: str, versions: list[str]) -> Path:
    """A Helm repository in ``root`` serving a one-ConfigMap stand-in chart ``name`` at each version."""
    entries = []
    for v in versions:
        files = {f"{name}/Chart.yaml": yaml.safe_dump({"apiVersion": "v2", "name": name, "version": v, "appVersion": v}),
                 f"{name}/templates/cm.yaml": ("apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: {{ .Release.Name }}-pin\n"
                                               "data:\n  chartVersion: {{ .Chart.Version | quote }}\n")}
        buf = io.BytesIO()
        with tarfile.open(fileobj=buf, mode="w:gz") as tar:
            for path, text in files.items():
                data = text.encode()
                info = tarfile.TarInfo(path)
                info.size = len(data)
                tar.addfile(info, io.BytesIO(data))
        tgz = f"{name}-{v}.tgz"
        (root / tgz).write_bytes(buf.getvalue())
        entries.append({"apiVersion": "v2", "name": name, "version": v, "appVersion": v, "urls": [tgz],
                        "digest": hashlib.sha256(buf.getvalue()).hexdigest(), "created": "2026-12-01T00:00:00Z"})
    (root / "index.yaml").write_text(yaml.safe_dump({"apiVersion": "v1", "entries": {name: entries}, "generated": "2026-12-01T00:00:00Z"}))
    return root
