"""The API's side of artifact_store=s3, with nothing on its own disk: logs read from the uploaded parts,
checkpoints streamed from the bucket, resume from a stored checkpoint, and a deleted job's objects gone."""

from __future__ import annotations

import hashlib
from collections.abc import Callable
from pathlib import Path

import pytest
from fastapi.testclient import TestClient
from sqlalchemy.orm import Session

from app.main import create_app
from core.config import Settings
from core.models import Checkpoint
from core.states import JobStatus
from core.storage import ObjectStore
from core.transitions import move
from tests.unit.conftest import submit

pytest_plugins = ["tests.unit.s3_fixtures"]

Upload = Callable[[int, str, bytes], str]


@pytest.fixture
def upload(s3_store: ObjectStore, tmp_path: Path) -> Upload:
    """Put bytes where the worker would for job `job_id`'s run-directory path `relative`; returns the URI."""

    def put(job_id: int, relative: str, content: bytes) -> str:
        file = tmp_path / "upload"
        file.write_bytes(content)
        key = s3_store.run_key(job_id, relative)
        s3_store.put_file(file, key)
        return s3_store.uri(key)

    return put


def end(session: Session, job_id: int) -> None:
    assert move(session, job_id, JobStatus.QUEUED, JobStatus.CANCELLED)
    session.commit()


def test_logs_read_across_the_uploaded_parts_by_byte_offset(
    client: TestClient, session: Session, s3_store: ObjectStore
) -> None:
    job_id = submit(client)["id"]
    key = s3_store.run_key(job_id, "logs/rank1.log")
    log = "step 1\nünïcode\n".encode()
    # Two heartbeats' parts, the first ending inside a character.
    s3_store.put_bytes(s3_store.part_key(key, 8), log[:8])
    s3_store.put_bytes(s3_store.part_key(key, len(log)), log[8:])
    url = f"/v1/jobs/{job_id}/logs"
    assert client.get(url).json()["text"] == "", "the launcher's log is not uploaded yet"

    first = client.get(url, params={"rank": 1, "limit_bytes": 8}).json()
    assert (first["text"], first["next_offset"], first["eof"]) == ("step 1\n", 7, False)
    rest = client.get(url, params={"rank": 1, "offset": 7}).json()
    assert (rest["text"], rest["next_offset"]) == ("ünïcode\n", 17)
    end(session, job_id)
    past = client.get(url, params={"rank": 1, "offset": 17}).json()
    assert (past["text"], past["eof"]) == ("", True)
    assert client.get(url, params={"rank": 1, "limit_bytes": 4}).json()["eof"] is False


def test_checkpoint_streams_from_the_bucket(
    client: TestClient, session: Session, s3_store: ObjectStore, upload: Upload
) -> None:
    job_id = submit(client)["id"]
    blob = bytes(range(256)) * 5000
    uri = upload(job_id, "checkpoints/step-10.pt", blob)
    session.add(Checkpoint(job_id=job_id, step=10, epoch=1, path=uri, size_bytes=len(blob)))
    session.add(Checkpoint(job_id=job_id, step=5, epoch=0, path=uri.replace("10", "5"), size_bytes=1))
    session.add(
        Checkpoint(job_id=job_id, step=1, epoch=0, path=uri.replace(s3_store.bucket, "x"), size_bytes=1)
    )
    session.commit()
    gone, foreign, kept = client.get(f"/v1/jobs/{job_id}/checkpoints").json()["data"]
    response = client.get(kept["download_url"])
    assert response.status_code == 200
    assert response.content == blob
    assert response.headers["content-length"] == str(len(blob))
    assert response.headers["content-type"] == "application/octet-stream"
    assert response.headers["content-disposition"] == f'attachment; filename="job{job_id}-step10-step-10.pt"'
    for missing in (gone, foreign):
        answer = client.get(missing["download_url"])
        assert answer.status_code == 404 and "file is gone" in answer.json()["detail"]


def test_resume_from_a_stored_checkpoint_and_delete_the_job(
    client: TestClient, session: Session, s3_store: ObjectStore, upload: Upload
) -> None:
    job_id = submit(client)["id"]
    uri = upload(job_id, "checkpoints/step-10.pt", b"weights")
    log_part = s3_store.part_key(s3_store.run_key(job_id, "logs/rank0.log"), 3)
    s3_store.put_bytes(log_part, b"log")
    session.add(Checkpoint(job_id=job_id, step=10, epoch=1, path=uri, size_bytes=7))
    session.add(Checkpoint(job_id=job_id, step=11, epoch=1, path=f"s3://other/{uri[5:]}", size_bytes=7))
    session.commit()
    ours, foreign = client.get(f"/v1/jobs/{job_id}/checkpoints").json()["data"]

    resumed = submit(client, checkpoint={"resume_from": ours["id"]})
    assert resumed["plan"]["resume_path"] == uri
    refused = client.post("/v1/jobs", json={**resumed["spec"], "checkpoint": {"resume_from": foreign["id"]}})
    assert refused.status_code == 422 and "TRAINYARD_S3_BUCKET" in refused.text

    end(session, job_id)
    assert client.delete(f"/v1/jobs/{job_id}").status_code == 204
    assert not s3_store.exists(log_part)
    assert not s3_store.exists(s3_store.run_key(job_id, "checkpoints/step-10.pt"))


def test_a_corrupt_object_never_reaches_the_client_whole(
    settings: Settings, session: Session, s3_store: ObjectStore, upload: Upload
) -> None:
    """Checked as it streams: the last chunk is held back until the whole has hashed, so a client that the
    check fails gets a response cut short of its Content-Length, never all of the bad bytes."""
    client = TestClient(create_app(), raise_server_exceptions=False)
    job_id = submit(client)["id"]
    blob = bytes(range(256)) * 5000  # two chunks of the stream
    recorded = hashlib.sha256(blob).hexdigest()
    for step, content in ((10, blob), (20, blob[:-1] + b"!")):
        uri = upload(job_id, f"checkpoints/step-{step}.pt", content)
        session.add(
            Checkpoint(job_id=job_id, step=step, epoch=1, path=uri, size_bytes=len(blob), sha256=recorded)
        )
    session.commit()
    sound, corrupt = client.get(f"/v1/jobs/{job_id}/checkpoints").json()["data"]
    assert client.get(sound["download_url"]).content == blob
    cut = client.get(corrupt["download_url"])
    assert len(cut.content) < int(cut.headers["content-length"]) == len(blob), "a client sees it cut short"
