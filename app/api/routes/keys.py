"""/v1/keys: admins make API keys for users and see who holds one. The first admin key is made on the server
with `python -m core.keys create --user NAME --admin`; a token is shown once, when it is made."""

from __future__ import annotations

from fastapi import APIRouter, Depends, HTTPException, status

from app.api.deps import CallerDep, SessionDep
from app.api.openapi import BODY_PROBLEMS, problems
from app.schemas import KeyCreate, KeyCreated, KeyPublic, KeysPublic
from core import keys


async def require_admin(caller: CallerDep) -> None:
    # A key can make an admin key, so only an admin may make any: anyone else could raise their own rights.
    if not caller.is_admin:
        raise HTTPException(
            status.HTTP_403_FORBIDDEN,
            f"only an admin may manage API keys, and {caller.user!r} is not one; ask an admin, or on the "
            "server run `python -m core.keys create --user NAME --admin`",
        )


router = APIRouter(
    prefix="/keys", tags=["keys"], dependencies=[Depends(require_admin)], responses=problems(403)
)


@router.post("", status_code=status.HTTP_201_CREATED, responses=BODY_PROBLEMS)
def create_key(body: KeyCreate, session: SessionDep) -> KeyCreated:
    token = keys.create_key(session, body.user, body.admin)
    return KeyCreated(user=body.user, admin=body.admin, token=token)


@router.get("")
def list_keys(session: SessionDep) -> KeysPublic:
    return KeysPublic(
        data=[
            KeyPublic(id=key.id, user=key.user, admin=key.is_admin, created_at=key.created_at)
            for key in keys.list_keys(session)
        ]
    )
