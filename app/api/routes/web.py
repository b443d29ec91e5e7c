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


@router.get("/", include_in_schema=False)
def dashboard() -> FileResponse:
    # no-cache: a browser revalidates the page after an upgrade instead of running a stale script against
    # a newer API.
    return FileResponse(WEB_DIR / "index.html", headers={"Cache-Control": "no-cache"})
