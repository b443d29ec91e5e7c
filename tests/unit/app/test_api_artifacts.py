"""What a job produced: metrics, checkpoints and logs."""

from __future__ import annotations

import hashlib
from pathlib import Path

from fastapi.testclient import TestClient
from sqlalchemy.orm import Session

from core.config import Settings
from core.models import Checkpoint, Metric
from core.states import JobStatus
from core.transitions import move
from tests.unit.conftest import submit


def add_metrics(session: Session, job_id: int, names: list[str], steps: range) -> None:
    for step in steps:
        for name in names:
            session.add(Metric(job_id=job_id, name=name, step=step, value=step / 10, epoch=step // 10))
    session.commit()


def test_metrics_page_by_step_without_losing_rows(client: TestClient, session: Session) -> None:
    job_id = submit(client)["id"]
    add_metrics(session, job_id, ["loss", "lr"], range(1, 6))
    url = f"/v1/jobs/{job_id}/metrics"
    seen: list[tuple[int, str]] = []
    after_step = None
    while True:
        params = {"limit": 3} if after_step is None else {"limit": 3, "after_step": after_step}
        page = client.get(url, params=params).json()
        assert len(page["data"]) <= 3 and len(page["data"]) % 2 == 0, "a page never splits a step"
        seen += [(row["step"], row["name"]) for row in page["data"]]
        after_step = page["next_after_step"]
        if after_step is None:
            break
    assert seen == [(step, name) for step in range(1, 6) for name in ("loss", "lr")]


def test_metrics_filter_by_name_and_step(client: TestClient, session: Session) -> None:
    job_id = submit(client)["id"]
    add_metrics(session, job_id, ["loss", "lr"], range(1, 11))
    page = client.get(
        f"/v1/jobs/{job_id}/metrics", params={"name": "loss", "after_step": 5, "limit": 2}
    ).json()
    assert [(row["name"], row["step"], row["value"]) for row in page["data"]] == [
        ("loss", 6, 0.6),
        ("loss", 7, 0.7),
    ]
    assert page["next_after_step"] == 7
    assert page["data"][0]["epoch"] == 0 and page["data"][0]["at"].endswith("Z")


def test_a_step_with_more_names_than_the_limit_comes_whole(client: TestClient, session: Session) -> None:
    job_id = submit(client)["id"]
    add_metrics(session, job_id, ["a", "b", "c"], range(1, 3))
    page = client.get(f"/v1/jobs/{job_id}/metrics", params={"limit": 2}).json()
    assert [(row["step"], row["name"]) for row in page["data"]] == [(1, "a"), (1, "b"), (1, "c")]
    rest = client.get(
        f"/v1/jobs/{job_id}/metrics", params={"limit": 2, "after_step": page["next_after_step"]}
    )
    assert [row["step"] for row in rest.json()["data"]] == [2, 2, 2]


def test_metrics_parameters_are_validated(client: TestClient) -> None:
    job_id = submit(client)["id"]
    url = f"/v1/jobs/{job_id}/metrics"
    for params in ({"name": "x" * 65}, {"name": ""}, {"limit": 10001}, {"limit": 0}):
        response = client.get(url, params=params)
        assert response.status_code == 422, params
        assert response.json()["errors"][0]["field"] in params
    assert client.get("/v1/jobs/999/metrics").status_code == 404


def test_checkpoints_list_and_download(client: TestClient, session: Session, settings: Settings) -> None:
    job_id = submit(client)["id"]
    path = settings.runs_dir / str(job_id) / "checkpoints" / "step-10.pt"
    path.parent.mkdir(parents=True)
    path.write_bytes(b"\x00weights\xff")
    session.add(Checkpoint(job_id=job_id, step=10, epoch=1, path=str(path), size_bytes=9))
    session.add(Checkpoint(job_id=job_id, step=5, epoch=0, path=str(path.with_name("gone.pt")), size_bytes=9))
    session.commit()
    listed = client.get(f"/v1/jobs/{job_id}/checkpoints").json()["data"]
    assert [c["step"] for c in listed] == [5, 10]
    kept = listed[1]
    assert kept["job_id"] == job_id and kept["size_bytes"] == 9 and kept["epoch"] == 1
    assert kept["download_url"] == f"/v1/checkpoints/{kept['id']}/download"
    blob = client.get(kept["download_url"])
    assert blob.status_code == 200
    assert blob.content == b"\x00weights\xff"
    assert blob.headers["content-type"] == "application/octet-stream"
    assert "step-10.pt" in blob.headers["content-disposition"]
    gone = client.get(listed[0]["download_url"])
    assert gone.status_code == 404 and "file is gone" in gone.json()["detail"]
    assert client.get("/v1/checkpoints/999/download").status_code == 404


def test_logs_read_by_byte_offset(client: TestClient, session: Session, settings: Settings) -> None:
    job_id = submit(client)["id"]
    logs = settings.runs_dir / str(job_id) / "logs"
    logs.mkdir(parents=True)
    (logs / "rank1.log").write_bytes("step 1\nünïcode\n".encode())
    (logs / "launcher.log").write_text("launching\n")
    url = f"/v1/jobs/{job_id}/logs"

    launcher = client.get(url).json()
    assert launcher == {"rank": None, "offset": 0, "next_offset": 10, "text": "launching\n", "eof": False}

    # 8 bytes end inside "ü" (2 bytes): the chunk stops before it rather than garbling it.
    first = client.get(url, params={"rank": 1, "limit_bytes": 8}).json()
    assert (first["text"], first["next_offset"]) == ("step 1\n", 7)
    rest = client.get(url, params={"rank": 1, "offset": first["next_offset"]}).json()
    assert rest["text"] == "ünïcode\n" and rest["eof"] is False
    assert client.get(url, params={"rank": 1, "offset": rest["next_offset"]}).json()["text"] == ""

    assert move(session, job_id, JobStatus.QUEUED, JobStatus.CANCELLED)
    session.commit()
    end = client.get(url, params={"rank": 1, "offset": rest["next_offset"]}).json()
    assert end["eof"] is True
    assert client.get(url, params={"rank": 1, "limit_bytes": 4}).json()["eof"] is False


def test_a_log_a_rank_replaced_with_a_link_is_never_followed(
    client: TestClient, settings: Settings, tmp_path: Path
) -> None:
    """A rank writes its run directory: a log (or the logs folder) made a link to a file outside it must
    not hand that file to the job's owner."""
    secret = tmp_path / "secret"
    secret.write_text("the server's secret\n")
    linked_file, linked_folder = submit(client)["id"], submit(client)["id"]
    logs = settings.runs_dir / str(linked_file) / "logs"
    logs.mkdir(parents=True)
    (logs / "rank0.log").symlink_to(secret)
    (settings.runs_dir / str(linked_folder)).mkdir(parents=True)
    (settings.runs_dir / str(linked_folder) / "logs").symlink_to(tmp_path, target_is_directory=True)
    (tmp_path / "rank0.log").write_text("outside the run directory\n")
    for job_id in (linked_file, linked_folder):
        shown = client.get(f"/v1/jobs/{job_id}/logs", params={"rank": 0})
        assert shown.status_code == 409 and shown.headers["content-type"] == "application/problem+json"
        assert "is a symbolic link" in shown.json()["detail"] and "secret" not in shown.text


def test_missing_log_is_empty_and_limits_are_bounded(client: TestClient) -> None:
    job_id = submit(client)["id"]
    url = f"/v1/jobs/{job_id}/logs"
    assert client.get(url, params={"rank": 3}).json()["text"] == ""
    assert client.get(url, params={"limit_bytes": (1 << 20) + 1}).status_code == 422
    assert client.get(url, params={"offset": -1}).status_code == 422
    assert client.get("/v1/jobs/999/logs").status_code == 404


def test_a_checkpoint_whose_bytes_changed_is_refused_not_served(
    client: TestClient, session: Session, settings: Settings
) -> None:
    job_id = submit(client)["id"]
    directory = settings.runs_dir / str(job_id) / "checkpoints"
    directory.mkdir(parents=True)
    weights = bytes(range(256)) * 16
    for step in (10, 20):
        (directory / f"step-{step}.pt").write_bytes(weights)
        sha256 = hashlib.sha256(weights).hexdigest()
        path = str(directory / f"step-{step}.pt")
        session.add(Checkpoint(job_id=job_id, step=step, epoch=0, path=path, size_bytes=4096, sha256=sha256))
    session.commit()
    with (directory / "step-20.pt").open("r+b") as f:  # 1 KiB overwritten, the size unchanged
        f.seek(1024)
        f.write(bytes(1024))
    sound, corrupt = client.get(f"/v1/jobs/{job_id}/checkpoints").json()["data"]
    assert client.get(sound["download_url"]).content == weights
    refused = client.get(corrupt["download_url"])
    assert refused.status_code == 409, refused.text
    assert refused.headers["content-type"] == "application/problem+json"
    assert f"checkpoint {corrupt['id']} is corrupt: its sha256 is " in refused.json()["detail"]


def test_a_checkpoint_path_leading_out_of_its_run_directory_is_not_served(
    client: TestClient, session: Session, settings: Settings
) -> None:
    """Rows as a worker without confinement recorded them from a rank's events."""
    job_id, other = submit(client)["id"], submit(client)["id"]
    run_dir = settings.runs_dir / str(job_id)
    (run_dir / "checkpoints").mkdir(parents=True)
    (run_dir / "checkpoints/step-2.pt").symlink_to("/etc/passwd")
    (settings.runs_dir / str(other)).mkdir()
    (settings.runs_dir / str(other) / "w.pt").write_bytes(b"another job's weights")
    for step, path in enumerate(
        [
            run_dir / "../../../../../../etc/passwd",
            run_dir / "checkpoints/step-2.pt",
            run_dir / f"../{other}/w.pt",
        ]
    ):
        session.add(Checkpoint(job_id=job_id, step=step, epoch=0, path=str(path), size_bytes=1))
    session.commit()
    for checkpoint in client.get(f"/v1/jobs/{job_id}/checkpoints").json()["data"]:
        answer = client.get(checkpoint["download_url"])
        assert answer.status_code == 409, answer.text
        assert "is refused" in answer.json()["detail"] or "not a plain name" in answer.json()["detail"]
        assert "root:" not in answer.text and "another job's" not in answer.text
