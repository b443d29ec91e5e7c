"""Which API the CLI talks to, and why: `--url`, then TRAINYARD_URL, then the URL that `make run` wrote to
var/api-url in this folder or one above it (so that the CLI finds the running service from anywhere in the
checkout), then the default."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from app.client import DEFAULT_URL

URL_FILE = Path("var", "api-url")
ENV_VAR = "TRAINYARD_URL"
DEFAULT_SOURCE = "the default"


@dataclass(frozen=True)
class ApiUrl:
    url: str
    source: str  # where it came from, as an error message names it

    @property
    def configured(self) -> bool:
        """False for the fallback nobody chose: outside a checkout, that port may be another service's."""
        return self.source != DEFAULT_SOURCE

    @property
    def origin(self) -> str:
        """Where the URL came from, as errors put it after the URL: "from TRAINYARD_URL"."""
        return f"from {self.source}" if self.configured else f"{DEFAULT_SOURCE}; set {ENV_VAR}"


def _written_url(folder: Path) -> ApiUrl | None:
    """The first var/api-url holding a URL, from `folder` up to the filesystem's root."""
    for place in (folder, *folder.parents):
        path = place / URL_FILE
        try:
            url = path.read_text().strip()
        except OSError:  # none there (or not a file): look further up
            continue
        if url:  # an empty file is one being written: it names nothing yet
            return ApiUrl(url, str(path))
    return None


def find_api_url(flag: str | None, environ: Mapping[str, str], folder: Path) -> ApiUrl:
    if flag:
        return ApiUrl(flag, "--url")
    if environ.get(ENV_VAR):
        return ApiUrl(environ[ENV_VAR], ENV_VAR)
    return _written_url(folder) or ApiUrl(DEFAULT_URL, DEFAULT_SOURCE)
