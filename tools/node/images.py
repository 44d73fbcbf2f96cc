"""The local node's container images, built without a registry or a container engine: OCI image layouts written as
tar archives that ``ctr images import`` takes (tools/kube-node.sh imports them into the node's containerd).

- ``pause``: busybox (Debian's busybox-static, tools/kube/node/debs.lock) running ``sleep`` forever. It is the CRI
  sandbox image and also answers to the name the pre-puller's and the capacity placeholder's pause container use
  (``capacity-placeholder`` in stacks/registry/versions.yaml): a local stand-in under that name, never pulled.
- ``runtime``: the serving rig's locked Python environment (tools/rig.sh: ai-dynamo 1.6.1 and ai-dynamo-runtime 1.6.1
  from PyPI, huggingface_hub, the tokenizer wheel) with this host's CPython 3.11 at its own path, bash and busybox's
  tools, and the shared libraries they link (read with ldd). ``python3 -m dynamo.frontend`` is Dynamo's real frontend;
  ``python3 -m dynamo.vllm`` is tools/node/worker.py, which checks the recipe's command line against vLLM 0.31.0's flag
  table (tools/node/vllm_args.py) and runs Dynamo's mocker; ``python3 -m dynamo.trtllm`` is tools/node/trtllm_worker.py,
  which parses it with the wheel's own TensorRT-LLM worker parser and runs the mocker too. It answers to every image name the catalog's targets
  render without a digest, so those pods run exactly as rendered; a name with a digest cannot be reproduced and is
  substituted by the tests (tests/local_node.py).

What stands in, in the runtime image, and why (each in one place):
- ``HF_ENDPOINT`` in the image's config points huggingface_hub at the model hub the tests serve on the node's bridge
  (tools/node/hub.py), so the download Job's own ``snapshot_download`` runs against it;
- ``python3 -m pip`` is tools/node/offline_pip.py: pods here reach no package index, so an ``install`` of what the
  image already has succeeds without upgrading (Ultra's download Job upgrades huggingface_hub first);
- ``/etc/profile`` (read by the recipes' ``bash -lc``) defines ``ulimit`` so that raising the locked-memory limit,
  which this sandbox refuses to every process (no CAP_SYS_RESOURCE; an EKS node's containerd runs with
  ``LimitMEMLOCK=infinity``), prints a warning instead of failing the script.

Usage: images.py build [--busybox PATH]  prints one line per image: ``<name> <ref> <archive> [<alias ref> ...]``.
Archives are cached in the toolchain cache under a hash of every input (this directory's files, the rig environment,
busybox, the vLLM source), so a second build is a lookup.
"""

from __future__ import annotations

import argparse
import hashlib
import io
import json
import os
import re
import stat
import subprocess
import sys
import tarfile
import urllib.request
from pathlib import Path
from typing import Iterable, Iterator

HERE = Path(__file__).resolve().parent
REPO = HERE.parent.parent
CACHE = Path(os.environ.get("DYNAMO_TOOLCHAIN_CACHE", Path.home() / ".cache" / "dynamo-pulumi-toolchain"))
HUB_ENDPOINT = "http://10.88.0.1:18080"  # tools/node/hub.py HUB_PORT on the node's bridge address (tools/kube-node.sh)
PAUSE_REF = "docker.io/dynamo-local/pause:busybox-1.35.0"
PAUSE_ALIASES = ("registry.k8s.io/pause:3.10",)
RUNTIME_REF = "docker.io/dynamo-local/runtime:1.6.1"
PATH = "/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
STDLIB_SKIP = {
    "test",
    "idlelib",
    "tkinter",
    "turtledemo",
    "ensurepip",
    "lib2to3",
    "site-packages",
    "config-3.11-x86_64-linux-gnu",
}

PROFILE = """# /etc/profile of the local node's runtime image (tools/node/images.py).
# This sandbox refuses to raise the locked-memory limit to every process (no CAP_SYS_RESOURCE); an EKS node's
# containerd runs with LimitMEMLOCK=infinity, where the recipes' `ulimit -l unlimited` succeeds. Here it warns instead.
ulimit() {
  builtin ulimit "$@" 2>/dev/null || echo "local node: 'ulimit $*' refused by this sandbox (no CAP_SYS_RESOURCE); continuing" >&2
}
"""
PASSWD = "root:x:0:0:root:/root:/bin/bash\ndynamo:x:1000:1000:dynamo:/home/dynamo:/bin/bash\nnobody:x:65534:65534:nobody:/nonexistent:/bin/sh\n"
GROUP = "root:x:0:\ndynamo:x:1000:\nnogroup:x:65534:\n"


class Layer:
    """A file system layer as a deterministic tar (sorted, fixed times and owners)."""

    def __init__(self) -> None:
        self.entries: dict[str, tuple] = {}  # path -> (kind, data or source or target, mode)

    def dir(self, path: str, mode: int = 0o755) -> None:
        parts = path.strip("/").split("/")
        for i in range(1, len(parts) + 1):
            p = "/".join(parts[:i])
            if p and p not in self.entries:
                self.entries[p] = ("dir", None, mode if i == len(parts) else 0o755)

    def _parent(self, path: str) -> None:
        parent = path.strip("/").rsplit("/", 1)[0] if "/" in path.strip("/") else ""
        if parent:
            self.dir(parent)

    def file(self, path: str, data: bytes, mode: int = 0o644) -> None:
        self._parent(path)
        self.entries[path.strip("/")] = ("data", data, mode)

    def copy(self, path: str, source: Path) -> None:
        self._parent(path)
        st = source.lstat()
        if stat.S_ISLNK(st.st_mode):
            self.entries[path.strip("/")] = ("link", os.readlink(source), 0o777)
        elif stat.S_ISDIR(st.st_mode):
            self.dir(path, stat.S_IMODE(st.st_mode) | 0o555)
        else:
            self.entries[path.strip("/")] = ("src", source, stat.S_IMODE(st.st_mode) | 0o444)

    def link(self, path: str, target: str) -> None:
        self._parent(path)
        self.entries[path.strip("/")] = ("link", target, 0o777)

    def tree(self, dest: str, source: Path, skip=lambda rel: False) -> None:
        for root, dirs, files in os.walk(source):
            rel_root = Path(root).relative_to(source)
            dirs[:] = sorted(d for d in dirs if not skip(rel_root / d))
            self.copy(f"{dest}/{rel_root}".rstrip("/.") if str(rel_root) != "." else dest, Path(root))
            for d in dirs:
                if (Path(root) / d).is_symlink():
                    self.copy(f"{dest}/{rel_root / d}", Path(root) / d)
            for f in sorted(files):
                if not skip(rel_root / f):
                    self.copy(f"{dest}/{rel_root / f}", Path(root) / f)

    def write(self, out: io.BufferedIOBase) -> None:
        with tarfile.open(fileobj=out, mode="w|", format=tarfile.PAX_FORMAT) as tar:
            for path in sorted(self.entries):
                kind, what, mode = self.entries[path]
                info = tarfile.TarInfo(path)
                info.mtime, info.uid, info.gid, info.uname, info.gname, info.mode = 0, 0, 0, "", "", mode
                if path == "tmp":
                    info.mode = 0o1777
                if kind == "dir":
                    info.type = tarfile.DIRTYPE
                    tar.addfile(info)
                elif kind == "link":
                    info.type, info.linkname = tarfile.SYMTYPE, what
                    tar.addfile(info)
                elif kind == "data":
                    info.size = len(what)
                    tar.addfile(info, io.BytesIO(what))
                else:
                    info.size = what.stat().st_size
                    with open(what, "rb") as f:
                        tar.addfile(info, f)


def _elf(path: Path) -> bool:
    try:
        with open(path, "rb") as f:
            return f.read(4) == b"\x7fELF"
    except OSError:
        return False


def shared_libraries(binaries: Iterable[Path]) -> set[Path]:
    """Every shared library the binaries load (ldd), outside the trees the image already copies."""
    out: set[Path] = set()
    todo = [b for b in binaries if _elf(b)]
    for chunk in (todo[i : i + 200] for i in range(0, len(todo), 200)):
        res = subprocess.run(["ldd", *map(str, chunk)], capture_output=True, text=True)
        for line in res.stdout.splitlines():
            m = re.search(r"(?:=>\s*)?(/\S+)\s+\(0x", line)
            if m:
                out.add(Path(m.group(1)))
    return out


def _add_library(layer: Layer, lib: Path) -> None:
    """The library at its path, its symlinks resolved into the files they name (both paths present)."""
    seen = lib
    while seen.is_symlink():
        target = Path(os.path.join(seen.parent, os.readlink(seen)))
        layer.link(str(seen), os.readlink(seen))
        seen = target
    layer.copy(str(seen), seen.resolve())


def _busybox(layer: Layer, busybox: Path) -> None:
    layer.copy("bin/busybox", busybox)
    applets = subprocess.run([str(busybox), "--list"], capture_output=True, text=True, check=True).stdout.split()
    for a in applets:
        if a not in ("busybox", "bash"):
            layer.link(f"bin/{a}", "busybox")


def _oci_archive(out: Path, layer: Layer, config: dict, ref: str) -> None:
    """An OCI image layout (oci-layout, index.json, blobs) as one tar, which ``ctr images import`` reads."""
    tmp = out.with_suffix(".layer.tmp")
    with open(tmp, "wb") as f:
        layer.write(f)  # type: ignore[arg-type]
    h = hashlib.sha256()
    with open(tmp, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    layer_digest, layer_size = "sha256:" + h.hexdigest(), tmp.stat().st_size
    config = {
        "architecture": "amd64",
        "os": "linux",
        "config": config,
        "rootfs": {"type": "layers", "diff_ids": [layer_digest]},
        "history": [{"created_by": "tools/node/images.py"}],
    }
    config_blob = json.dumps(config, sort_keys=True).encode()
    manifest = {
        "schemaVersion": 2,
        "mediaType": "application/vnd.oci.image.manifest.v1+json",
        "config": {
            "mediaType": "application/vnd.oci.image.config.v1+json",
            "digest": _digest(config_blob),
            "size": len(config_blob),
        },
        "layers": [{"mediaType": "application/vnd.oci.image.layer.v1.tar", "digest": layer_digest, "size": layer_size}],
    }
    manifest_blob = json.dumps(manifest, sort_keys=True).encode()
    index = {
        "schemaVersion": 2,
        "manifests": [
            {
                "mediaType": "application/vnd.oci.image.manifest.v1+json",
                "digest": _digest(manifest_blob),
                "size": len(manifest_blob),
                "annotations": {"io.containerd.image.name": ref, "org.opencontainers.image.ref.name": ref.rsplit(":", 1)[1]},
            }
        ],
    }
    part = out.with_suffix(".tmp")
    with tarfile.open(part, "w", format=tarfile.PAX_FORMAT) as tar:

        def add(name: str, data: bytes) -> None:
            info = tarfile.TarInfo(name)
            info.size, info.mtime = len(data), 0
            tar.addfile(info, io.BytesIO(data))

        add("oci-layout", b'{"imageLayoutVersion": "1.0.0"}')
        add("index.json", json.dumps(index).encode())
        add(f"blobs/sha256/{_digest(config_blob)[7:]}", config_blob)
        add(f"blobs/sha256/{_digest(manifest_blob)[7:]}", manifest_blob)
        info = tarfile.TarInfo(f"blobs/sha256/{layer_digest[7:]}")
        info.size, info.mtime = layer_size, 0
        with open(tmp, "rb") as f:
            tar.addfile(info, f)
    tmp.unlink()
    part.rename(out)


def _digest(data: bytes) -> str:
    return "sha256:" + hashlib.sha256(data).hexdigest()


def _lock() -> dict[str, tuple[str, str]]:
    out = {}
    for line in (HERE / "images.lock").read_text().splitlines():
        if line.strip() and not line.startswith("#"):
            name, url, sha = line.split()
            out[name] = (url, sha)
    return out


def fetch(name: str) -> Path:
    """A pinned download of images.lock, in the cache, checked against its SHA-256."""
    url, sha = _lock()[name]
    dest = CACHE / "node-downloads" / url.rsplit("/", 1)[1]
    if not dest.is_file() or hashlib.sha256(dest.read_bytes()).hexdigest() != sha:
        dest.parent.mkdir(parents=True, exist_ok=True)
        data = urllib.request.urlopen(url, timeout=300).read()
        if hashlib.sha256(data).hexdigest() != sha:
            raise SystemExit(f"{url}: SHA-256 differs from tools/node/images.lock")
        dest.write_bytes(data)
    return dest


def rig_env() -> Path:
    res = subprocess.run([str(REPO / "tools" / "rig.sh")], capture_output=True, text=True)
    if res.returncode != 0:
        raise SystemExit(f"tools/rig.sh failed:\n{res.stderr[-2000:]}")
    return Path(res.stdout.strip().splitlines()[-1])


def catalog_image_names() -> list[str]:
    """Every runtime image name (vllm-runtime, tensorrtllm-runtime, ...) and model-cache Job image name (without a
    digest) that a catalog target's containers render, from the catalog itself."""
    sys.path.insert(0, str(REPO))
    from stacks import catalog
    from stacks.program.render import render_target

    names: set[str] = set()
    for t in catalog.targets().values():
        for obj in render_target(t.id):
            for c in _containers(obj):
                image = str(c.get("image") or "")
                # the engines' runtime images, and the images of the model-cache Jobs (Ultra's: python:3.10-slim)
                wanted = "-runtime:" in image or (obj.get("kind") == "Job" and "aiperf" not in image)
                if image and "@" not in image and wanted:
                    names.add(image if "/" in image.split(":")[0] else f"docker.io/library/{image}")
    return sorted(names)


def _containers(obj: dict) -> Iterator[dict]:
    if obj.get("kind") == "DynamoGraphDeployment":
        for comp in obj["spec"]["components"]:
            spec = (comp.get("podTemplate") or {}).get("spec") or {}
            yield from [*(spec.get("initContainers") or []), *(spec.get("containers") or [])]
    elif obj.get("kind") in ("Job", "DaemonSet", "Deployment"):
        spec = obj["spec"]["template"]["spec"]
        yield from [*(spec.get("initContainers") or []), *(spec.get("containers") or [])]


def _inputs_hash(*parts: bytes) -> str:
    h = hashlib.sha256()
    for p in parts:
        h.update(hashlib.sha256(p).digest())
    return h.hexdigest()[:16]


def build_pause(busybox: Path) -> Path:
    key = _inputs_hash(Path(__file__).read_bytes(), busybox.read_bytes())
    out = CACHE / "node-images" / f"pause-{key}.tar"
    if not out.is_file():
        out.parent.mkdir(parents=True, exist_ok=True)
        layer = Layer()
        _busybox(layer, busybox)
        cfg = {"Entrypoint": ["/bin/busybox", "sleep", "2147483647"], "Env": [f"PATH={PATH}"]}
        _oci_archive(out, layer, cfg, PAUSE_REF)
    return out


def build_runtime(busybox: Path) -> Path:
    env = rig_env()
    sdist = fetch("vllm-sdist")
    own = b"".join(
        (HERE / n).read_bytes()
        for n in ("images.py", "worker.py", "trtllm_worker.py", "vllm_args.py", "offline_pip.py", "images.lock")
    )
    key = _inputs_hash(own, str(env).encode(), busybox.read_bytes(), sys.version.encode())
    out = CACHE / "node-images" / f"runtime-{key}.tar"
    if out.is_file():
        return out
    sys.path.insert(0, str(HERE))
    import vllm_args

    out.parent.mkdir(parents=True, exist_ok=True)
    layer = Layer()
    _busybox(layer, busybox)
    layer.copy("bin/bash", Path("/bin/bash").resolve())
    python_home = Path(os.path.realpath(env / "bin" / "python")).parent.parent  # the interpreter's prefix
    stdlib = f"lib/python{sys.version_info.major}.{sys.version_info.minor}"

    def skip_prefix(rel: Path) -> bool:
        parts = rel.parts
        return (len(parts) >= 3 and parts[0] == "lib" and parts[1].startswith("python3") and parts[2] in STDLIB_SKIP) or (
            len(parts) >= 1 and parts[0] in ("include", "share")
        )

    layer.tree(str(python_home).lstrip("/"), python_home, skip_prefix)
    layer.tree("opt/dynamo", env, lambda rel: rel.parts[:1] == (".rig-complete",))
    # console scripts name the venv's cache path in their shebang: point them at the image's path
    for p in sorted((env / "bin").iterdir()):
        if p.is_file() and not p.is_symlink() and p.read_bytes()[:2] == b"#!":
            text = p.read_bytes()
            first, _, rest = text.partition(b"\n")
            if str(env).encode() in first:
                layer.file(f"opt/dynamo/bin/{p.name}", first.replace(str(env).encode(), b"/opt/dynamo") + b"\n" + rest, 0o755)
    site = f"opt/dynamo/{stdlib}/site-packages"
    layer.file(f"{site}/dynamo/vllm/__main__.py", (HERE / "worker.py").read_bytes())
    layer.file(f"{site}/dynamo_local_worker.py", (HERE / "worker.py").read_bytes())
    layer.file(f"{site}/dynamo/trtllm/__main__.py", (HERE / "trtllm_worker.py").read_bytes())
    if not (env / stdlib / "site-packages" / "pip").exists():
        layer.file(f"{site}/pip/__init__.py", b"")
        layer.file(f"{site}/pip/__main__.py", (HERE / "offline_pip.py").read_bytes())
    layer.file("opt/dynamo-local/vllm-flags.json", json.dumps(vllm_args.from_sdist(sdist)).encode())
    # Wrappers, not symlinks: Python finds a virtual environment's pyvenv.cfg beside the path it was started by, not
    # beside a symlink's target, so `python3` must run as /opt/dynamo/bin/python3 to see the environment's packages.
    wrapper = b'#!/bin/sh\nexec /opt/dynamo/bin/python3 "$@"\n'
    for name in ("python3", "python"):
        layer.file(f"usr/local/bin/{name}", wrapper, 0o755)
        layer.file(f"usr/bin/{name}", wrapper, 0o755)
    elves = [python_home / "bin" / f"python{sys.version_info.major}.{sys.version_info.minor}", Path("/bin/bash")]
    for tree in (python_home / stdlib / "lib-dynload", env / stdlib / "site-packages"):
        elves += [p for p in tree.rglob("*.so*") if p.is_file()]
    for lib in sorted(shared_libraries(elves)):
        if not (str(lib).startswith(str(python_home)) or str(lib).startswith(str(env))):
            _add_library(layer, lib)
    layer.file("etc/profile", PROFILE.encode())
    layer.file("etc/passwd", PASSWD.encode())
    layer.file("etc/group", GROUP.encode())
    layer.dir("tmp", 0o1777)
    layer.dir("home/dynamo")
    layer.dir("root", 0o755)
    cfg = {
        "Env": [f"PATH={PATH}", "LANG=C.UTF-8", "PYTHONUNBUFFERED=1", f"HF_ENDPOINT={HUB_ENDPOINT}"],
        "WorkingDir": "/",
    }
    _oci_archive(out, layer, cfg, RUNTIME_REF)
    return out


def prune(keep: Iterable[Path]) -> None:
    """Archives of earlier inputs are removed: each is 1.6 GB and nothing reads them again."""
    keep = set(keep)
    for p in (CACHE / "node-images").glob("*.tar"):
        if p not in keep:
            p.unlink()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("command", choices=["build"])
    ap.add_argument("--busybox", type=Path, required=True, help="the busybox-static binary (tools/kube-node.sh passes it)")
    args = ap.parse_args()
    pause = build_pause(args.busybox)
    runtime = build_runtime(args.busybox)
    prune([pause, runtime])
    print(" ".join(["pause", PAUSE_REF, str(pause), *PAUSE_ALIASES]))
    print(" ".join(["runtime", RUNTIME_REF, str(runtime), *catalog_image_names()]))


if __name__ == "__main__":
    main()
