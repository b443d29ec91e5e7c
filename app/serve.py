"""`python -m app.serve`: the API under uvicorn, with the limits the settings name. `make run`, the
Dockerfile and docker-compose.yml start it this way, so one place decides how the API meets the network.

uvicorn has no timeout for a request's head: a client that sends its headers slowly holds its connection
until it finishes or goes (Kludex/uvicorn#157). What uvicorn has is used: a cap on the connections and
requests served at once (TRAINYARD_MAX_CONNECTIONS), past which a new request gets 503 at once; a timeout
for idle keep-alive connections (TRAINYARD_KEEP_ALIVE_S); and the h11 parser, whose buffer for an unfinished
head is bounded (TRAINYARD_MAX_HEADER_BYTES; TRAINYARD_HTTP_PARSER=httptools parses faster and takes a head
of any size). Where untrusted clients reach the API, a proxy in front with a header timeout (nginx's
client_header_timeout) closes slow heads as well.
"""

from __future__ import annotations

import os

import uvicorn

from core.config import AuthMode, Settings, get_settings


def uvicorn_config(settings: Settings) -> uvicorn.Config:
    return uvicorn.Config(
        "app.main:app",
        host=settings.host,
        port=settings.port,
        http=settings.http_parser.value,
        h11_max_incomplete_event_size=settings.max_header_bytes,  # httptools has no such bound
        limit_concurrency=settings.max_connections,
        timeout_keep_alive=settings.keep_alive_s,
        log_level=settings.log_level,
    )


def banner(settings: Settings) -> str:
    where = f"Trainyard API: http://{settings.host}:{settings.port}"
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


def main() -> None:
    settings = get_settings()
    print(banner(settings), flush=True)
    if warning := root_warning():
        print(warning, flush=True)
    uvicorn.Server(uvicorn_config(settings)).run()


if __name__ == "__main__":
    main()
