"""What `make run` and `make test` would do on a fresh clone, read from `make -n` with a venv not made yet:
a first run installs what running needs and bubblewrap, not the test extras (issue 33, items 1 and 11)."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
pytestmark = pytest.mark.skipif(shutil.which("make") is None, reason="make is not installed")


def planned(target: str, venv: Path) -> str:
    done = subprocess.run(
        ["make", "-n", target, f"VENV={venv}"], cwd=ROOT, capture_output=True, text=True, check=True
    )
    return done.stdout


def test_a_first_run_installs_the_service_and_bubblewrap_but_no_test_extras(tmp_path: Path) -> None:
    steps = planned("run", tmp_path / "venv")
    python = tmp_path / "venv" / "bin" / "python"
    assert f"{python} -m uv pip install -q --python {python} -e .\n" in steps, steps
    assert "[test]" not in steps, steps
    assert "apt-get install -y -qq bubblewrap" in steps, steps
    assert f"{tmp_path / 'venv'}/bin/trainyard" in steps, "make run says where the CLI is"


def test_the_tests_install_their_extras(tmp_path: Path) -> None:
    python = tmp_path / "venv" / "bin" / "python"
    assert f"uv pip install -q --python {python} -e '.[test]'" in planned("install-test", tmp_path / "venv")
