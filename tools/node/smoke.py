"""``make local-up``'s last step: a chat completion answered by the local stack's real Dynamo frontend, on the node.

It reads what the stack runs from its own render (``dynamo-stacks render --stack local``: what ``up`` created), finds
the frontend Service's cluster IP (kube-proxy on the local node routes it from this machine), sends one chat
completion and prints the URL, the command to send another and the answer. Exit 1, with what it saw last, when no
answer came within the timeout.

Usage: smoke.py --kubeconfig PATH [--kubectl PATH] [--timeout SECONDS] < rendered.yaml
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path


def main() -> None:
    import yaml

    sys.path.insert(0, str(Path(__file__).resolve().parent.parent.parent))
    from stacks.serving.benchmark import served_model
    from stacks.serving.operator import FRONTEND, component_type, service_name
    from stacks.serving.outputs import command, smoke_test_body

    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--kubeconfig", required=True)
    ap.add_argument("--kubectl", default="kubectl")
    ap.add_argument("--timeout", type=float, default=120)
    args = ap.parse_args()
    objs = [o for o in yaml.safe_load_all(sys.stdin) if isinstance(o, dict)]
    dgds = [o for o in objs if o.get("kind") == "DynamoGraphDeployment"]
    if not dgds:
        sys.exit("smoke: the render has no DynamoGraphDeployment")
    failed = False
    for dgd in dgds:
        ns = dgd["metadata"]["namespace"]
        frontend = next(c for c in dgd["spec"]["components"] if component_type(c) == FRONTEND)
        svc_name = service_name(dgd, frontend)
        model = served_model(dgd)
        body = smoke_test_body(model, max_tokens=32)
        deadline, seen = time.monotonic() + args.timeout, ""
        while True:
            got = subprocess.run(
                [args.kubectl, "--kubeconfig", args.kubeconfig, "-n", ns, "get", "service", svc_name, "-o", "json"],
                capture_output=True,
                text=True,
            )
            if got.returncode == 0:
                svc = json.loads(got.stdout)
                port = next(p["port"] for p in svc["spec"]["ports"] if p.get("name") == "http")
                url = f"http://{svc['spec']['clusterIP']}:{port}/v1"
                req = urllib.request.Request(
                    f"{url}/chat/completions", data=body.encode(), headers={"Content-Type": "application/json"}
                )
                try:
                    with urllib.request.urlopen(req, timeout=30) as resp:
                        answer = json.loads(resp.read())
                    content = answer["choices"][0]["message"]["content"]
                    print(f"{ns}/{svc_name}: the Dynamo frontend answers at {url} (the Service's cluster IP, through kube-proxy)")
                    curl = command("curl", "-s", f"{url}/chat/completions", "-H", "Content-Type: application/json", "-d", body)
                    print(f"  {curl}")
                    print(f"  answer from {answer.get('model')}: {content!r}")
                    break
                except (urllib.error.URLError, OSError, KeyError, ValueError) as e:
                    seen = f"{url}: {e}"
            else:
                seen = got.stderr.strip()
            if time.monotonic() > deadline:
                print(f"smoke: {ns}/{svc_name}: no answer after {args.timeout:.0f}s; last seen: {seen}", file=sys.stderr)
                failed = True
                break
            time.sleep(3)
    sys.exit(1 if failed else 0)


if __name__ == "__main__":
    main()
