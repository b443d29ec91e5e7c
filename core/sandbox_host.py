"""What this host gives a sandbox (core/sandbox.py builds its command): the system folders it has, the
Python environment and the project's runtime packages, resource limits under this process's own, and the
data folders a spec names. Shared by a worker's sandbox around a job's ranks (worker/sandbox.py) and the
API's around a code bundle's forecast (app/services/bundle_forecasts.py), so both show the same."""

from __future__ import annotations

import os
import resource
import sys
from pathlib import Path

from core.config import Settings
from core.sandbox import SYSTEM_ETC, SYSTEM_FOLDERS, HostSystem, Rlimits
from jobspec.datadir import data_folders, resolve_data_root
from jobspec.files import largest_job_file
from jobspec.spec import JobSpec

# What the ranks import of the project (the job contract, trainers.run, and `trainyard` for a program's
# `import trainyard.job`); the rest of the checkout (the service, its tests, a var/ with its state) is not
# theirs to see.
RANK_PACKAGES = ("jobspec", "trainers", "app/sdk/trainyard")


def _under_hard_limit(limit: int, wanted: int) -> int:
    # Inside the sandbox nothing may raise a hard limit, so one above this process's own would fail the start.
    hard = resource.getrlimit(limit)[1]
    return wanted if hard == resource.RLIM_INFINITY else min(wanted, hard)


def rlimits(settings: Settings) -> Rlimits:
    return Rlimits(
        processes=_under_hard_limit(resource.RLIMIT_NPROC, settings.job_max_processes),
        open_files=_under_hard_limit(resource.RLIMIT_NOFILE, settings.job_max_open_files),
        file_bytes=_under_hard_limit(resource.RLIMIT_FSIZE, largest_job_file(settings.job_max_file_gb)),
    )


def python_paths(project: Path) -> tuple[Path, ...]:
    """What the ranks import from: the project's runtime packages, the Python environment and this
    process's PYTHONPATH."""
    entries = os.environ.get("PYTHONPATH", "").split(os.pathsep)
    extra = [Path(p) for p in entries if os.path.isabs(p) and os.path.exists(p)]  # else bwrap cannot bind it
    packages = [project / name for name in RANK_PACKAGES]
    paths = (*packages, Path(sys.prefix), Path(sys.base_prefix), *extra)
    return tuple(path.resolve() for path in paths)


def host_system() -> HostSystem:
    """SYSTEM_FOLDERS and SYSTEM_ETC as this host has them: real ones shown, links made again as links."""
    shown: list[Path] = []
    links: list[tuple[Path, str]] = []
    for path in (*SYSTEM_FOLDERS, *SYSTEM_ETC):
        if path.is_symlink() and path.parent == Path("/"):  # /bin -> usr/bin: the link, not the way out
            links.append((path, os.readlink(path)))
        elif path.exists():
            shown.append(path)
    return HostSystem(tuple(shown), tuple(links))


def named_data_folders(settings: Settings, spec: JobSpec) -> list[Path]:
    """The data folders the spec names, and no other: data.root (unless in an object store), data.dataset
    text's tokenizer, and hf_causal_lm's model.path."""
    return [
        resolve_data_root(settings.data_dir, folder, field) for field, folder in data_folders(spec).items()
    ]
