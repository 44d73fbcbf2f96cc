"""``python3 -m pip`` on the local node's image: pods here have no route to a package index, so ``pip install`` of a
requirement the image already satisfies reports what it has and succeeds, and anything else fails, naming it.

Upstream's Ultra download Job runs ``python3 -m pip install --no-cache-dir -U huggingface_hub`` before its
``snapshot_download``; on a cluster with internet access that upgrades huggingface_hub, here the image's pinned one
(the rig's lock) is used. tools/node/images.py installs this file as ``pip/__main__.py`` of the image's environment.
"""

from __future__ import annotations

import re
import sys
from importlib import metadata


def main(argv: list[str]) -> int:
    if not argv or argv[0] != "install":
        print(
            f"pip (local node, offline): only 'install' of an installed requirement is supported, not {argv[:1]}", file=sys.stderr
        )
        return 1
    missing = []
    for arg in argv[1:]:
        if arg.startswith("-"):
            continue
        name = re.split(r"[<>=!~\[; ]", arg, maxsplit=1)[0]
        try:
            print(
                f"Requirement already satisfied: {name} ({metadata.version(name)}) [local node: no package index, not upgraded]"
            )
        except metadata.PackageNotFoundError:
            missing.append(arg)
    if missing:
        print(f"pip (local node, offline): no package index here; not installed: {', '.join(missing)}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
