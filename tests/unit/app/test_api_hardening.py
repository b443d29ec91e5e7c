"""Hostile input (issue 22): lax ids, text a database cannot store, oversized ids and offsets, CSRF."""

from __future__ import annotations

import json
from typing import Any

import pytest
from fastapi.testclient import TestClient

from app.services.runs import log_path
from core.config import Settings
from tests.unit.conftest import assert_problem, job_body, submit

LAX_IDS = ["1.0", "1_0", "+1", "001", " 1", "1 ", "-0"]


@pytest.mark.parametrize("raw", LAX_IDS)
@pytest.mark.parametrize(
    ("method", "template"),
    [
        ("GET", "/v1/jobs/{}"),
        ("DELETE", "/v1/jobs/{}"),
        ("POST", "/v1/jobs/{}/cancel"),
        ("GET", "/v1/jobs/{}/logs"),
        ("GET", "/v1/checkpoints/{}/download"),
    ],
)
def test_path_ids_are_canonical_integers(client: TestClient, method: str, template: str, raw: str) -> None:
    submit(client)
    response = client.request(method, template.format(raw))
    field = "checkpoint_id" if "checkpoints" in template else "job_id"
    assert_problem(response, field, "digits only")
    assert client.get("/v1/jobs/1").status_code == 200


def test_canonical_ids_still_work_and_every_route_is_documented(client: TestClient) -> None:
    job = submit(client)
    assert client.get(f"/v1/jobs/{job['id']}").status_code == 200
    paths = client.get("/openapi.json").json()["paths"]
    assert "/v1/jobs/{job_id}" in paths
    assert paths["/v1/jobs/{job_id}"]["get"]["parameters"][0]["schema"]["type"] == "integer"


@pytest.mark.parametrize(
    ("url", "field"),
    [
        ("/v1/jobs/1/logs?offset=1.0", "offset"),
        ("/v1/jobs/1/metrics?after_step=+3", "after_step"),
        ("/v1/jobs?cursor=07", "cursor"),
    ],
)
def test_query_ids_are_canonical_integers(client: TestClient, url: str, field: str) -> None:
    submit(client)
    assert_problem(client.get(url), field, "digits only")


@pytest.mark.parametrize(
    ("sections", "field"),
    [
        ({"name": "a\u0000b"}, "name"),
        ({"model": {"arch": "mlp", "kwargs": {"depth": "\u0000"}}}, "model.kwargs.depth"),
        ({"model": {"arch": "mlp", "kwargs": {"a\u0000": 1}}}, "model.kwargs"),
        ({"model": {"arch": "mlp", "kwargs": {"x": [{"y": "\u0000"}]}}}, "model.kwargs.x.0.y"),
    ],
)
def test_nul_in_spec_is_refused_naming_the_field(
    client: TestClient, sections: dict[str, Any], field: str
) -> None:
    assert_problem(client.post("/v1/jobs", json=job_body(**sections)), field, "NUL")


def test_lone_surrogate_kwargs_key_is_refused(client: TestClient) -> None:
    raw = job_body(model={"arch": "mlp", "kwargs": {"KEY": 1}})
    body = json.dumps(raw).replace("KEY", "\\ud800")
    response = client.post("/v1/jobs", content=body, headers={"content-type": "application/json"})
    assert_problem(response, "model.kwargs", "surrogate")


def test_resume_from_beyond_database_ids_is_422(client: TestClient) -> None:
    response = client.post("/v1/jobs", json=job_body(checkpoint={"resume_from": 2**63}))
    assert_problem(response, "checkpoint.resume_from", "2147483647")


def test_log_offset_far_past_the_end_reads_nothing(client: TestClient, settings: Settings) -> None:
    job = submit(client)
    path = log_path(settings, job["id"], None)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(b"hello\n")
    response = client.get(f"/v1/jobs/{job['id']}/logs?offset={10**14}")
    assert response.status_code == 200, response.text
    assert response.json()["text"] == ""
    assert response.json()["next_offset"] == 10**14


@pytest.mark.parametrize("offset", [2**53 + 1, 2**63, 10**30])
def test_log_offset_beyond_any_file_is_422(client: TestClient, offset: int) -> None:
    job = submit(client)
    assert_problem(client.get(f"/v1/jobs/{job['id']}/logs?offset={offset}"), "offset", "less than or equal")


def test_cross_site_post_is_refused(client: TestClient) -> None:
    job = submit(client)
    for headers in ({"Sec-Fetch-Site": "cross-site"}, {"Origin": "http://evil.example"}, {"Origin": "null"}):
        response = client.post(f"/v1/jobs/{job['id']}/cancel", headers=headers)
        assert response.status_code == 403, response.text
        assert response.headers["content-type"] == "application/problem+json"
        assert "cross-site POST refused" in response.json()["detail"]
    assert client.get(f"/v1/jobs/{job['id']}").json()["status"] == "queued"


def test_same_origin_post_passes(client: TestClient) -> None:
    job = submit(client)
    headers = {"Origin": "http://testserver", "Sec-Fetch-Site": "same-origin"}
    assert client.post(f"/v1/jobs/{job['id']}/cancel", headers=headers).status_code == 200


@pytest.mark.parametrize("content_type", ["text/plain", "application/x-www-form-urlencoded", None])
def test_post_body_must_be_json(client: TestClient, content_type: str | None) -> None:
    headers = {"content-type": content_type} if content_type else {}
    response = client.post("/v1/jobs", content=json.dumps(job_body()), headers=headers)
    assert response.status_code == 415, response.text
    assert "Content-Type: application/json" in response.json()["detail"]
    cancel = client.post("/v1/jobs/1/cancel", content="x", headers=headers)
    assert cancel.status_code == 415


def test_code_upload_keeps_its_archive_types(client: TestClient) -> None:
    response = client.post("/v1/code", content=b"not a tar", headers={"content-type": "application/gzip"})
    assert response.status_code != 415, response.text


def test_unknown_host_is_refused(client: TestClient) -> None:
    assert client.get("/v1/jobs", headers={"Host": "rebound.evil.example"}).status_code == 400
    assert client.get("/v1/jobs", headers={"Host": "127.0.0.1:8000"}).status_code == 200
