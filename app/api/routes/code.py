"""/v1/code: push a code bundle (a tar or tar.gz archive as the raw request body), list, show, delete."""

from __future__ import annotations

from anyio import to_thread
from fastapi import APIRouter, HTTPException, Request, Response, status

from app.api.deps import CallerDep, OwnedCode, SessionDep, SettingsDep
from app.api.openapi import problem, problems
from app.schemas import CodeBundleDetail, CodeBundlesPublic
from app.services import code
from app.services.keys import Caller
from core import code_store
from core.config import Settings
from core.db import new_session

# Which of the two the body is, gzip or plain tar, is read from its first bytes, whichever type is named.
ARCHIVE_TYPES = ("application/gzip", "application/x-gzip", "application/x-tar", "application/octet-stream")
_ARCHIVE_BODY = {
    "required": True,
    "content": {kind: {"schema": {"type": "string", "format": "binary"}} for kind in ARCHIVE_TYPES},
}

router = APIRouter(prefix="/code", tags=["code"])


def _quota(settings: Settings, caller: Caller) -> code.CodeQuota:
    with new_session() as session:
        return code.code_quota(session, settings, caller.user)


def _push(settings: Settings, caller: Caller, upload: code_store.Incoming) -> tuple[CodeBundleDetail, bool]:
    # A session of its own rather than run_in_session: unpacking takes seconds, which would hold one of the
    # few slots that job submissions share on SQLite.
    with new_session() as session:
        bundle, created = code.push(session, settings, caller, upload)
        return code.detail(session, bundle), created


@router.post(
    "",
    status_code=status.HTTP_201_CREATED,
    openapi_extra={"requestBody": _ARCHIVE_BODY},
    responses={
        200: {"description": "the caller had pushed these bytes before: the same bundle"},
        408: problem("the body took longer than TRAINYARD_CODE_UPLOAD_TIMEOUT_S"),
        413: problem("the archive is over TRAINYARD_CODE_MAX_BYTES"),
        415: problem("the Content-Type is not an archive's"),
        422: problem("the archive is unreadable or unsafe: the detail names the member"),
        429: problem("the bundle would pass TRAINYARD_CODE_QUOTA_BYTES"),
    },
)
async def push_code(
    request: Request, settings: SettingsDep, caller: CallerDep, response: Response
) -> CodeBundleDetail:
    """Store a tar or tar.gz of your modules; its id is `sha256:` and the sha256 of the bytes sent."""
    content_type = request.headers.get("content-type", "")
    if content_type.partition(";")[0].strip().lower() not in ARCHIVE_TYPES:
        raise HTTPException(
            status.HTTP_415_UNSUPPORTED_MEDIA_TYPE,
            f"Content-Type {content_type!r} is not an archive's; send the tar.gz as the body with "
            "Content-Type: application/gzip (a tar: application/x-tar), as `trainyard code push DIR` does",
        )
    with code_store.incoming(settings, caller.user) as upload:
        quota = await to_thread.run_sync(_quota, settings, caller)
        try:
            await code.receive(upload, request.stream(), request.headers.get("content-length"), quota)
        except code.UploadTimedOut as exc:
            raise HTTPException(status.HTTP_408_REQUEST_TIMEOUT, str(exc)) from exc
        bundle, created = await to_thread.run_sync(_push, settings, caller, upload)
    if not created:
        response.status_code = status.HTTP_200_OK
    return bundle


@router.get("")
def list_code(session: SessionDep, caller: CallerDep) -> CodeBundlesPublic:
    bundles = code.list_bundles(session, caller)
    return CodeBundlesPublic(data=bundles, count=len(bundles))


@router.get("/{code_id}", responses=problems(404))
def get_code(bundle: OwnedCode, session: SessionDep) -> CodeBundleDetail:
    return code.detail(session, bundle)


@router.delete(
    "/{code_id}",
    status_code=status.HTTP_204_NO_CONTENT,
    responses={**problems(404), 409: problem("an unfinished job of the owner's names it")},
)
def delete_code(bundle: OwnedCode, session: SessionDep, settings: SettingsDep) -> None:
    code.delete_bundle(session, settings, bundle)
