"""Write the bytecode of exactly what the program and the command line import, once, after ``uv sync``.

Every test process and every Pulumi program run imports pulumi, pulumi-kubernetes, pydantic, grpc and this project;
where PYTHONDONTWRITEBYTECODE is set (as on this team's machines) Python never writes bytecode on import, so each of
those processes would compile them from source again. ``uv sync --compile-bytecode`` compiles every installed module
instead (measured here: 37 s on a fresh clone, mostly pulumi-aws and boto's thousands of modules that nothing
imports), which was most of a fresh clone's ``make up``. Importing every module of components/ and stacks/ once with
bytecode writing on compiles only what they import (about 2 s).
"""

from __future__ import annotations

import importlib
import pkgutil
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def main() -> None:
    sys.dont_write_bytecode = False
    sys.path.insert(0, str(ROOT))
    failed = []
    for package in ("components", "stacks"):
        importlib.import_module(package)
        for mod in pkgutil.walk_packages([str(ROOT / package)], prefix=f"{package}."):
            if mod.name.endswith("__main__"):
                continue
            try:
                importlib.import_module(mod.name)
            except Exception as e:  # noqa: BLE001 - a module that cannot import is named, the rest still compiled
                failed.append(f"{mod.name}: {type(e).__name__}: {e}")
    for line in failed:
        print(f"warm_bytecode: {line}", file=sys.stderr)


if __name__ == "__main__":
    main()
