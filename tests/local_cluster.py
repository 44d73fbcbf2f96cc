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


# The Dynamo CRDs a test control plane installs: the kind the program writes (DynamoGraphDeployment), the scaling
# adapter a KEDA ScaledObject targets, and the small DynamoModel CRD (10 kB). The operator's own
# DynamoComponentDeployment and DynamoGraphDeploymentRequest CRDs are left out: the program never writes either and no
# operator runs here, and their schemas (2.2 of the reference's 3.8 MB) were half of a control plane's start-up CPU
# (kube-apiserver 10.0 s with all five, 5.1 s with these three, measured on this 2-core machine).
TEST_CRDS = ("dynamographdeployments.nvidia.com", "dynamographdeploymentscalingadapters.nvidia.com", "dynamomodels.nvidia.com")


@contextlib.contextmanager
def control_plane(
    state: Path, *, apiserver_only: bool = False, crds: bool = True, timeout: float = 900, quiet: bool = True, node: bool = False
) -> Iterator[dict]:
    """Start ``tools/kube-local.sh`` with its state (kubeconfig, certs, logs) in ``state``; stop it on exit. Yields
    the environment it ran with. ``apiserver_only``: etcd and kube-apiserver, no KWOK simulation or
    controller manager; ``crds``: install the Dynamo CRDs of ``TEST_CRDS``; ``node``: also the real node
    (tools/kube-node.sh)."""
    env = {**os.environ, "KUBE_LOCAL_DIR": str(state), "KUBE_LOCAL_NODE": "1" if node else "0"}
    if apiserver_only:
        env.update(KUBE_LOCAL_NO_SIM="1", KUBE_LOCAL_NO_KCM="1")
    if crds:
        env["KUBE_LOCAL_CRDS"] = " ".join(TEST_CRDS)
    else:
        env["KUBE_LOCAL_SKIP_CRDS"] = "1"
    out = subprocess.DEVNULL if quiet else None
    subprocess.run([str(KUBE_LOCAL), "start"], check=True, env=env, timeout=timeout, stdout=out)
    try:
        yield env
    finally:
        subprocess.run([str(KUBE_LOCAL), "stop"], env=env, timeout=120, stdout=out)


def chart_repo(root: Path, name: str, versions: list[str], also: dict[str, list[str]] | None = None) -> Path:
    """A Helm repository in ``root`` serving a one-ConfigMap stand-in chart ``name`` at each version (and each chart
    of ``also`` at its versions: e.g. the name a chart moved to)."""
    index: dict[str, list[dict]] = {}
    for chart, chart_versions in {name: versions, **(also or {})}.items():
        for v in chart_versions:
            files = {
                f"{chart}/Chart.yaml": yaml.safe_dump({"apiVersion": "v2", "name": chart, "version": v, "appVersion": v}),
                f"{chart}/templates/cm.yaml": (
                    "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: {{ .Release.Name }}-pin\n"
                    "data:\n  chartVersion: {{ .Chart.Version | quote }}\n"
                    "  chartName: {{ .Chart.Name | quote }}\n"
                ),
            }
            buf = io.BytesIO()
            with tarfile.open(fileobj=buf, mode="w:gz") as tar:
                for path, text in files.items():
                    data = text.encode()
                    info = tarfile.TarInfo(path)
                    info.size = len(data)
                    tar.addfile(info, io.BytesIO(data))
            tgz = f"{chart}-{v}.tgz"
            (root / tgz).write_bytes(buf.getvalue())
            index.setdefault(chart, []).append(
                {
                    "apiVersion": "v2",
                    "name": chart,
                    "version": v,
                    "appVersion": v,
                    "urls": [tgz],
                    "digest": hashlib.sha256(buf.getvalue()).hexdigest(),
                    "created": "2026-12-01T00:00:00Z",
                }
            )
    (root / "index.yaml").write_text(yaml.safe_dump({"apiVersion": "v1", "entries": index, "generated": "2026-12-01T00:00:00Z"}))
    return root
