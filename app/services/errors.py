"""What services refuse, as plain exceptions: the API layer alone decides which HTTP status each one gets."""

from __future__ import annotations

from core.models import Sweep
from core.states import JobStatus
from jobspec.problems import Problem, SpecError


class DomainError(Exception):
    """A refusal whose message names the bad value and the fix; `field` is the dotted input path, if any."""

    def __init__(self, message: str, field: str | None = None) -> None:
        super().__init__(message)
        self.field = field


class JobNotFound(DomainError):
    def __init__(self, job_id: int) -> None:
        super().__init__(f"job {job_id} does not exist; list jobs with GET /v1/jobs")


class CheckpointNotFound(DomainError):
    pass


class CheckpointCorrupt(DomainError):
    """A checkpoint whose bytes no longer hash to the sha256 recorded when it was written: never served."""


class WebhookNotFound(DomainError):
    def __init__(self, webhook_id: int) -> None:
        super().__init__(f"webhook {webhook_id} does not exist; list yours with GET /v1/webhooks")


class WebhookLimitReached(DomainError):
    """A user at TRAINYARD_WEBHOOK_MAX_PER_USER: each webhook adds a delivery to every state change."""

    def __init__(self, user: str, limit: int) -> None:
        super().__init__(
            f"user {user} already has {limit} webhooks, the most allowed (TRAINYARD_WEBHOOK_MAX_PER_USER="
            f"{limit}); delete one (DELETE /v1/webhooks/{{id}}) or have an admin raise the limit"
        )


class SweepNotFound(DomainError):
    def __init__(self, sweep_id: int) -> None:
        super().__init__(f"sweep {sweep_id} does not exist; list yours with GET /v1/sweeps")


class SweepEnded(DomainError):
    def __init__(self, sweep: Sweep) -> None:
        super().__init__(f"sweep {sweep.id} is {sweep.status}: it has no trials left to cancel")


class GpuNotFound(DomainError):
    """A drain or undrain of a GPU no worker reported."""


class KeyNotFound(DomainError):
    def __init__(self, key_id: int) -> None:
        super().__init__(f"API key {key_id} does not exist; list the keys you may revoke with GET /v1/keys")


class ProfileNotFound(DomainError):
    pass


class ProfileUnreadable(DomainError):
    """A profile summary that is not one: the job's own processes write it, so it may hold anything."""


class TensorBoardNotFound(DomainError):
    pass


class CodeNotFound(DomainError):
    def __init__(self, code_id: str) -> None:
        super().__init__(
            f"code bundle {code_id} does not exist; list yours with GET /v1/code (`trainyard code ls`)"
        )


class CodeInUse(DomainError):
    def __init__(self, code_id: str, jobs: list[tuple[int, str]]) -> None:
        using = ", ".join(f"job {job_id} ({status})" for job_id, status in jobs)
        super().__init__(
            f"code bundle {code_id} is used by {using}; cancel them or wait for them to end, then delete it"
        )


class CodeTooLarge(DomainError):
    """An uploaded archive over TRAINYARD_CODE_MAX_BYTES."""

    def __init__(self, message: str) -> None:
        super().__init__(message, "body")


class UnsafeCode(DomainError):
    """An archive refused by the safe extraction (core/code_unpack.py); the message names the member."""

    def __init__(self, message: str) -> None:
        super().__init__(message, "body")


class InvalidSpec(SpecError):
    """The spec plans, but what it names on disk or in the database does not fit (a data root, a checkpoint);
    the message says the fix. A SpecError, so it leaves as the planner's problems do."""

    def __init__(self, field: str, message: str) -> None:
        super().__init__([Problem(field, message)])


class JobStateConflict(DomainError):
    """The job is in a state that does not allow the request (cancel a finished job, delete a running one)."""

    def __init__(self, job_id: int, status: JobStatus, fix: str) -> None:
        super().__init__(f"job {job_id} is {status}; {fix}")


class RunDirStuck(DomainError):
    """A job's run directory could not be moved out of the way, so the job is kept: deleting its rows alone
    would leave files that no job should find."""

    def __init__(self, job_id: int, reason: str) -> None:
        super().__init__(
            f"job {job_id} was not deleted: its files (runs/{job_id}) could not be moved aside ({reason}); "
            "ask the admin to check the runs directory, then delete it again"
        )


class IdempotencyConflict(DomainError):
    def __init__(self, key: str, job_id: int) -> None:
        super().__init__(
            f"Idempotency-Key {key!r} was already used for job {job_id} with a different body; "
            "send a new key for a new job",
            "Idempotency-Key",
        )


class QuotaExceeded(DomainError):
    """The user is at a quota; `retry_after_s` is when trying again is worth it."""

    def __init__(self, message: str, retry_after_s: int) -> None:
        super().__init__(message)
        self.retry_after_s = retry_after_s
