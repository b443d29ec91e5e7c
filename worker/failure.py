"""The root cause of a failed run, for the user: torchrun's error file, else the last lines of the logs."""

from __future__ import annotations

import json
import re
import signal
from enum import StrEnum
from pathlib import Path

from trainers.events import LAUNCHER_LOG, LOG_DIR

# core.launch points TORCHELASTIC_ERROR_FILE here; torchrun's @record copies the failing rank's error there.
ERROR_FILE = "error.json"
TAIL_LINES = 20
_RANK_LOG = re.compile(r"rank(\d+)\.log")
# What gloo, NCCL and c10d raise when a peer is gone or a collective waited past its timeout: the job's own
# code and data are not at fault, so a restart may well succeed.
_COMMUNICATION = re.compile(
    r"DistBackendError|DistNetworkError|DistStoreError|ProcessGroup(Gloo|NCCL)|NCCL (error|communicator)|"
    r"gloo/transport|caused pair closure|Connection (closed|reset) by peer|Broken pipe|Timed out waiting|"
    r"[Ww]atchdog caught",
)


class FailureKind(StrEnum):
    """Why a run ended badly, as far as a restart is concerned."""

    CRASH = "crash"  # killed by a signal, or exited non-zero with no exception recorded
    COMMUNICATION = "communication_error"  # a collective failed or timed out
    EXCEPTION = "exception"  # the spec's model, data or memory: the same error would come back

    @property
    def retryable(self) -> bool:
        return self is not FailureKind.EXCEPTION


def describe_exit(code: int) -> str:
    if code < 0:
        try:
            return f"killed by signal {signal.Signals(-code).name}"
        except ValueError:
            return f"killed by signal {-code}"
    return f"exit code {code}"


def error_file_message(path: Path) -> str | None:
    """The `message` of a torchelastic error file: {"message": {"message": ..., "extraInfo": ...}}, or a
    plain string in newer formats."""
    try:
        data = json.loads(path.read_text(encoding="utf-8", errors="replace"))
    except (OSError, ValueError):
        return None
    message = data.get("message") if isinstance(data, dict) else None
    if isinstance(message, dict):
        message = message.get("message")
    if not isinstance(message, str) or not message.strip():
        return None
    return message.strip()


def _last_lines(path: Path) -> list[str]:
    try:
        with path.open("rb") as f:
            f.seek(max(0, f.seek(0, 2) - 64 * 1024))  # the tail is all we need, however big the log
            text = f.read().decode("utf-8", errors="replace")
    except OSError:
        return []
    return [line for line in text.splitlines() if line.strip()][-TAIL_LINES:]


def _logs_in_order(run_dir: Path) -> list[Path]:
    """Rank logs by rank, then torchrun's own output."""
    log_dir = run_dir / LOG_DIR
    ranks = [(int(m.group(1)), p) for p in log_dir.glob("rank*.log") if (m := _RANK_LOG.fullmatch(p.name))]
    return [p for _, p in sorted(ranks)] + [log_dir / LAUNCHER_LOG]


def log_excerpt(run_dir: Path) -> str:
    """The last lines of the first log showing an error (the failing rank's, usually), else of any log."""
    excerpts = [(p, lines) for p in _logs_in_order(run_dir) if (lines := _last_lines(p))]
    for path, lines in excerpts:
        if any("Error" in line or "Traceback" in line for line in lines):
            return f"last lines of {LOG_DIR}/{path.name}:\n" + "\n".join(lines)
    if excerpts:
        path, lines = excerpts[-1]
        return f"last lines of {LOG_DIR}/{path.name}:\n" + "\n".join(lines)
    return "no log output"


def classify_failure(run_dir: Path, code: int) -> FailureKind:
    """A non-zero exit: by signal, or with no exception recorded (a rank killed by a signal leaves no error
    file), is retryable; a recorded exception is deterministic unless it is a communication error. Out of
    memory is an exception like any other: the same batch would run out again."""
    message = error_file_message(run_dir / ERROR_FILE)
    if code < 0 or message is None:
        return FailureKind.CRASH
    return FailureKind.COMMUNICATION if _COMMUNICATION.search(message) else FailureKind.EXCEPTION


def root_cause(run_dir: Path, code: int) -> str:
    return error_file_message(run_dir / ERROR_FILE) or f"{describe_exit(code)}; {log_excerpt(run_dir)}"
