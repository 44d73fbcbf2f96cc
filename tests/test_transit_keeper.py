"""The engine tests' key service (tests/transit_keeper.py) against the real Pulumi CLI: a stack on it keeps its
secret as ciphertext in its config, wrapped data key beside it, reads it back, and a client without the keeper's
token, or a ciphertext the keeper did not make, is refused."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import urllib.error
import urllib.request


import transit_keeper

CANARY = "hf_TRANSIT_CANARY_51c2"


def _put(path: str, body: dict, token: str) -> tuple[int, dict]:
    env = transit_keeper.env()
    req = urllib.request.Request(
        env["VAULT_SERVER_URL"] + path, data=json.dumps(body).encode(), method="PUT", headers={"X-Vault-Token": token}
    )
    try:
        with urllib.request.urlopen(req, timeout=10) as r:
            return r.status, json.loads(r.read())
    except urllib.error.HTTPError as e:
        return e.code, json.loads(e.read())


def test_the_keeper_refuses_a_wrong_token_and_a_foreign_ciphertext():
    token = transit_keeper.env()["VAULT_SERVER_TOKEN"]
    assert _put(f"/v1/transit/encrypt/{transit_keeper.KEY_NAME}", {"plaintext": "aGk="}, "wrong")[0] == 403
    status, body = _put(f"/v1/transit/encrypt/{transit_keeper.KEY_NAME}", {"plaintext": "aGk="}, token)
    assert status == 200 and body["data"]["ciphertext"].startswith("vault:v1:")
    assert _put(f"/v1/transit/decrypt/{transit_keeper.KEY_NAME}", body["data"], token)[1]["data"]["plaintext"] == "aGk="
    forged = body["data"]["ciphertext"][:-4] + ("AAAA" if not body["data"]["ciphertext"].endswith("AAAA") else "BBBB")
    assert _put(f"/v1/transit/decrypt/{transit_keeper.KEY_NAME}", {"ciphertext": forged}, token)[0] == 400
    assert _put("/v1/transit/encrypt/other-key", {"plaintext": "aGk="}, token)[0] == 404


def test_a_stack_on_the_keeper_keeps_its_secret_encrypted_and_reads_it_back(tmp_path):
    if not shutil.which("pulumi"):
        from conftest import missing

        missing("pulumi not on PATH", "run `make test` (it builds the pinned toolchain) or tools/toolchain.sh")
    (tmp_path / "state").mkdir()
    (tmp_path / "Pulumi.yaml").write_text("name: keeper-check\nruntime: yaml\n")
    env = {k: v for k, v in os.environ.items() if k != "PULUMI_CONFIG_PASSPHRASE"}
    env |= {"PULUMI_BACKEND_URL": f"file://{tmp_path / 'state'}", "PULUMI_SKIP_UPDATE_CHECK": "true", **transit_keeper.env()}

    def pulumi(*args: str) -> str:
        r = subprocess.run(["pulumi", *args, "--non-interactive"], cwd=tmp_path, env=env, capture_output=True, text=True)
        assert r.returncode == 0, r.stderr
        return r.stdout

    before = transit_keeper.calls()
    pulumi("stack", "init", "s", "--secrets-provider", transit_keeper.SECRETS_PROVIDER)
    pulumi("config", "set", "--secret", "token", CANARY, "--stack", "s")
    stack_file = (tmp_path / "Pulumi.s.yaml").read_text()
    assert CANARY not in stack_file
    assert f"secretsprovider: {transit_keeper.SECRETS_PROVIDER}" in stack_file and "encryptedkey:" in stack_file
    assert json.loads(pulumi("config", "--show-secrets", "--json", "--stack", "s"))["keeper-check:token"]["value"] == CANARY
    after = transit_keeper.calls()
    assert after["encrypt"] == before["encrypt"] + 1  # one data key, wrapped once at init
    assert after["decrypt"] > before["decrypt"]
