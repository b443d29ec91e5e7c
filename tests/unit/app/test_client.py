"""TrainyardClient against the real app in-process: every call, problem details, paging, the SSE stream."""

from __future__ import annotations

import pytest
from fastapi.testclient import TestClient
from sqlalchemy import update
from sqlalchemy.orm import Session

from app.api.routes import stream
from app.client import ApiError, TrainyardClient
from app.schemas import RetryFrom, StreamEnd
from core.config import get_settings
from core.keys import create_key
from core.models import Job, Metric
from core.states import JobStatus
from tests.unit.conftest import job_body


@pytest.fixture
def api(client: TestClient) -> TrainyardClient:
    return TrainyardClient(http=client)


def finish_with_losses(session: Session, job_id: int, steps: range) -> None:
    session.add_all(Metric(job_id=job_id, name="loss", step=step, value=1.0 / (step + 1)) for step in steps)
    session.execute(update(Job).where(Job.id == job_id).values(status=JobStatus.SUCCEEDED))
    session.commit()


def test_submit_get_list_cancel_retry(api: TrainyardClient) -> None:
    plan = api.submit(job_body(), dry_run=True)
    assert plan.job is None and plan.plan.world_size == 1
    job = api.submit(job_body(name="first")).job
    assert job is not None and (job.name, job.status, job.queue_position) == ("first", JobStatus.QUEUED, 1)
    assert api.get_job(job.id).id == job.id
    assert [j.id for j in api.list_jobs(JobStatus.QUEUED).data] == [job.id]
    assert api.list_jobs(JobStatus.RUNNING).data == []
    assert api.set_priority(job.id, 7).priority == 7
    assert [e.job_id for e in api.queue().data] == [job.id]
    assert api.cancel(job.id).status is JobStatus.CANCELLED
    retried, created = api.retry(job.id)
    assert created and retried.job is not None and retried.job.id != job.id
    assert retried.job.parent_id == job.id
    repeated, created = api.retry(job.id)
    assert not created and repeated.job == retried.job
    again, created = api.retry(job.id, start=RetryFrom.SCRATCH, again=True)
    assert created and again.job is not None and again.job.id not in (job.id, retried.job.id)
    assert [e.to_status for e in api.events(job.id).data] == [JobStatus.QUEUED, JobStatus.CANCELLED]
    assert api.gpus().data == []


def test_refusals_raise_api_error_with_the_problem_detail(api: TrainyardClient) -> None:
    with pytest.raises(ApiError) as refused:
        api.submit(job_body(train={"lr": -1, "max_steps": 5}))
    assert refused.value.status == 422 and "train.lr" in refused.value.detail
    with pytest.raises(ApiError) as missing:
        api.get_job(4242)
    assert missing.value.status == 404 and "job 4242 does not exist" in missing.value.detail


def test_metrics_pages_downsampling_and_stream(api: TrainyardClient, session: Session) -> None:
    job = api.submit(job_body()).job
    assert job is not None
    finish_with_losses(session, job.id, range(2_500))
    everything = api.all_metrics(job.id, "loss", page_size=1000)  # three pages
    assert [row.step for row in everything] == list(range(2_500))
    short = api.metrics(job.id, "loss", max_points=100).data
    assert len(short) <= 100
    assert (short[0].step, short[-1].step) == (0, 2_499)
    streamed = list(api.stream_metrics(job.id, "loss", after_step=2_490))
    assert [row.step for row in streamed if not isinstance(row, StreamEnd)] == list(range(2_491, 2_500))
    assert streamed[-1] == StreamEnd(status=JobStatus.SUCCEEDED, message=None)


def test_logs_of_a_job_not_started_are_empty(api: TrainyardClient) -> None:
    job = api.submit(job_body()).job
    assert job is not None
    chunk = api.logs(job.id, rank=0)
    assert (chunk.text, chunk.next_offset, chunk.eof) == ("", 0, False)


def test_token_is_sent_as_bearer(
    client: TestClient, session: Session, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("TRAINYARD_AUTH", "on")
    get_settings.cache_clear()
    token = create_key(session, "ada", admin=False)
    with pytest.raises(ApiError) as anonymous:
        TrainyardClient(http=client).list_jobs()
    assert anonymous.value.status == 401
    assert TrainyardClient(token=token, http=client).list_jobs().data == []


@pytest.fixture(autouse=True)
def fast_polls(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(stream, "POLL_S", 0.02)
