"""The local node's model hub, on the node's bridge address: enough of the Hugging Face Hub's HTTP API for the download Job's own
``snapshot_download`` (huggingface_hub 1.33, the rig's locked version, inside the node's runtime image, whose
``HF_ENDPOINT`` names this server: tools/node/images.py).

What huggingface_hub asks, and what this answers (read from huggingface_hub 1.33's ``_snapshot_download.py``,
``hf_api.py`` and ``file_download.py``):
- ``GET /api/models/<repo>/revision/<rev>`` (``HfApi.repo_info``): ``{"id", "sha", "siblings"}``;
- ``GET /api/models/<repo>/tree/<sha>?recursive=...`` (``HfApi.list_repo_tree``): one entry per file, ``type``,
  ``path``, ``size``, ``oid`` (no ``lfs`` and no ``xetHash``: plain HTTP downloads, not Xet);
- ``HEAD``/``GET /<repo>/resolve/<rev>/<path>`` (``get_hf_file_metadata`` then the download): the bytes with
  ``X-Repo-Commit``, ``ETag`` and ``Content-Length``.
Any other path answers 404, which huggingface_hub reports as the error it is.

Every repository holds the rig's model files (tests/rig.py ``layout_hf_cache``: the pinned wheel's real tokenizer, a
chat template, config.json, generation_config.json) plus the files the catalog's rendered worker scripts check in the
model directory before they start (``test -r "${MODEL_PATH}/<file>"``: Ultra's ``ultra_v3_reasoning_parser.py``).
Every request is logged (one line each, to stdout), so a test can say what was fetched.

tools/kube-node.sh starts it with the node: ``hub.py --host 10.88.0.1 --port 18080``.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import re
import sys
import tempfile
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Optional
from urllib.parse import unquote, urlparse

HERE = Path(__file__).resolve().parent
sys.path[:0] = [str(HERE.parent.parent), str(HERE.parent.parent / "tests")]

from rig import layout_hf_cache, rig_env_dir, tokenizer_file  # noqa: E402

HUB_PORT = 18080  # tools/node/images.py HUB_ENDPOINT


class Repo:
    def __init__(self, repo_id: str, files: dict[str, bytes]):
        self.files = dict(sorted(files.items()))
        digests = b"".join(hashlib.sha1(k.encode() + v).digest() for k, v in self.files.items())
        self.sha = hashlib.sha1(repo_id.encode() + b"\0" + digests).hexdigest()


def model_files(model: str, tokenizer: Path, extra: Optional[dict[str, bytes]] = None) -> dict[str, bytes]:
    """The files of one model repository: the rig's layout (tests/rig.py), read back, plus ``extra``."""
    with tempfile.TemporaryDirectory() as tmp:
        snap = layout_hf_cache(Path(tmp), model, tokenizer)
        files = {p.name: p.read_bytes() for p in snap.iterdir() if p.is_file()}
    return {**files, **(extra or {})}


class Hub:
    """The hub server; ``repos`` maps a repo id ("ORG/NAME") to its files, ``default`` serves any other id."""

    def __init__(self, host: str, port: int, tokenizer: Path, extra: Optional[dict[str, bytes]] = None):
        self.tokenizer, self.extra = tokenizer, extra or {}
        self.repos: dict[str, Repo] = {}
        self.requests: list[str] = []
        hub = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args):  # the request log is kept in hub.requests instead
                pass

            def _send(self, code: int, body: bytes, headers: Optional[dict[str, str]] = None, head: bool = False):
                self.send_response(code)
                for k, v in {"Content-Length": str(len(body)), **(headers or {})}.items():
                    self.send_header(k, v)
                self.end_headers()
                if not head:
                    self.wfile.write(body)

            def _route(self, head: bool) -> None:
                path = unquote(urlparse(self.path).path)
                hub.requests.append(f"{self.command} {path}")
                print(f"{self.command} {path}", flush=True)
                parts = path.strip("/").split("/")
                if parts[:2] == ["api", "models"] and len(parts) >= 6 and parts[4] in ("revision", "tree"):
                    repo = hub.repo("/".join(parts[2:4]))
                    if parts[4] == "revision":
                        body = {
                            "id": "/".join(parts[2:4]),
                            "sha": repo.sha,
                            "private": False,
                            "siblings": [{"rfilename": n} for n in repo.files],
                        }
                    else:
                        body = [
                            {"type": "file", "path": n, "size": len(d), "oid": hashlib.sha1(d).hexdigest()}
                            for n, d in repo.files.items()
                        ]
                    return self._send(200, json.dumps(body).encode(), {"Content-Type": "application/json"}, head)
                if len(parts) >= 5 and parts[2] == "resolve":
                    repo = hub.repo("/".join(parts[:2]))
                    name = "/".join(parts[4:])
                    if name not in repo.files:
                        return self._send(404, b'{"error": "Entry not found"}', {"X-Error-Code": "EntryNotFound"}, head)
                    data = repo.files[name]
                    headers = {
                        "X-Repo-Commit": repo.sha,
                        "ETag": f'"{hashlib.sha1(data).hexdigest()}"',
                        "Content-Type": "application/octet-stream",
                    }
                    return self._send(200, data, headers, head)
                return self._send(404, b'{"error": "not found"}', {"Content-Type": "application/json"}, head)

            def do_GET(self):
                self._route(head=False)

            def do_HEAD(self):
                self._route(head=True)

        self.server = ThreadingHTTPServer((host, port), Handler)
        self.url = f"http://{host}:{port}"
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)

    def repo(self, repo_id: str) -> Repo:
        if repo_id not in self.repos:
            self.repos[repo_id] = Repo(repo_id, model_files(repo_id, self.tokenizer, self.extra))
        return self.repos[repo_id]

    def __enter__(self) -> "Hub":
        self.thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self.server.shutdown()
        self.server.server_close()


def _strings(obj) -> list[str]:
    if isinstance(obj, str):
        return [obj]
    if isinstance(obj, dict):
        return [s for v in obj.values() for s in _strings(v)]
    if isinstance(obj, list):
        return [s for v in obj for s in _strings(v)]
    return []


def catalog_file_checks() -> dict[str, bytes]:
    """Files the catalog's rendered worker scripts check in the model directory (``test -r "${MODEL_PATH}/<file>"``),
    other than the model files every repository has: each served as a small stand-in file."""
    from stacks import catalog
    from stacks.serving import render_target

    names: set[str] = set()
    for t in catalog.targets().values():
        for obj in render_target(t.id):
            for text in _strings(obj):
                names |= set(re.findall(r'test -r "\$\{MODEL_PATH\}/([^"]+)"', text))
    names -= {"config.json", "tokenizer.json", "tokenizer_config.json", "generation_config.json"}
    return {n: f"# {n}: a stand-in file of the local model hub\n".encode() for n in sorted(names)}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--host", required=True)
    ap.add_argument("--port", type=int, default=HUB_PORT)
    args = ap.parse_args()
    hub = Hub(args.host, args.port, tokenizer_file(rig_env_dir()), catalog_file_checks())
    print(f"serving {hub.url}", flush=True)
    hub.server.serve_forever()


if __name__ == "__main__":
    main()
