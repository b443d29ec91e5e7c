"""`python -m app.serve`, as `make run`, the Dockerfile and docker-compose.yml start the API: uvicorn with the
connection limits of the settings (the keep-alive timeout is checked in the config alone: uvicorn closes
idle connections with or without it), and a banner that says the auth mode in force."""

from __future__ import annotations

import contextlib
import os
import socket
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import httpx
import psutil
import pytest
import sqlalchemy

from app.http_head import HeadBoundHttpTools
from app.serve import banner, root_warning, uvicorn_config
from core.config import AuthMode, HttpParser, Settings
from core.models import Base
from tests.integration.servers import free_port, stop, wait_for
from tests.unit.conftest import job_body

HEAD = b"GET / HTTP/1.1\r\nHost: 127.0.0.1\r\n"


def test_the_banner_says_the_auth_mode_in_force() -> None:
    assert "(auth on: requests need an API key" in banner(Settings(auth=AuthMode.ON, port=9000))
    assert "http://127.0.0.1:9000" in banner(Settings(auth=AuthMode.ON, port=9000))
    assert "(auth off:" in banner(Settings(auth=AuthMode.OFF))


def test_uvicorn_takes_its_limits_from_the_settings() -> None:
    settings = Settings(host="0.0.0.0", port=9001, keep_alive_s=7, max_connections=9, max_header_bytes=8192)
    config = uvicorn_config(settings.model_copy(update={"log_level": "warning"}))
    assert (config.app, config.host, config.port) == ("app.main:app", "0.0.0.0", 9001)
    assert (config.timeout_keep_alive, config.limit_concurrency, config.log_level) == (7, 9, "warning")
    assert (config.http, config.h11_max_incomplete_event_size) == (HeadBoundHttpTools, 8192)
    assert uvicorn_config(Settings(http_parser=HttpParser.H11)).http == "h11"


def _status(connection: socket.socket) -> bytes:
    """The status line of the answer, or b"" when the server closed the connection without one."""
    answer = b""
    while b"\r\n" not in answer and (chunk := connection.recv(4096)):
        answer += chunk
    return answer.partition(b"\r\n")[0]


def serve(workdir: Path, port: int, **settings: str) -> subprocess.Popen[bytes]:
    """`python -m app.serve` in `workdir`, where it writes var/ (its database and broker too)."""
    env = {
        **os.environ,
        "TRAINYARD_PORT": str(port),
        "TRAINYARD_DATABASE_URL": f"sqlite:///{workdir}/trainyard.db",
        "TRAINYARD_BROKER_URL": f"sqla+sqlite:///{workdir}/broker.db",
        "TRAINYARD_LOG_LEVEL": "critical",
        **{f"TRAINYARD_{name.upper()}": value for name, value in settings.items()},
    }
    return subprocess.Popen([sys.executable, "-m", "app.serve"], cwd=workdir, env=env, stdout=subprocess.PIPE)


@pytest.fixture(params=list(HttpParser))
def server(tmp_path: Path, request: pytest.FixtureRequest) -> Iterator[tuple[int, str]]:
    """A real server with tiny limits, on each parser, and the first line it printed."""
    port = free_port()
    proc = serve(
        tmp_path, port, max_connections="2", max_header_bytes="4096", auth="on", http_parser=request.param
    )
    try:
        assert proc.stdout is not None
        printed = proc.stdout.readline().decode()
        wait_for(lambda: socket.create_connection(("127.0.0.1", port)).close() is None, 60, "api")
        yield port, printed
    finally:
        stop(proc)


def _connect(port: int) -> socket.socket:
    return socket.create_connection(("127.0.0.1", port), timeout=30)


def test_the_server_holds_its_limits(server: tuple[int, str]) -> None:
    port, printed = server
    assert "(auth on:" in printed

    # A head past TRAINYARD_MAX_HEADER_BYTES is refused before it ends, sent at once or a piece at a time:
    # it can no longer grow without bound (h11 answers 400, app/http_head.py 431).
    refused = (b"HTTP/1.1 400 Bad Request", b"HTTP/1.1 431 Request Header Fields Too Large")
    with _connect(port) as big:
        big.sendall(HEAD + b"X-Filler: " + b"a" * 8192)
        assert _status(big) in refused
    with _connect(port) as trickled:
        trickled.sendall(HEAD)
        with contextlib.suppress(OSError):  # the server may close it before the last pieces
            for number in range(80):
                trickled.sendall(b"X-Piece-%d: %s\r\n" % (number, b"a" * 80))
        assert _status(trickled) in refused

    # What is counted is the head: two requests on one connection whose bodies pass the bound are answered
    # (401: auth is on), each in turn.
    body = b"{" + b" " * 8192 + b"}"
    post = (
        b"POST /v1/jobs HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
        b"Content-Length: %d\r\n\r\n%s" % (len(body), body)
    )
    with _connect(port) as kept:
        kept.sendall(post + post)
        answers = b""
        while answers.count(b"HTTP/1.1 ") < 2 and (chunk := kept.recv(65536)):
            answers += chunk
        assert answers.count(b"HTTP/1.1 401 Unauthorized") == 2, answers[:300]

    # Connections that never finish their heads take the slots of TRAINYARD_MAX_CONNECTIONS; a request past
    # them is answered 503 at once instead of waiting with them.
    with _connect(port) as slow, _connect(port) as late:
        slow.sendall(HEAD)
        late.sendall(HEAD + b"\r\n")
        assert _status(late) == b"HTTP/1.1 503 Service Unavailable"


def _schema(workdir: Path) -> None:
    engine = sqlalchemy.create_engine(f"sqlite:///{workdir}/trainyard.db")
    Base.metadata.create_all(engine)
    engine.dispose()


@pytest.mark.parametrize("workers", [1, 2])
def test_the_banner_comes_once_the_api_answers_and_var_api_url_names_it_while_it_runs(
    tmp_path: Path, workers: int
) -> None:
    _schema(tmp_path)
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    proc = serve(tmp_path, port, auth="off", api_workers=str(workers))
    try:
        assert proc.stdout is not None
        assert url in proc.stdout.readline().decode()
        # At once, with no retry: the banner promises a server that answers.
        answer = httpx.post(f"{url}/v1/jobs", json=job_body(), timeout=30)
        assert answer.status_code == 201, answer.text
        assert answer.json()["job"]["id"] == 1
        assert (tmp_path / "var" / "api-url").read_text() == url + "\n"
        children = [" ".join(child.cmdline()) for child in psutil.Process(proc.pid).children()]
        assert sum("spawn_main" in line for line in children) == (workers if workers > 1 else 0)
    finally:
        stop(proc)
    assert not (tmp_path / "var" / "api-url").exists(), "a stopped server leaves no URL behind"
    assert proc.stdout.read().decode().count("Trainyard API:") == 0, "the banner comes once"


def _thread_cpus(pid: int) -> set[frozenset[int]]:
    """The CPUs each thread of a process may run on (a set of one where they agree)."""
    cpus = set()
    for thread in os.listdir(f"/proc/{pid}/task"):
        with contextlib.suppress(ProcessLookupError):  # a thread that ended meanwhile
            cpus.add(frozenset(os.sched_getaffinity(int(thread))))
    return cpus


def _children(proc: subprocess.Popen[bytes], marker: str) -> list[psutil.Process]:
    everyone = psutil.Process(proc.pid).children(recursive=True)
    return [child for child in everyone if marker in " ".join(child.cmdline())]


@pytest.mark.skipif(len(os.sched_getaffinity(0)) < 2, reason="needs two CPUs to keep two processes apart")
def test_each_api_process_keeps_its_threads_on_a_cpu_of_its_own_and_its_forecaster_takes_them_all(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """app/cpu_pin.py: `python -m app.serve` turns TRAINYARD_API_ONE_CPU on; each of its processes claims a
    CPU of its own (the claims in TMPDIR, here this test's) and moves its threads there, and the forecaster
    each one starts takes back the CPUs the process had."""
    monkeypatch.setenv("TMPDIR", str(tmp_path))
    allowed = frozenset(os.sched_getaffinity(0))
    _schema(tmp_path)
    proc = serve(tmp_path, free_port(), auth="off", api_workers="2", forecast="on")
    try:
        assert proc.stdout is not None
        proc.stdout.readline()  # the banner: both processes serve

        def apart() -> bool:
            workers = [_thread_cpus(child.pid) for child in _children(proc, "spawn_main")]
            return len(workers) == 2 and all(
                len(cpus) == 1 and len(next(iter(cpus))) == 1 for cpus in workers
            )

        wait_for(apart, 60, "each API process on one CPU")
        (first,), (second,) = (_thread_cpus(child.pid) for child in _children(proc, "spawn_main"))
        assert first != second and first | second <= allowed

        def forecasters_unpinned() -> bool:
            forecasters = _children(proc, "trainers.forecast")
            return len(forecasters) == 2 and all(_thread_cpus(f.pid) == {allowed} for f in forecasters)

        wait_for(forecasters_unpinned, 60, "the forecasters on every CPU the API had")
    finally:
        stop(proc)


def test_an_api_run_as_root_says_so_and_where_to_read_why(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(os, "geteuid", lambda: 0)
    assert "docs/security.md" in (root_warning() or "")
    monkeypatch.setattr(os, "geteuid", lambda: 1000)
    assert root_warning() is None
