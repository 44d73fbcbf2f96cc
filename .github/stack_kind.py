"""What CI may do with a stack, read from its committed Pulumi.<stack>.yaml (tests/test_workflows.py runs it).

  python .github/stack_kind.py mode STACK      # `mode=<cluster.mode>` and `render=true|false`, for $GITHUB_OUTPUT
  python .github/stack_kind.py pr-previews     # stack names on stdin -> the JSON list a pull request may preview

- Environment: a stack named *-prod is prod's, *-staging is staging's, every other one is dev-level.
- cluster.mode (stacks/config, default render): only a render stack creates nothing outside the runner, so only it is
  applied on a push to main (main.yml). eks, stack and kubeconfig stacks reach a real cluster: a push previews them.
- A pull request's code runs in the `preview` environment, which holds the dev-level passphrase and nothing else
  (docs/ci.md). It previews a dev-level stack whose cluster the stack creates (eks), reads from another dev-level
  stack (stack) or does not have (render). It does not preview staging or prod stacks (main.yml previews those in
  their own environments), nor kubeconfig stacks, whose config holds an existing cluster's credentials
  (dynamo:kubeconfig): the manifest diff covers them.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import yaml

MODES = ("render", "kubeconfig", "eks", "stack")
PR_PREVIEW_MODES = {"render", "eks", "stack"}
ROOT = Path.cwd()


def environment(stack: str) -> str:
    return "prod" if stack.endswith("-prod") else "staging" if stack.endswith("-staging") else "dev"


def mode(stack: str) -> str:
    """The stack's cluster.mode; a value the program would refuse counts as a cluster (never render)."""
    config = (yaml.safe_load((ROOT / f"Pulumi.{stack}.yaml").read_text()) or {}).get("config") or {}
    cluster = config.get("dynamo:cluster")
    if cluster is None:
        return "render"
    value = cluster.get("mode", "render") if isinstance(cluster, dict) else None
    return value if value in MODES else "invalid"


def pr_preview_refusal(stack: str) -> str | None:
    """Why a pull request may not preview this stack, or None."""
    env, m = environment(stack), mode(stack)
    if env != "dev":
        return f"a {env} stack: previewed on main in the {env}-preview environment, with {env}'s own passphrase"
    if m not in PR_PREVIEW_MODES:
        return f"cluster.mode {m}: its config holds an existing cluster's credentials"
    return None


def main(argv: list[str]) -> int:
    if argv[:1] == ["mode"] and len(argv) == 2:
        m = mode(argv[1])
        print(f"mode={m}\nrender={str(m == 'render').lower()}")
        return 0
    if argv == ["pr-previews"]:
        previews = []
        for stack in (line.strip() for line in sys.stdin):
            if not stack:
                continue
            why = pr_preview_refusal(stack)
            if why:
                print(f"not previewed: {stack} ({why})", file=sys.stderr)
            else:
                previews.append(stack)
        print(json.dumps(previews, separators=(",", ":")))
        return 0
    print(__doc__, file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
