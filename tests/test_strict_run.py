"""The strict run (CI=true, tests/conftest.py) turns every skip into a failure, a module that skips itself at import
included: run on a throwaway test module with this project's conftest as the only plugin."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

TESTS = Path(__file__).resolve().parent
MODULE_SKIP = """import pytest
pytest.skip("a tool this machine lacks", allow_module_level=True)


def test_never_collected():
    assert False
"""
TEST_SKIP = """import pytest


def test_skips_itself():
    pytest.skip("a tool this machine lacks")
"""


def _run(tmp_path: Path, source: str, ci: str) -> subprocess.CompletedProcess:
    (tmp_path / "test_throwaway.py").write_text(source)
    env = {**os.environ, "CI": ci, "PYTHONPATH": str(TESTS)}
    return subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-p", "conftest", "test_throwaway.py"],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )


@pytest.mark.parametrize("source", [MODULE_SKIP, TEST_SKIP], ids=["module-level skip", "test skip"])
def test_a_skip_fails_the_strict_run_and_is_listed_otherwise(tmp_path, source):
    strict = _run(tmp_path, source, "true")
    assert strict.returncode != 0, strict.stdout
    assert "CI=true" in strict.stdout and "a tool this machine lacks" in strict.stdout
    relaxed = _run(tmp_path, source, "")
    assert relaxed.returncode in (0, 5), relaxed.stdout  # 5: pytest ran no test (the module skipped whole), no failure
    assert "not checked: 1 skipped test(s)" in relaxed.stdout and "a tool this machine lacks" in relaxed.stdout
