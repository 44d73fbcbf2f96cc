"""A scratch copy of the project for benchmarks: the program, its components and core, sharing the
repository's .venv, with a file backend of its own (so benchmark stacks never land in the repository)."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def scratch_project(work: Path, **extra_env: str) -> dict[str, str]:
    """Fill ``work`` with the project and return the environment its ``pulumi`` commands run with."""
    for name in ("Pulumi.yaml", "__main__.py"):
        shutil.copy(ROOT / name, work / name)
    for d in ("components", "stacks"):
        shutil.copytree(ROOT / d, work / d, ignore=shutil.ignore_patterns("__pycache__"))
    (work / ".venv").symlink_to(ROOT / ".venv")
    (work / "state").mkdir()
    return {
        **os.environ,
        "PULUMI_BACKEND_URL": f"file://{work}/state",
        "PULUMI_CONFIG_PASSPHRASE": "bench",
        "PULUMI_SKIP_UPDATE_CHECK": "true",
        "PULUMI_DISABLE_AUTOMATIC_PLUGIN_ACQUISITION": "true",
        **extra_env,
    }
