"""Which jobs run in the sandbox, and the sandbox this host gives one (core/sandbox.py builds the command).

The worker's side of it: the job's bundle unpacked, its GPUs as NVML names them, resource limits that fit
under the worker's own, and a dry start of the very sandbox before the job's, so that a host that cannot
sandbox fails the launch with the fix rather than the job with bwrap's exit status.
"""

from __future__ import annotations

import os
import resource
import subprocess
import sys
from pathlib import Path

from core.code_store import ensure_unpacked
from core.config import SandboxMode, Settings
from core.sandbox import GPU_SUPPORT_FILES, Rlimits, Sandbox, sandbox_argv, service_state
from trainers.datadir import resolve_data_root
from trainers.plan import Plan
from trainers.spec import JobSpec
from worker.gpus import gpu_devices

GB = 1024**3
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


def _under_hard_limit(limit: int, wanted: int) -> int:
    # Inside the sandbox nothing may raise a hard limit, so one above the worker's own would fail the start.
    hard = resource.getrlimit(limit)[1]
    return wanted if hard == resource.RLIM_INFINITY else min(wanted, hard)


def rlimits(settings: Settings) -> Rlimits:
    return Rlimits(
        processes=_under_hard_limit(resource.RLIMIT_NPROC, settings.job_max_processes),
        open_files=_under_hard_limit(resource.RLIMIT_NOFILE, settings.job_max_open_files),
        file_bytes=_under_hard_limit(resource.RLIMIT_FSIZE, int(settings.job_max_file_gb * GB)),
    )


def _python_paths(project: Path) -> tuple[Path, ...]:
    """What the ranks import from: the project, the Python environment and the worker's PYTHONPATH."""
    entries = os.environ.get("PYTHONPATH", "").split(os.pathsep)
    extra = [Path(p) for p in entries if os.path.isabs(p) and os.path.exists(p)]  # else bwrap cannot bind it
    paths = (project, Path(sys.prefix), Path(sys.base_prefix), *extra)
    return tuple(path.resolve() for path in paths)


def sandbox_for(
    settings: Settings, spec: JobSpec, plan: Plan, run_dir: Path, bundle: Path | None, project: Path
) -> Sandbox:
    read_only = [] if bundle is None else [bundle]
    if spec.environment is not None:  # a registered venv may live in the worker's home, which is hidden
        read_only.append(Path(settings.environment_pythons[spec.environment]).parent.parent)
    # The data folders the spec names, and no other: data.root, data.dataset text's tokenizer, and
    # hf_causal_lm's model.path.
    data, model = spec.data, spec.model
    named = () if data is None else (("data.root", data.root), ("data.tokenizer", data.tokenizer))
    if model is not None:
        named = (*named, ("model.path", model.path))
    for field, folder in named:
        if folder is not None:
            read_only.append(resolve_data_root(settings.data_dir, folder, field))
    # Fake GPUs (tests) have no device files; a real GPU job gets exactly its own.
    gpus = gpu_devices(plan.gpus or []) if plan.device == "cuda" and settings.gpu_inventory is None else []
    home = Path.home().resolve()
    return Sandbox(
        run_dir=run_dir,
        cwd=project,
        limits=rlimits(settings),
        # tmpfs covers only a folder that exists (the root is read-only); one that does not hides nothing.
        state=tuple(folder for folder in service_state(settings) if folder.is_dir()),
        private=(home,) if home != Path("/") and home.is_dir() else (),
        shown=_python_paths(project),
        read_only=tuple(read_only),
        gpus=tuple(gpus),
        gpu_support=tuple(path for path in GPU_SUPPORT_FILES if gpus and os.path.exists(path)),
        share_network=plan.nnodes > 1,
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
            capture_output=True,
            text=True,
            timeout=PROBE_TIMEOUT_S,
        )
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise SandboxUnavailable(f"the sandbox cannot start on this host: {exc}; {FIX}") from exc
    if probe.returncode != 0:
        said = probe.stderr.strip() or f"exit status {probe.returncode}"
        raise SandboxUnavailable(f"the sandbox cannot start on this host: {said}; {FIX}")
