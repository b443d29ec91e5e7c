"""/v1/keys: admins make API keys for users; everyone lists and revokes their own (an admin, anyone's). The
first admin key is made on the server with `python -m core.keys create --user NAME --admin`; a token is
shown once, when it is made."""

from __future__ import annotations

from fastapi import APIRouter, Depends, status

from app.api.auth import KEY_TTL_S
from app.api.deps import CallerDep, KeyId, SessionDep, admin_only
from app.api.openapi import BODY_PROBLEMS, problems
from app.schemas import KeyCreate, KeyCreated, KeyPublic, KeysPublic
from app.services import keys as key_service
from core import keys

# A key can make an admin key, so only an admin may make any: anyone else could raise their own rights.
require_admin = admin_only(
    "make API keys", "ask an admin, or on the server run `python -m core.keys create --user NAME --admin`"
)


router = APIRouter(prefix="/keys", tags=["keys"])


@router.post(
    "",
    status_code=status.HTTP_201_CREATED,
    dependencies=[Depends(require_admin)],
    responses={**BODY_PROBLEMS, **problems(403)},
)
def create_key(body: KeyCreate, session: SessionDep) -> KeyCreated:
    token = keys.create_key(session, body.user, body.admin)
    return KeyCreated(user=body.user, admin=body.admin, token=token)


@router.get("")
def list_keys(session: SessionDep, caller: CallerDep) -> KeysPublic:
    return KeysPublic(
        data=[
            KeyPublic(id=key.id, user=key.user, admin=key.is_admin, created_at=key.created_at)
            for key in key_service.keys_seen_by(session, caller)
        ]
    )


@router.delete(
    "/{key_id}",
    status_code=status.HTTP_204_NO_CONTENT,
    responses=problems(404),
    description=f"Revoke a key: an admin any, anyone else one of their own. Requests that send it are "
    f"refused within {KEY_TTL_S:g} s, the lifetime of each API process's cache of known keys.",
)
def revoke_key(key_id: KeyId, session: SessionDep, caller: CallerDep) -> None:
    key_service.revoke_key(session, key_id, caller)
