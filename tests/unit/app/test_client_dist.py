"""The client distribution (app/sdk/pyproject.toml): the `trainyard` package with the REST client, the CLI
and trainyard.job, built as a wheel that ships every project module the client imports and depends on none
of the server's packages; the client runs with those packages refused."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

SDK = Path(__file__).resolve().parents[3] / "app" / "sdk"
# The server's packages, and torch: trainyard.job's, an extra that the client and the CLI do without.
REFUSED = (
    "fastapi",
    "uvicorn",
    "sqlalchemy",
    "alembic",
    "celery",
    "kombu",
    "redis",
    "psycopg",
    "boto3",
    "torch",
)
PROJECT = ("app", "core", "jobspec", "trainers", "trainyard")
# Imports the client and its CLI with the server's packages (and torch) refused, and prints the project
# modules that loaded.
CLIENT_ONLY = f"""
import importlib.abc, json, sys
class Refuse(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path, target=None):
        if name.split(".")[0] in {REFUSED!r}:
            raise ImportError(f"the client imported {{name}}")
sys.meta_path.insert(0, Refuse())
import trainyard.client, trainyard.cli, app.cli
from click.testing import CliRunner
assert CliRunner().invoke(app.cli.cli, ["--help"]).exit_code == 0
print(json.dumps(sorted(m for m in sys.modules if m.split(".")[0] in {PROJECT!r})))
"""


def test_the_client_runs_without_the_server_s_packages_and_its_wheel_ships_what_it_imports(
    tmp_path: Path,
) -> None:
    loaded = subprocess.run([sys.executable, "-c", CLIENT_ONLY], capture_output=True, text=True, check=True)
    modules = json.loads(loaded.stdout)
    # The client reads the job contract, never the runtime (that is trainyard.job's, inside a job).
    assert any(m.startswith("jobspec") for m in modules)
    assert not any(m.split(".")[0] == "trainers" for m in modules), modules
    build = [
        sys.executable,
        "-m",
        "pip",
        "wheel",
        ".",
        "--no-deps",
        "--no-build-isolation",
        "-q",
        "-w",
        tmp_path,
    ]
    try:
        subprocess.run(build, cwd=SDK, check=True)
    finally:
        # The build leaves copies of the project's modules in the source tree (its package-dir points
        # back at them), which mypy would check twice and a later build could ship stale.
        for leftover in ("build", "trainyard_client.egg-info"):
            shutil.rmtree(SDK / leftover, ignore_errors=True)
    (wheel,) = tmp_path.glob("trainyard_client-*.whl")
    with zipfile.ZipFile(wheel) as archive:
        names = set(archive.namelist())
        metadata = next(archive.read(n).decode() for n in names if n.endswith("METADATA"))
    shipped = {name.removesuffix(".py").removesuffix("/__init__").replace("/", ".") for name in names}
    assert set(modules) <= shipped, set(modules) - shipped
    assert "trainyard/job.py" in names and "trainers/job/session.py" in names
    assert "app/main.py" not in names and not any(name.startswith("app/api/") for name in names)
    required = [
        line.split(":", 1)[1].strip() for line in metadata.splitlines() if line.startswith("Requires-Dist")
    ]
    assert not [r for r in required if r.split(">")[0].split("[")[0] in REFUSED and "extra ==" not in r]
