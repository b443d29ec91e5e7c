"""Code bundles: receive and store an archive (one row per user who pushed it), list, show and delete them;
and the submit-time check of a spec's `code`. The files themselves are core/code_store.py's."""

from __future__ import annotations

from collections.abc import AsyncIterable
from dataclasses import dataclass

import anyio
from sqlalchemy import bindparam, func, select
from sqlalchemy.orm import Session

from app.schemas import CodeBundleDetail, CodeBundlePublic, CodeFile
from app.services.errors import CodeInUse, CodeNotFound, CodeTooLarge, InvalidSpec, QuotaExceeded, UnsafeCode
from app.services.keys import Caller
from core import code_store
from core.code_unpack import Manifest, QuotaPassed, UnsafeArchive
from core.config import Settings
from core.models import CodeBundle, Job
from core.states import JobStatus
from jobspec.spec import JobSpec
from jobspec.spec_program import missing_script

PUSH_HINT = "push it with `trainyard code push DIR` (POST /v1/code) and name the id it prints"

# What a bundle takes on disk: its archive, kept to unpack on other hosts, and its files and folders.
_HELD_BYTES = select(func.coalesce(func.sum(CodeBundle.size_bytes + CodeBundle.unpacked_bytes), 0)).where(
    CodeBundle.owner == bindparam("owner")
)


class UploadTimedOut(Exception):
    """A body still arriving after TRAINYARD_CODE_UPLOAD_TIMEOUT_S; the route answers 408."""

    def __init__(self, timeout_s: float, received: int) -> None:
        super().__init__(
            f"the archive's body did not arrive within TRAINYARD_CODE_UPLOAD_TIMEOUT_S={timeout_s:g} s "
            f"({received} bytes had); send it again over a faster link, or leave data and weights out with "
            ".trainyardignore"
        )


@dataclass(frozen=True)
class CodeQuota:
    """A user's code quota, and what their stored bundles took of it when it was read."""

    owner: str
    held: int
    quota: int
    retry_after_s: int

    def refuse(self, taking: int, what: str) -> QuotaExceeded:
        return QuotaExceeded(
            f"user {self.owner}'s code bundles take {self.held} bytes (their archives and unpacked files and "
            f"folders); {what}, {taking} bytes, would pass TRAINYARD_CODE_QUOTA_BYTES={self.quota}; remove "
            "bundles no job needs any more (`trainyard code rm ID`), or wait for your other uploads to end",
            self.retry_after_s,
        )


def held_bytes(session: Session, owner: str) -> int:
    return int(session.execute(_HELD_BYTES, {"owner": owner}).scalar_one())


def code_quota(session: Session, settings: Settings, owner: str) -> CodeQuota:
    held = held_bytes(session, owner)
    return CodeQuota(owner, held, settings.code_quota_bytes, settings.quota_retry_after_s)


async def receive(
    upload: code_store.Incoming, chunks: AsyncIterable[bytes], declared: str | None, quota: CodeQuota
) -> None:
    """The request's body into `upload`, refused as soon as it is known to be over the cap (from its
    Content-Length before a byte is read, or while it streams when it has none), as soon as it and the
    owner's other uploads in progress pass their quota, or once TRAINYARD_CODE_UPLOAD_TIMEOUT_S is over."""
    timeout_s = upload.settings.code_upload_timeout_s
    try:
        if declared is not None and declared.isdigit() and int(declared) > upload.max_bytes:
            raise code_store.ArchiveTooLarge(upload.max_bytes)
        with anyio.fail_after(timeout_s):
            async for chunk in chunks:
                upload.write(chunk)
                if quota.held + (pending := upload.pending()) > quota.quota:
                    raise quota.refuse(pending, "your uploads in progress, this one's bytes so far included")
    except code_store.ArchiveTooLarge as exc:
        raise CodeTooLarge(str(exc)) from exc
    except TimeoutError as exc:
        raise UploadTimedOut(timeout_s, upload.size) from exc


def _store(session: Session, settings: Settings, upload: code_store.Incoming, counted: bool) -> Manifest:
    """The archive unpacked; into what the owner's quota leaves, unless it is `counted` already."""
    if counted:
        return code_store.store(settings, upload)
    quota = code_quota(session, settings, upload.owner)
    pending = upload.pending()
    try:
        return code_store.store(settings, upload, room=quota.quota - quota.held - pending)
    except QuotaPassed as exc:
        what = "this bundle's archive and files unpacked so far, with your other uploads in progress"
        raise quota.refuse(pending + exc.charged, what) from exc


def push(
    session: Session, settings: Settings, caller: Caller, upload: code_store.Incoming
) -> tuple[CodeBundle, bool]:
    """The caller's bundle for the received archive, and whether this call created it (False: the caller
    pushed the same bytes before). The row is written only once every file is in place."""
    code_id = upload.code_id
    with code_store.locked(settings):
        row = session.get(CodeBundle, (code_id, caller.user))
        if row is not None and code_store.is_stored(settings, code_id):
            return row, False
        try:
            manifest = _store(session, settings, upload, counted=row is not None)
        except UnsafeArchive as exc:
            raise UnsafeCode(str(exc)) from exc
        if row is not None:  # its files had gone missing from this host: put back, the row unchanged
            return row, False
        row = CodeBundle(
            id=code_id,
            owner=caller.user,
            size_bytes=upload.size,
            unpacked_bytes=manifest.unpacked_bytes,
            file_count=manifest.file_count,
            files=manifest.files,
        )
        session.add(row)
        session.commit()
    return row, True


def get_owned_bundle(session: Session, code_id: str, caller: Caller) -> CodeBundle:
    """The caller's row for the id; an admin without one gets the first user's. Another user's bundle is
    reported missing, like an absent one, so ids cannot be probed."""
    row = session.get(CodeBundle, (code_id, caller.user))
    if row is None and caller.is_admin:
        first = select(CodeBundle).where(CodeBundle.id == code_id).order_by(CodeBundle.created_at).limit(1)
        row = session.scalar(first)
    if row is None:
        raise CodeNotFound(code_id)
    return row


def list_bundles(session: Session, caller: Caller) -> list[CodeBundlePublic]:
    query = select(CodeBundle).order_by(CodeBundle.created_at.desc(), CodeBundle.id)
    if not caller.is_admin:
        query = query.where(CodeBundle.owner == caller.user)
    return [CodeBundlePublic.model_validate(row) for row in session.scalars(query)]


def jobs_using(session: Session, bundle: CodeBundle) -> list[tuple[int, str]]:
    """(id, status) of the owner's jobs whose spec names the bundle, newest first."""
    query = (
        select(Job.id, Job.status)
        .where(Job.owner == bundle.owner, Job.spec["code"].as_string() == bundle.id)
        .order_by(Job.id.desc())
    )
    return [(job_id, str(status)) for job_id, status in session.execute(query).tuples()]


def detail(session: Session, bundle: CodeBundle) -> CodeBundleDetail:
    return CodeBundleDetail(
        **CodeBundlePublic.model_validate(bundle).model_dump(),
        files=[CodeFile.model_validate(entry) for entry in bundle.files],
        jobs=[job_id for job_id, _ in jobs_using(session, bundle)],
    )


def delete_bundle(session: Session, settings: Settings, bundle: CodeBundle) -> None:
    """Refused while one of the owner's unfinished jobs (cancelling ones included: their ranks still run)
    names it. The files go with the last row for the id: another user who pushed the same bytes keeps them."""
    using = jobs_using(session, bundle)
    if busy := [(job_id, status) for job_id, status in using if not JobStatus(status).is_terminal]:
        raise CodeInUse(bundle.id, busy)
    code_id = bundle.id
    with code_store.locked(settings):
        session.delete(bundle)
        session.commit()
        if not session.scalar(select(func.count()).where(CodeBundle.id == code_id)):
            code_store.remove(settings, code_id)


def check_code(session: Session, settings: Settings, spec: JobSpec, caller: Caller) -> None:
    """A spec's `code` names a bundle of the caller's own, on a server that runs user code."""
    if spec.code is None:
        return
    if not settings.user_code:
        raise InvalidSpec(
            "code",
            "user code is off on this server (TRAINYARD_USER_CODE=off): remove `code` and the factories to "
            "train a built-in architecture, or ask the admin to turn user code on",
        )
    bundle = session.get(CodeBundle, (spec.code, caller.user))
    if bundle is None:
        raise InvalidSpec("code", f"code bundle {spec.code} does not exist or is not yours; {PUSH_HINT}")
    if spec.program is not None:
        files = [entry["path"] for entry in bundle.files]
        if why := missing_script(spec.program, files, complete=len(files) == bundle.file_count):
            raise InvalidSpec("program.entrypoint", why)
