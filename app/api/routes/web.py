"""The dashboard: `/` serves one page, `/static/...` its script, styles and the vendored chart library.

The page holds no data of its own: it calls the /v1 API from the browser with the user's key, so serving
these files needs no key and reveals nothing.
"""

from __future__ import annotations

from pathlib import Path

from fastapi import APIRouter
from fastapi.responses import FileResponse
from fastapi.staticfiles import StaticFiles

WEB_DIR = Path(__file__).resolve().parents[2] / "web"

router = APIRouter(tags=["dashboard"])
router.mount("/static", StaticFiles(directory=WEB_DIR), name="static")


# The page loads its scripts and styles from /static only and calls the API on its own origin, so nothing
# else may run or load: an injected <script> or inline handler is refused. Scripts set element.style,
# which the CSSOM allows under style-src 'self'. No other site may frame it (clickjacking).
SECURITY_HEADERS = {
    "Content-Security-Policy": (
        "default-src 'self'; object-src 'none'; base-uri 'none'; form-action 'self'; frame-ancestors 'none'"
    ),
    "X-Frame-Options": "DENY",
}


@router.get("/", include_in_schema=False)
def dashboard() -> FileResponse:
    # no-cache: a browser revalidates the page after an upgrade instead of running a stale script against
    # a newer API.
    return FileResponse(WEB_DIR / "index.html", headers={"Cache-Control": "no-cache", **SECURITY_HEADERS})
