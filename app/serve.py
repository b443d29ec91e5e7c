"""`python -m app.serve`: the API under uvicorn, with the limits the settings name. `make run`, the
Dockerfile and docker-compose.yml start it this way, so one place decides how the API meets the network.

uvicorn has no timeout for a request's head: a client that sends its headers slowly holds its connection
until it finishes or goes (Kludex/uvicorn#157). What uvicorn has is used: a cap on the connections and
requests served at once (TRAINYARD_MAX_CONNECTIONS), past which a new request gets 503 at once; a timeout
for idle keep-alive connections (TRAINYARD_KEEP_ALIVE_S); and a bound on an unfinished request head
(TRAINYARD_MAX_HEADER_BYTES), which h11 has and app/http_head.py adds to httptools, the default parser.
Where untrusted clients reach the API, a proxy in front with a header timeout (nginx's
client_header_timeout) closes slow heads as well.

The banner is printed, and the API's URL written to var/api-url (where the CLI looks for the service), only
once uvicorn accepts connections: a client that acts on either never meets a closed port. The file goes when
the server stops. With TRAINYARD_API_WORKERS above 1, uvicorn's own supervisor runs that many processes on one
socket; the supervisor says it once, when the API first answers /healthz.
"""

from __future__ import annotations

import contextlib
import os
import socket
import threading
from pathlib import Path
from typing import Any

import httpx
import uvicorn

from app.http_head import HeadBoundHttpTools
from core.config import VAR_DIR, AuthMode, HttpParser, Settings, get_settings

API_URL_FILE = VAR_DIR / "api-url"  # relative to the working directory, as the settings' other var/ paths
ONE_CPU_ENV = "TRAINYARD_API_ONE_CPU"
# How often the supervisor of several API processes asks whether one answers yet.
_READY_POLL_S = 0.1


def uvicorn_options(settings: Settings) -> dict[str, Any]:
    return {
        "app": "app.main:app",
        "host": settings.host,
        "port": settings.port,
        "http": HeadBoundHttpTools if settings.http_parser is HttpParser.HTTPTOOLS else "h11",
        "h11_max_incomplete_event_size": settings.max_header_bytes,
        "limit_concurrency": settings.max_connections,  # per process
        "timeout_keep_alive": settings.keep_alive_s,
        "log_level": settings.log_level,
    }


def uvicorn_config(settings: Settings) -> uvicorn.Config:
    return uvicorn.Config(**uvicorn_options(settings))


def api_url(settings: Settings) -> str:
    return f"http://{settings.host}:{settings.port}"


def banner(settings: Settings) -> str:
    where = f"Trainyard API: {api_url(settings)}"
    if settings.auth is AuthMode.ON:
        return f"{where}  (auth on: requests need an API key; `python -m core.keys create` makes the first)"
    return f"{where}  (auth off: every request acts as the local admin; keep it on loopback)"


def root_warning() -> str | None:
    """The API reads files that jobs wrote through one confined opener; run as root, a flaw in it would
    reach every file of the box, so root is a risk to be told about (docs/security.md)."""
    if os.geteuid() != 0:
        return None
    return (
        "warning: the API runs as root; run it as an unprivileged user (docker-compose.yml does), as "
        "docs/security.md explains"
    )


class AnnouncedServer(uvicorn.Server):
    """uvicorn's server, which says where the API is once its startup is complete (the app's lifespan ran and
    the socket listens), and takes its URL file back when it shuts down."""

    def __init__(self, settings: Settings) -> None:
        super().__init__(uvicorn_config(settings))
        self.settings = settings

    async def startup(self, sockets: list[socket.socket] | None = None) -> None:
        await super().startup(sockets)
        # An older uvicorn (0.29, which pyproject allows) returns from a failed startup instead of exiting.
        if self.started:
            announce(self.settings, API_URL_FILE)

    async def shutdown(self, sockets: list[socket.socket] | None = None) -> None:
        withdraw(self.settings, API_URL_FILE)
        await super().shutdown(sockets)


def announce(settings: Settings, url_file: Path) -> None:
    """The URL file first, then the banner: whoever reads the banner finds the file written."""
    lines = [banner(settings)]
    try:
        url_file.parent.mkdir(parents=True, exist_ok=True)
        written = url_file.with_name(url_file.name + ".new")
        written.write_text(api_url(settings) + "\n")
        written.replace(url_file)  # a reader never sees half a line
    except OSError as exc:
        # The image's working directory is not the API user's to write (Dockerfile): no file, no failure.
        lines.append(f"note: {url_file} not written ({exc.strerror}); clients find the API by TRAINYARD_URL")
    if warning := root_warning():
        lines.append(warning)
    print("\n".join(lines), flush=True)


def withdraw(settings: Settings, url_file: Path) -> None:
    """Removes the URL file if it still names this server: one started later in this directory has written
    its own."""
    with contextlib.suppress(FileNotFoundError):
        if url_file.read_text().strip() == api_url(settings):
            url_file.unlink()


def _answers(url: str) -> bool:
    try:
        return httpx.get(url, timeout=5).status_code == 200
    except httpx.HTTPError:
        return False


def announce_once_answering(settings: Settings, url_file: Path, stop: threading.Event) -> None:
    """Announces when the API first answers /healthz (the socket alone accepts before any process serves),
    unless `stop` is set first. On loopback, whatever address the API listens on."""
    host = "127.0.0.1" if settings.host in ("0.0.0.0", "::") else settings.host
    health = api_url(settings.model_copy(update={"host": host})) + "/healthz"
    while not stop.is_set():
        if _answers(health):
            announce(settings, url_file)
            return
        stop.wait(_READY_POLL_S)


def serve_workers(settings: Settings) -> None:
    """uvicorn's supervisor with settings.api_workers processes; the banner and URL file once, from here."""
    stop = threading.Event()
    waiter = threading.Thread(target=announce_once_answering, args=(settings, API_URL_FILE, stop))
    waiter.start()
    try:
        uvicorn.run(**uvicorn_options(settings), workers=settings.api_workers)
    finally:
        stop.set()
        waiter.join()
        withdraw(settings, API_URL_FILE)


def main() -> None:
    # The processes that serve keep to a CPU each (app/cpu_pin.py); the app alone, in a test, does not.
    os.environ.setdefault(ONE_CPU_ENV, "true")
    settings = get_settings()
    if settings.api_workers > 1:
        serve_workers(settings)
    else:
        AnnouncedServer(settings).run()


if __name__ == "__main__":
    main()
