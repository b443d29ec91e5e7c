"""`make compose-check`'s defaults belong to its checkout (issue 47, item 7): two clones on one box got the
same work dir, compose project, image and ports (18000, 18001), so one clone's run could take down or rebuild
the other's. Read from the script itself (`--defaults`), run from two copies of it as from two clones."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = Path("deploy") / "compose_check.sh"


def defaults(checkout: Path) -> dict[str, str]:
    (checkout / "deploy").mkdir(parents=True)
    shutil.copy(ROOT / SCRIPT, checkout / SCRIPT)
    done = subprocess.run(
        ["bash", str(checkout / SCRIPT), "--defaults"],
        env={"PATH": "/usr/bin:/bin", "PY": sys.executable},
        capture_output=True,
        text=True,
        timeout=30,
        check=True,
    )
    return dict(line.split("=", 1) for line in done.stdout.splitlines())


def test_two_clones_share_no_work_dir_project_image_or_port(tmp_path: Path) -> None:
    first, second = defaults(tmp_path / "one" / "trainyard"), defaults(tmp_path / "two" / "trainyard")
    assert set(first) == {
        "COMPOSE_CHECK_DIR",
        "COMPOSE_CHECK_PROJECT",
        "COMPOSE_CHECK_PORT",
        "COMPOSE_CHECK_WHEELS_PORT",
        "IMAGE",
    }
    for name in ("COMPOSE_CHECK_DIR", "COMPOSE_CHECK_PROJECT", "IMAGE"):
        assert first[name] != second[name], name
    ports = [
        int(found[name])
        for found in (first, second)
        for name in ("COMPOSE_CHECK_PORT", "COMPOSE_CHECK_WHEELS_PORT")
    ]
    assert 18000 not in ports and 18001 not in ports and len(set(ports)) == 4, ports
    assert defaults(tmp_path / "one" / "again")["COMPOSE_CHECK_DIR"] != first["COMPOSE_CHECK_DIR"]
