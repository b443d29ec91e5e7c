"""The root cause of a failed run, for the user: torchrun's error file, else the last lines of the logs, with
the values of the job's secrets masked (core/log_mask.py), as the job's message is stored and shown to all
who may read the job.

The run directory is the job's: every file here is opened through the confined opener (jobspec/files.py), so
a rank cannot turn `error.json` or its log into a view of a file the worker may read and the job may not, nor
stall the worker with a FIFO in their place.
"""

from __future__ import annotations

import json
import re
import signal
from collections.abc import Sequence
from datetime import datetime, timedelta
from enum import StrEnum
from pathlib import Path

from core.log_mask import masked_text
from jobspec.events import LAUNCHER_LOG, LOG_DIR
from jobspec.files import JobFileError, job_files, open_job_file

# core.launch points TORCHELASTIC_ERROR_FILE here; torchrun's @record copies the failing rank's error there.
ERROR_FILE = "error.json"
ERROR_FILE_MAX_BYTES = 1 << 20  # a record with a deep traceback is a few kB; more is not one torchrun wrote
TAIL_LINES = 20
# How the trainer marks an error raised by the user's own code (a factory, a loss, a dataset): the start of
# the error file's message ("UserCodeError: user_code_error: ..."), which then holds the user's own frames
# (trainers/user_errors.py). The worker reads no torch, so the name is said again here.
USER_CODE_MARKER = "UserCodeError: "
# How trainers/progress.py's NonFiniteLoss starts the error file's message (train.on_nonfinite=fail).
NONFINITE_MARKER = "NonFiniteLoss: "
# How trainers/user_errors.py's PlatformError starts it: the service's fault, not the job's.
PLATFORM_MARKER = "PlatformError: "
_RANK_LOG = re.compile(r"rank(\d+)\.log")
# What gloo, NCCL and c10d raise when a peer is gone or a collective waited past its timeout: the job's own
# code and data are not at fault, so a restart may well succeed.
_COMMUNICATION = re.compile(
    r"DistBackendError|DistNetworkError|DistStoreError|ProcessGroup(Gloo|NCCL)|NCCL (error|communicator)|"
    r"gloo/transport|caused pair closure|Connection (closed|reset) by peer|Broken pipe|Timed out waiting|"
    r"[Ww]atchdog caught",
)

# What CUDA and the driver say when the GPU itself failed under a job (or the job's kernel broke it: the same
# error twice on one GPU degrades it, core/gpu_health.py). Retryable: a restart may run on other GPUs.
_DEVICE = re.compile(
    r"an illegal memory access was encountered|uncorrectable ECC error|unspecified launch failure|"
    r"GPU is lost|fallen off the bus|\bXid\b",
)


# torchrun's failure report in its own log, one block per failed rank ("time : 2026-11-26_07:18:42", "host :
# ...", "rank : 1 (local_rank: 1)", "exitcode : -9 (pid: 123)"). A rank that died by a signal writes no error
# file, so this is the only place that names it, and a peer's "Connection reset" often reaches the error file
# first.
_FAILURE_BLOCK = re.compile(
    r"time\s*:\s*(\S+)\s*\n\s*host\s*:.*\n"
    r"\s*rank\s*:\s*(\d+) \(local_rank: \d+\)\s*\n"
    r"\s*exitcode\s*:\s*(-?\d+)"
)
_FAILURE_TIME = "%Y-%m-%d_%H:%M:%S"
_REPORT_START = "Failures:"
# The report's times have whole seconds, and a peer's error follows a death within torchrun's monitor
# interval; torchrun's own SIGKILL of a rank stuck past its SIGTERM comes only after a 30 s grace.
_SAME_MOMENT = timedelta(seconds=2)


class FailureKind(StrEnum):
    """Why a run ended badly, as far as a restart is concerned."""

    CRASH = "crash"  # killed by a signal, or exited non-zero with no exception recorded
    COMMUNICATION = "communication_error"  # a collective failed or timed out
    EXCEPTION = "exception"  # the spec's model, data or memory: the same error would come back
    USER_CODE = "user_code_error"  # the bundle's code raised, or could not be imported: fix the bundle
    NONFINITE_LOSS = "nonfinite_loss"  # the loss went NaN or inf; a resume would diverge the same way
    PLATFORM = "platform_error"  # the service failed the job (a file it handed over is not there)
    DEVICE = "device_error"  # CUDA or the driver reported the GPU failing (ECC, an illegal address, Xid)

    @property
    def retryable(self) -> bool:
        return self in (
            FailureKind.CRASH,
            FailureKind.COMMUNICATION,
            FailureKind.PLATFORM,
            FailureKind.DEVICE,
        )


def _read_tail(run_dir: Path, name: str, limit: int, max_bytes: int | None = None) -> str | None:
    """The last `limit` bytes of the run directory's file `name`, opened through the confined opener (no
    link, no FIFO, at most `max_bytes`), from its first whole line; None when it is not there or refused."""
    try:
        opened = open_job_file(run_dir, name, max_bytes)
    except JobFileError:
        return None
    with opened:
        start = max(0, opened.size - limit)
        opened.file.seek(start)
        data = opened.file.read(limit)
    if start:  # a line cut in two may hold the end of a secret's value, which no mask would recognise
        data = data.partition(b"\n")[2]
    return data.decode("utf-8", errors="replace")


def describe_exit(code: int) -> str:
    if code < 0:
        try:
            return f"killed by signal {signal.Signals(-code).name}"
        except ValueError:
            return f"killed by signal {-code}"
    return f"exit code {code}"


def error_file_message(run_dir: Path) -> str | None:
    """The failing rank's message in torchelastic's error file: {"message": {"message": ..., "extraInfo":
    ...}}, or a plain string in newer formats; None when there is none."""
    try:
        data = json.loads(_read_tail(run_dir, ERROR_FILE, ERROR_FILE_MAX_BYTES, ERROR_FILE_MAX_BYTES) or "")
    except ValueError:
        return None
    message = data.get("message") if isinstance(data, dict) else None
    if isinstance(message, dict):
        message = message.get("message")
    if not isinstance(message, str) or not message.strip():
        return None
    return message.strip()


def _last_lines(run_dir: Path, name: str) -> list[str]:
    text = _read_tail(run_dir, name, 64 * 1024) or ""  # the tail is all we need, however big the log
    return [line for line in text.splitlines() if line.strip()][-TAIL_LINES:]


def _logs_in_order(run_dir: Path) -> list[str]:
    """Rank logs by rank, then torchrun's own output, as names in the run directory; none when `logs` is
    not a plain folder."""
    try:
        names = job_files(run_dir, LOG_DIR, deep=False)
    except JobFileError:
        return []
    ranks = [(int(m.group(1)), n) for n in names if (m := _RANK_LOG.fullmatch(n.removeprefix(f"{LOG_DIR}/")))]
    return [n for _, n in sorted(ranks)] + [f"{LOG_DIR}/{LAUNCHER_LOG}"]


def log_excerpt(run_dir: Path) -> str:
    """The last lines of the first log showing an error (the failing rank's, usually), else of any log."""
    excerpts = [(n, lines) for n in _logs_in_order(run_dir) if (lines := _last_lines(run_dir, n))]
    for name, lines in excerpts:
        if any("Error" in line or "Traceback" in line for line in lines):
            return f"last lines of {name}:\n" + "\n".join(lines)
    if excerpts:
        name, lines = excerpts[-1]
        return f"last lines of {name}:\n" + "\n".join(lines)
    return "no log output"


def killed_rank(run_dir: Path) -> tuple[int, int] | None:
    """(rank, exit code) of a rank torchrun reports killed by a signal at the moment of the first failure:
    the first failure by time, where a death by a signal (SIGKILL from the OOM killer or a person, SIGSEGV;
    not SIGTERM, which torchrun sends the survivors itself) goes before its peers' errors of the same
    moment."""
    launcher = _read_tail(run_dir, f"{LOG_DIR}/{LAUNCHER_LOG}", 64 * 1024) or ""
    # The launcher log holds every attempt's output: only the last report speaks of this one.
    report = launcher[launcher.rfind(_REPORT_START) :] if _REPORT_START in launcher else ""
    failures = [
        (datetime.strptime(at, _FAILURE_TIME), int(rank), int(code))
        for at, rank, code in _FAILURE_BLOCK.findall(report)
    ]
    if not failures:
        return None
    first = min(at for at, _, _ in failures)
    for at, rank, code in sorted(failures):
        if at - first <= _SAME_MOMENT and code < 0 and -code != signal.SIGTERM:
            return rank, code
    return None


def _died_first(run_dir: Path, message: str | None) -> tuple[int, int] | None:
    """The rank killed by a signal when it, not the recorded error, is the cause: no error recorded, or
    only a peer's communication error, which is what its death looks like from the other ranks."""
    if message is not None and not _COMMUNICATION.search(message):
        return None
    return killed_rank(run_dir)


def classify_failure(run_dir: Path, code: int) -> FailureKind:
    """A non-zero exit: by signal, or with no exception recorded (a rank killed by a signal leaves no error
    file), is retryable; a recorded exception is deterministic unless it is a communication error. Out of
    memory is an exception like any other: the same batch would run out again."""
    message = error_file_message(run_dir)
    if _DEVICE.search(message or log_excerpt(run_dir)):
        return FailureKind.DEVICE
    if code < 0 or message is None or _died_first(run_dir, message):
        return FailureKind.CRASH
    if message.startswith(USER_CODE_MARKER):
        return FailureKind.USER_CODE
    if message.startswith(NONFINITE_MARKER):
        return FailureKind.NONFINITE_LOSS
    if message.startswith(PLATFORM_MARKER):
        return FailureKind.PLATFORM
    return FailureKind.COMMUNICATION if _COMMUNICATION.search(message) else FailureKind.EXCEPTION


def root_cause(run_dir: Path, code: int, secrets: Sequence[str] = ()) -> str:
    """The first failure: a rank killed by a signal, before the errors its peers then raised; else the
    recorded error's message (for the user's code: what failed and the user's own frames). `secrets`: the
    values the attempt's ranks were given, masked wherever the text quotes them."""
    message = error_file_message(run_dir)
    if died := _died_first(run_dir, message):
        rank, rank_code = died
        then = f"; the other ranks then failed talking to it: {message.splitlines()[-1]}" if message else ""
        return masked_text(f"rank {rank} was {describe_exit(rank_code)}{then}", secrets)
    return masked_text(message or f"{describe_exit(code)}; {log_excerpt(run_dir)}", secrets)
