"""Every route that serves a file a job wrote opens it through the confined opener: a link (at the file or at
a folder on its way), a FIFO or a file over its bound, planted by the job's own processes, is answered with a
problem+json 404/409/413 and never with what the link points at (issue 28, defect 5).

The table below lists each such route with the files it reads; a new route under /v1/jobs/{job_id} or
/v1/checkpoints must be added to it, or to the routes that read no job file, or this test fails.
"""

from __future__ import annotations

import hashlib
import os
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
from fastapi.testclient import TestClient
from sqlalchemy.orm import Session

from app.main import create_app
from app.services.artifacts import SHA256_FILE_MAX_BYTES
from app.services.profiles import SUMMARY_MAX_BYTES, TRACE_MAX_BYTES
from core.config import Settings, get_settings
from core.models import Checkpoint
from jobspec.files import largest_job_file
from tests.unit.app.test_profile_api import SUMMARY
from tests.unit.conftest import submit

# A FIFO opened without O_NONBLOCK waits for a writer forever: that is a failure, not a slow test.
pytestmark = pytest.mark.timeout(30)

SECRET = b"root:$6$the-server's-secret-not-the-job's"
GOOD = b"the job's own bytes"
# TRAINYARD_JOB_MAX_FILE_GB for these tests, so that a file over it is a few kB, not 256 GB.
MAX_FILE_GB = 4e-6
MAX_FILE = largest_job_file(MAX_FILE_GB)


@dataclass(frozen=True)
class JobFiles:
    """How a route serving job files is reached: the files it reads (by name in the run directory, with
    the bound it reads each under; None: any size, as it reads ranges) and the spec sections it needs."""

    files: dict[str, int | None]
    spec: dict[str, Any] = field(default_factory=dict)
    # A listing leaves out what is not a regular file (so a folder with only that is empty: 404).
    listing: bool = False


SERVES_JOB_FILES: dict[tuple[str, str], JobFiles] = {
    ("GET", "/v1/jobs/{job_id}/profile"): JobFiles(
        {"profile/summary.json": SUMMARY_MAX_BYTES}, {"profile": {"steps": 3}}
    ),
    ("GET", "/v1/jobs/{job_id}/profile/trace"): JobFiles(
        {"profile/trace.json": TRACE_MAX_BYTES}, {"profile": {"steps": 3}}
    ),
    ("GET", "/v1/jobs/{job_id}/tensorboard"): JobFiles(
        {"tensorboard/run/events.out.tfevents.1.host": MAX_FILE}, {"metrics": {"tensorboard": True}}, True
    ),
    ("GET", "/v1/jobs/{job_id}/logs"): JobFiles({"logs/launcher.log": None}),
    ("GET", "/v1/checkpoints/{checkpoint_id}/download"): JobFiles({"checkpoints/step-1.pt": MAX_FILE}),
    ("GET", "/v1/jobs/{job_id}/export"): JobFiles(
        {"export.tar": MAX_FILE, "export.tar.sha256": SHA256_FILE_MAX_BYTES}
    ),
}

READS_NO_JOB_FILE = {
    ("GET", "/v1/jobs/{job_id}"),
    ("PATCH", "/v1/jobs/{job_id}"),
    ("DELETE", "/v1/jobs/{job_id}"),  # moves the run directory aside; shutil.rmtree follows no link
    ("POST", "/v1/jobs/{job_id}/cancel"),
    ("POST", "/v1/jobs/{job_id}/retry"),
    ("GET", "/v1/jobs/{job_id}/events"),
    ("GET", "/v1/jobs/{job_id}/metrics"),
    ("GET", "/v1/jobs/{job_id}/metrics/stream"),
    ("GET", "/v1/jobs/{job_id}/checkpoints"),
    # The worker reads the ranks' dumps through the confined opener (worker/attempts/stack_capture.py); the
    # API serves what it stored in job_stacks, and the POST only records a request.
    ("GET", "/v1/jobs/{job_id}/stacks"),
    ("POST", "/v1/jobs/{job_id}/stacks"),
}


def job_routes() -> set[tuple[str, str]]:
    """From the app's OpenAPI document: FastAPI keeps included routers' routes out of `app.routes`, and every
    /v1 route is in the document (the API's clients and its schemathesis test read it)."""
    paths = create_app().openapi()["paths"]
    return {
        (method.upper(), path)
        for path, operations in paths.items()
        for method in operations
        if path.startswith(("/v1/jobs/{job_id}", "/v1/checkpoints/"))
    }


def test_every_route_under_a_job_is_known_to_read_its_files_or_not() -> None:
    routes = job_routes()
    unknown = routes - SERVES_JOB_FILES.keys() - READS_NO_JOB_FILE
    assert not unknown, (
        f"{sorted(unknown)}: add each to SERVES_JOB_FILES (with the job files it reads) or READS_NO_JOB_FILE"
    )
    assert not (SERVES_JOB_FILES.keys() | READS_NO_JOB_FILE) - routes, "a listed route is gone: drop it"


@pytest.fixture
def small_files(settings: Settings, monkeypatch: pytest.MonkeyPatch) -> Settings:
    monkeypatch.setenv("TRAINYARD_JOB_MAX_FILE_GB", str(MAX_FILE_GB))
    get_settings.cache_clear()
    return get_settings()


def good_bytes(name: str) -> bytes:
    if name.endswith("summary.json"):
        return SUMMARY.model_dump_json().encode()
    if name.endswith(".sha256"):
        return f"{hashlib.sha256(GOOD).hexdigest()}  export.tar\n".encode()
    return GOOD


def write(path: Path, data: bytes) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(data)


def link_to_secret(run_dir: Path, name: str, tmp_path: Path) -> None:
    write(tmp_path / "secret", SECRET)
    (run_dir / name).unlink()
    (run_dir / name).symlink_to(tmp_path / "secret")


def linked_folder(run_dir: Path, name: str, tmp_path: Path) -> None:
    """The first folder on the way made a link to a folder outside, which holds the secret by that name."""
    top, rest = name.split("/", 1)
    os.rename(run_dir / top, tmp_path / "elsewhere")
    write(tmp_path / "elsewhere" / rest, SECRET)
    (run_dir / top).symlink_to(tmp_path / "elsewhere", target_is_directory=True)


def fifo(run_dir: Path, name: str, tmp_path: Path) -> None:
    (run_dir / name).unlink()
    os.mkfifo(run_dir / name)


def over_bound(run_dir: Path, name: str, tmp_path: Path) -> None:
    """A sparse file one byte over the bound, its first bytes the secret's (as if the job copied them)."""
    bound = next(b for files in SERVES_JOB_FILES.values() for n, b in files.files.items() if n == name)
    assert bound is not None
    write(run_dir / name, SECRET)
    os.truncate(run_dir / name, bound + 1)


Plant = Callable[[Path, str, Path], None]
PLANTS: dict[str, tuple[Plant, int]] = {
    "link": (link_to_secret, 409),
    "linked folder": (linked_folder, 409),
    "fifo": (fifo, 409),
    "over its bound": (over_bound, 413),
}


def cases() -> list[Any]:
    found = []
    for (method, path), served in SERVES_JOB_FILES.items():
        for name, bound in served.files.items():
            for plant in PLANTS:
                if plant == "linked folder" and "/" not in name:
                    continue  # right in the run directory, which the job cannot replace
                if plant == "over its bound" and bound is None:
                    continue
                found.append(pytest.param(method, path, name, plant, id=f"{path}:{name}:{plant}"))
    return found


def prepared(client: TestClient, session: Session, settings: Settings, path: str) -> tuple[str, Path]:
    """A job with every file the route reads written as its trainer would; the route's URL for it."""
    served = SERVES_JOB_FILES[("GET", path)]
    job_id = submit(client, **served.spec)["id"]
    run_dir = settings.runs_dir / str(job_id)
    for name in served.files:
        write(run_dir / name, good_bytes(name))
    checkpoint = Checkpoint(job_id=job_id, step=1, epoch=0, path=str(run_dir / "checkpoints/step-1.pt"))
    # No sha256 recorded (as before checksums): a route that followed a link would serve what it points at.
    checkpoint.size_bytes = len(GOOD)
    session.add(checkpoint)
    session.commit()
    return path.format(job_id=job_id, checkpoint_id=checkpoint.id), run_dir


@pytest.mark.parametrize("path", [path for _, path in SERVES_JOB_FILES])
def test_each_route_serves_its_files_as_written(
    client: TestClient, session: Session, small_files: Settings, path: str
) -> None:
    """The table's set-up is right: untouched, every route answers 200 with the job's bytes."""
    url, _ = prepared(client, session, small_files, path)
    response = client.get(url)
    assert response.status_code == 200, response.text
    assert GOOD in response.content or response.json() == SUMMARY.model_dump(mode="json")


@pytest.mark.parametrize(("method", "path", "name", "plant"), cases())
def test_what_a_job_plants_is_refused_never_followed(
    client: TestClient,
    session: Session,
    small_files: Settings,
    tmp_path: Path,
    method: str,
    path: str,
    name: str,
    plant: str,
) -> None:
    url, run_dir = prepared(client, session, small_files, path)
    planter, status = PLANTS[plant]
    planter(run_dir, name, tmp_path)

    response = client.request(method, url)
    left_out = SERVES_JOB_FILES[(method, path)].listing and plant in ("link", "fifo")
    assert response.status_code == (404 if left_out else status), response.text
    assert response.headers["content-type"] == "application/problem+json"
    assert SECRET not in response.content
    detail = response.json()["detail"]
    if not left_out:  # names what was refused, and the fix
        assert name.split("/")[0] in detail, detail
        assert "never follows a link" in detail or "write a smaller one" in detail, detail


def test_a_summary_that_is_not_json_is_a_422_problem(
    client: TestClient, session: Session, small_files: Settings
) -> None:
    url, run_dir = prepared(client, session, small_files, "/v1/jobs/{job_id}/profile")
    (run_dir / "profile/summary.json").write_bytes(b"\x7fELF\x02\x01 not JSON")
    response = client.get(url)
    assert response.status_code == 422 and response.headers["content-type"] == "application/problem+json"
    assert "profile/summary.json is not a profile summary" in response.json()["detail"]
    (run_dir / "profile/summary.json").write_text('{"first_step": "six"}')
    assert client.get(url).status_code == 422


def test_a_trace_is_sent_from_the_file_opened_with_the_size_checked(
    client: TestClient, session: Session, small_files: Settings
) -> None:
    url, _ = prepared(client, session, small_files, "/v1/jobs/{job_id}/profile/trace")
    response = client.get(url)
    assert response.headers["content-length"] == str(len(GOOD)) and response.content == GOOD
