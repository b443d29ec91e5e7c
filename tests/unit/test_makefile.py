"""What `make run` and `make test` would do on a fresh clone, read from `make -n` with a venv not made yet:
a first run installs what running needs and bubblewrap, not the test extras (issue 33, items 1 and 11); and
`make slurm` on a box without munge (issue 47, item 6)."""

from __future__ import annotations

import shutil
import subprocess
import sys
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


def test_make_slurm_installs_slurm_and_munge_first(tmp_path: Path) -> None:
    steps = planned("slurm", tmp_path / "venv").splitlines()
    install = next(i for i, step in enumerate(steps) if "apt-get install -y -qq slurm-wlm munge" in step)
    cluster = next(i for i, step in enumerate(steps) if "-m deploy.slurm_cluster" in step)
    assert install < cluster, steps


def test_without_munge_and_no_way_to_install_it_one_line_says_what_to_run(tmp_path: Path) -> None:
    # An empty PATH: neither munged nor apt-get is found, as on a box where apt-get cannot install.
    done = subprocess.run(
        ["make", "--no-print-directory", "slurm-packages"],
        cwd=ROOT,
        env={"PATH": str(tmp_path)},
        executable=shutil.which("make"),
        capture_output=True,
        text=True,
    )
    assert done.returncode != 0
    assert "as root, run apt-get install slurm-wlm munge" in done.stderr, done.stderr


def test_the_cluster_without_munged_says_what_to_install_not_a_traceback(tmp_path: Path) -> None:
    done = subprocess.run(
        [sys.executable, "-m", "deploy.slurm_cluster", "--dir", str(tmp_path / "slurm")],
        cwd=ROOT,
        env={"PATH": str(tmp_path)},
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 1
    assert "Traceback" not in done.stderr, done.stderr
    assert (
        done.stderr.startswith("deploy.slurm_cluster: munged, slurmctld, ")
        and "slurm-wlm and munge" in done.stderr
    )
    assert len(done.stderr.strip().splitlines()) == 1, done.stderr
