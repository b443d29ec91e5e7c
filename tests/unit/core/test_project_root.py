"""Where the ranks import `trainers` from, and where Slurm's nodes start: one definition, so that a module
moved deeper (worker/slurm/ to worker/executors/slurm/) cannot count its way to a different folder."""

from __future__ import annotations

import re

from core.project import PROJECT_ROOT

PACKAGES = ("app", "core", "worker", "jobspec", "trainers", "deploy")


def test_the_project_root_is_defined_once_and_holds_the_packages() -> None:
    defined = [
        str(path.relative_to(PROJECT_ROOT))
        for package in PACKAGES
        for path in sorted((PROJECT_ROOT / package).rglob("*.py"))
        if re.search(r"^PROJECT_ROOT\s*=", path.read_text(), re.MULTILINE)
    ]
    assert defined == ["core/project.py"], "import PROJECT_ROOT from core.project"
    assert (PROJECT_ROOT / "trainers" / "run.py").is_file()
    assert (PROJECT_ROOT / "pyproject.toml").is_file()
