"""Which jobs run in the sandbox, and the sandbox this host gives one (core/sandbox.py builds the command).

The worker's side of it: the job's bundle unpacked, its GPUs as NVML names them, resource limits that fit
under the worker's own, and a dry start of the very sandbox before the job's, so that a host that cannot
sandbox fails the launch with the fix rather than the job with bwrap's exit status.
"""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

from core.code_store import ensure_unpacked
from core.config import SandboxMode, Settings
from core.sandbox import GPU_SUPPORT_FILES, BoundFile, Sandbox, sandbox_argv, service_state
from core.sandbox_host import host_system, named_data_folders, python_paths, rlimits
from jobspec.data_store import is_store_root
from jobspec.files import open_under
from jobspec.plan import Plan
from jobspec.spec import JobSpec
from worker.gpus import gpu_devices

PROBE_TIMEOUT_S = 30.0
FIX = (
    "install bubblewrap (`make servers` does), allow unprivileged user namespaces (docs/security.md says "
    "how, in Docker too), or set TRAINYARD_SANDBOX=off on a box whose users are all trusted"
)


class SandboxUnavailable(Exception):
    """bubblewrap cannot start here; the message has its error and the fix."""


def is_sandboxed(settings: Settings, spec: JobSpec) -> bool:
    return settings.sandbox is SandboxMode.ON or (
        settings.sandbox is SandboxMode.AUTO and spec.code is not None
    )


def job_bundle(settings: Settings, spec: JobSpec) -> Path | None:
    """The job's code bundle, unpacked on this host; None for a job without one."""
    if spec.code is None:
        return None
    if not settings.user_code:
        raise ValueError(
            f"this worker runs no user code (TRAINYARD_USER_CODE=off), and the job names {spec.code}"
        )
    return ensure_unpacked(settings, spec.code)


def resume_binding(settings: Settings, resume_path: str | None, run_dir: Path) -> BoundFile | None:
    """The checkpoint a job resumes from, opened for its sandbox when it lies outside the job's own run
    directory (another job's, on a retry or checkpoint.resume_from): inside the runs directory and never
    through a link, since that job's ranks could have made one. The caller closes the descriptor."""
    path = None if resume_path is None else Path(resume_path)
    if path is None or not path.is_absolute() or path.is_relative_to(run_dir.resolve()):
        return None  # a relative one is taken from the run directory (trainers/job/session.py)
    with open_under(settings.runs_dir, path, max_bytes=None) as checkpoint:
        return BoundFile(os.dup(checkpoint.file.fileno()), path)


def sandbox_for(
    settings: Settings, spec: JobSpec, plan: Plan, run_dir: Path, bundle: Path | None, project: Path
) -> Sandbox:
    """The sandbox of a job's node; when it resumes from another job's checkpoint, its `resume` holds an
    open descriptor that the caller closes once the job has started (close_sandbox)."""
    read_only = [] if bundle is None else [bundle]
    if spec.environment is not None:  # a registered venv may live in the worker's home, which is hidden
        read_only.append(Path(settings.environment_pythons[spec.environment]).parent.parent)
    read_only += named_data_folders(settings, spec)
    # Fake GPUs (tests) have no device files; a real GPU job gets exactly its own.
    gpus = gpu_devices(plan.gpus or []) if plan.device == "cuda" and settings.gpu_inventory is None else []
    return Sandbox(
        run_dir=run_dir,
        cwd=project,
        limits=rlimits(settings),
        system=host_system(),
        # tmpfs covers only a folder that exists (a shown folder is read-only); one that does not hides
        # nothing.
        state=tuple(folder for folder in service_state(settings) if folder.is_dir()),
        shown=python_paths(project),
        read_only=tuple(read_only),
        resume=resume_binding(settings, plan.resume_path, run_dir),
        gpus=tuple(gpus),
        gpu_support=tuple(path for path in GPU_SUPPORT_FILES if gpus and os.path.exists(path)),
        share_network=plan.nnodes > 1 or (spec.data is not None and is_store_root(spec.data.root)),
        run_as=settings.job_uid if os.geteuid() == 0 else None,
    )


def check_starts(box: Sandbox) -> None:
    """Start this very sandbox once with nothing in it (tens of milliseconds): bwrap missing, user namespaces
    refused or a mount that cannot be made fail here, with bwrap's own words."""
    try:
        probe = subprocess.run(
            [*sandbox_argv(box), "true"],
            env={"PATH": os.environ.get("PATH", os.defpath)},
            cwd="/",
            pass_fds=() if box.resume is None else (box.resume.fd,),
            capture_output=True,
            text=True,
            timeout=PROBE_TIMEOUT_S,
        )
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise SandboxUnavailable(f"the sandbox cannot start on this host: {exc}; {FIX}") from exc
    if probe.returncode != 0:
        said = probe.stderr.strip() or f"exit status {probe.returncode}"
        raise SandboxUnavailable(f"the sandbox cannot start on this host: {said}; {FIX}")


def close_sandbox(box: Sandbox | None) -> None:
    """Close what the sandbox held open for bwrap; its job holds its own binding once started."""
    if box is not None and box.resume is not None:
        os.close(box.resume.fd)
