"""A key service for the engine tests' stacks: the two calls of Vault's Transit secrets engine that Pulumi's
``hashivault://`` secrets provider makes, served in the test process.

Why: a stack on the passphrase provider derives its key (PBKDF2, a million rounds) in every CLI run that reads or
writes a secret. Measured on this two-core machine, that is about 0.25 s of CPU per run (``pulumi config
--show-secrets``: 0.59 s against 0.30 s with this keeper), over the several hundred CLI runs of the engine tests.
With a cloud secrets provider Pulumi generates a data key once, keeps it wrapped in the stack's config
(``encryptedkey``) and asks the key service to unwrap it once per run; the stack's secrets are then encrypted by
Pulumi itself (AES-256-GCM with that data key), exactly as on the passphrase provider, so what the tests read from
state and config (ciphertext, never the canary tokens) is what a user's stack holds.

The protocol is the one gocloud.dev/secrets/hashivault speaks (google/go-cloud secrets/hashivault/vault.go):
``Logical().Write("transit/encrypt/<key>", {"plaintext": <bytes, JSON base64>})`` answered with
``{"data": {"ciphertext": ...}}``, and ``transit/decrypt/<key>`` with ``{"ciphertext": ...}`` answered with
``{"data": {"plaintext": <base64>}}``; the server's address and token come from ``VAULT_SERVER_URL`` and
``VAULT_SERVER_TOKEN``. Anything else (another path, a wrong token, a ciphertext this keeper did not make) is refused.

The wrapping is authenticated (HMAC-SHA256 over a random nonce and the ciphertext, a SHA-256 keystream): a test
double, never a place for real secrets; its key lives only in the test process's memory.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import json
import os
import secrets
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

KEY_NAME = "engine-tests"
SECRETS_PROVIDER = f"hashivault://{KEY_NAME}"
PREFIX = "vault:v1:"  # Vault's ciphertext prefix (key version 1)


class _Keeper:
    def __init__(self) -> None:
        self.key = os.urandom(32)
        self.token = secrets.token_hex(16)
        self.calls = {"encrypt": 0, "decrypt": 0}

    def _stream(self, nonce: bytes, n: int) -> bytes:
        out = bytearray()
        counter = 0
        while len(out) < n:
            out += hashlib.sha256(self.key + nonce + counter.to_bytes(8, "big")).digest()
            counter += 1
        return bytes(out[:n])

    def _tag(self, nonce: bytes, ct: bytes) -> bytes:
        return hmac.new(self.key, nonce + ct, hashlib.sha256).digest()[:16]

    def encrypt(self, plaintext: bytes) -> str:
        nonce = os.urandom(16)
        ct = bytes(a ^ b for a, b in zip(plaintext, self._stream(nonce, len(plaintext))))
        return PREFIX + base64.b64encode(nonce + self._tag(nonce, ct) + ct).decode()

    def decrypt(self, ciphertext: str) -> bytes:
        if not ciphertext.startswith(PREFIX):
            raise ValueError("not a vault:v1 ciphertext")
        raw = base64.b64decode(ciphertext[len(PREFIX) :], validate=True)
        nonce, tag, ct = raw[:16], raw[16:32], raw[32:]
        if not hmac.compare_digest(tag, self._tag(nonce, ct)):
            raise ValueError("ciphertext not made by this keeper")
        return bytes(a ^ b for a, b in zip(ct, self._stream(nonce, len(ct))))


def _handler(keeper: _Keeper):
    class Handler(BaseHTTPRequestHandler):
        def _answer(self, status: int, body: dict) -> None:
            out = json.dumps(body).encode()
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(out)))
            self.end_headers()
            self.wfile.write(out)

        def do_PUT(self) -> None:
            if not hmac.compare_digest(self.headers.get("X-Vault-Token", ""), keeper.token):
                return self._answer(403, {"errors": ["permission denied"]})
            try:
                body = json.loads(self.rfile.read(int(self.headers.get("Content-Length") or 0)) or b"{}")
                if self.path == f"/v1/transit/encrypt/{KEY_NAME}":
                    keeper.calls["encrypt"] += 1
                    return self._answer(200, {"data": {"ciphertext": keeper.encrypt(base64.b64decode(body["plaintext"]))}})
                if self.path == f"/v1/transit/decrypt/{KEY_NAME}":
                    keeper.calls["decrypt"] += 1
                    plain = keeper.decrypt(body["ciphertext"])
                    return self._answer(200, {"data": {"plaintext": base64.b64encode(plain).decode()}})
            except (KeyError, ValueError) as e:
                return self._answer(400, {"errors": [str(e)]})
            return self._answer(404, {"errors": [f"no handler for {self.path}"]})

        do_POST = do_PUT

        def log_message(self, *args) -> None:  # quiet: pytest shows failures, not every request
            pass

    return Handler


_lock = threading.Lock()
_running: dict = {}


def env() -> dict[str, str]:
    """The environment a CLI run needs to reach this process's keeper (started on first use, on a free port)."""
    with _lock:
        if not _running:
            keeper = _Keeper()
            server = ThreadingHTTPServer(("127.0.0.1", 0), _handler(keeper))
            server.daemon_threads = True
            threading.Thread(target=server.serve_forever, name="transit-keeper", daemon=True).start()
            _running.update(keeper=keeper, server=server)
        server, keeper = _running["server"], _running["keeper"]
        return {"VAULT_SERVER_URL": f"http://127.0.0.1:{server.server_address[1]}", "VAULT_SERVER_TOKEN": keeper.token}


def calls() -> dict[str, int]:
    """How many wraps and unwraps the keeper has answered (0 before its first use)."""
    return dict(_running["keeper"].calls) if _running else {"encrypt": 0, "decrypt": 0}
