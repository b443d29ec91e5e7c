"""What a job produced, as the worker tailed it into SQL: metric series and checkpoints; and the export an
hf_causal_lm job leaves in its run directory when it finishes.

A checkpoint is served only from inside its own job's run directory (opened by jobspec/files.py's confined
opener) or objects, and only while its bytes hash to the sha256 recorded when it was written: a corrupt one is
refused (409) rather than handed over. An export is served the same way, checked against the sha256 its rank
wrote beside it.
"""

from __future__ import annotations

import hashlib
import os
from collections.abc import Iterator
from contextlib import ExitStack
from dataclasses import replace
from pathlib import Path, PurePosixPath

from sqlalchemy import select
from sqlalchemy.orm import Session

from app.services.errors import CheckpointCorrupt, CheckpointNotFound
from app.services.jobs import get_job
from app.services.keys import Caller
from app.services.runs import run_dir
from core.config import Settings
from core.models import Checkpoint, Metric
from core.storage import StoredObject, is_object_uri, locate
from jobspec.files import JobFile, JobFileMissing, largest_job_file, mismatch, open_job_file
from jobspec.hf_files import EXPORT_FILE

SHA256_FILE_MAX_BYTES = 4096  # "<64 hex digits>  export.tar\n", as sha256sum writes it


def list_metrics(
    session: Session, job_id: int, name: str | None, after_step: int | None, limit: int
) -> tuple[list[Metric], int | None]:
    """Ordered by step then name. A page never ends part-way through a step, so `after_step` alone resumes
    without losing rows; a single step with more names than `limit` comes whole."""
    get_job(session, job_id)
    query = select(Metric).where(Metric.job_id == job_id).order_by(Metric.step, Metric.name)
    if name is not None:
        query = query.where(Metric.name == name)
    if after_step is not None:
        query = query.where(Metric.step > after_step)
    rows = list(session.scalars(query.limit(limit + 1)))
    if len(rows) <= limit:
        return rows, None
    cut = rows[limit].step
    page = [row for row in rows[:limit] if row.step < cut]
    if not page:
        page = list(session.scalars(query.where(Metric.step == cut)))
    return page, page[-1].step


def list_checkpoints(session: Session, job_id: int) -> list[Checkpoint]:
    get_job(session, job_id)
    query = select(Checkpoint).where(Checkpoint.job_id == job_id).order_by(Checkpoint.step, Checkpoint.id)
    return list(session.scalars(query))


def owned_checkpoint(session: Session, checkpoint_id: int, caller: Caller) -> Checkpoint:
    """Another user's checkpoint is reported missing, exactly like an absent one."""
    checkpoint = session.get(Checkpoint, checkpoint_id)
    if checkpoint is None or not caller.may_see(get_job(session, checkpoint.job_id).owner):
        raise CheckpointNotFound(
            f"checkpoint {checkpoint_id} does not exist; list a job's with GET /v1/jobs/{{id}}/checkpoints"
        )
    return checkpoint


def _local(settings: Settings, checkpoint: Checkpoint) -> StoredObject | None:
    """Its file, opened through the confined opener, whose bytes hash to the recorded sha256; None when it is
    gone. Any rank can write its run directory, so the recorded path is confined again here."""
    root = run_dir(settings, checkpoint.job_id)
    name = os.path.relpath(checkpoint.path, root)  # "../..." for a path recorded outside: refused
    try:
        opened = open_job_file(root, name, largest_job_file(settings.job_max_file_gb))
    except JobFileMissing:
        return None
    if checkpoint.sha256 is not None and (why := mismatch(opened.sha256(), checkpoint.sha256)) is not None:
        opened.file.close()
        raise _corrupt(checkpoint.id, checkpoint.job_id, why)
    return StoredObject(PurePosixPath(name).name, opened.size, opened.served())


def _stored(settings: Settings, checkpoint: Checkpoint) -> StoredObject | None:
    """The object its s3:// path names, opened, its bytes checked as they stream (read once); None when
    it is gone."""
    found = locate(settings, checkpoint.path)
    if found is None:
        return None
    store, key = found
    job_id = checkpoint.job_id
    if not key.startswith(store.run_key(job_id, "")):
        raise CheckpointNotFound(f"checkpoint {checkpoint.id}'s object leads outside job {job_id}'s objects")
    content = store.open(key)
    if content is None or checkpoint.sha256 is None:  # recorded before checksums
        return content
    chunks = _verified(content.chunks, checkpoint.sha256, checkpoint.id, job_id)
    return replace(content, chunks=chunks)


def _corrupt(checkpoint_id: int, job_id: int, why: str) -> CheckpointCorrupt:
    return CheckpointCorrupt(
        f"checkpoint {checkpoint_id} is corrupt: {why}; pick another from GET /v1/jobs/{job_id}/checkpoints"
    )


def _verified(chunks: Iterator[bytes], expected: str, checkpoint_id: int, job_id: int) -> Iterator[bytes]:
    """An object's bytes, the last chunk held back until all of them hashed to `expected`: a client never
    gets the whole of a corrupt checkpoint, as the response ends short of its Content-Length."""
    digest = hashlib.sha256()
    held: bytes | None = None
    for chunk in chunks:
        digest.update(chunk)
        if held is not None:
            yield held
        held = chunk
    if (why := mismatch(digest.hexdigest(), expected)) is not None:
        raise _corrupt(checkpoint_id, job_id, why)
    if held is not None:
        yield held


def checkpoint_content(
    session: Session, settings: Settings, checkpoint_id: int, caller: Caller
) -> tuple[Checkpoint, StoredObject]:
    """A local file is checked whole before it is served; an object, as it streams."""
    checkpoint = owned_checkpoint(session, checkpoint_id, caller)
    stored = is_object_uri(checkpoint.path)
    content = _stored(settings, checkpoint) if stored else _local(settings, checkpoint)
    if content is None:
        raise CheckpointNotFound(
            f"checkpoint {checkpoint_id}'s file is gone (the job kept only its last checkpoints); "
            f"pick a newer one from GET /v1/jobs/{checkpoint.job_id}/checkpoints"
        )
    return checkpoint, content


def export_file(settings: Settings, job_id: int) -> JobFile:
    """The job's export.tar, opened inside its run directory, refused when its bytes are not the ones whose
    sha256 was written beside it (the rank writes that sidecar before the file takes its name)."""
    root = run_dir(settings, job_id)
    try:
        export = open_job_file(root, EXPORT_FILE, largest_job_file(settings.job_max_file_gb))
    except JobFileMissing:
        raise CheckpointNotFound(
            f"job {job_id} has no export: a model.arch hf_causal_lm job with model.export writes one when it "
            "finishes; wait for it to succeed"
        ) from None
    with ExitStack() as stack:
        stack.enter_context(export)  # closed unless it is served
        if (why := _export_mismatch(root, export)) is not None:
            raise CheckpointCorrupt(f"job {job_id}'s export is corrupt: {why}; run the job again to write it")
        stack.pop_all()
    return export


def _export_mismatch(root: Path, export: JobFile) -> str | None:
    sums = f"{EXPORT_FILE}.sha256"
    try:
        with open_job_file(root, sums, SHA256_FILE_MAX_BYTES) as side:
            expected = b"".join(side.chunks()).decode("utf-8", errors="replace").partition(" ")[0]
    except JobFileMissing:
        return f"the {sums} written beside it is missing"
    return mismatch(export.sha256(), expected)
