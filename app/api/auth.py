"""Bearer API keys. With auth off (`make run` on loopback) every request acts as the local admin."""

from __future__ import annotations

import time
from typing import Annotated

from fastapi import HTTPException, Security, status
from fastapi.concurrency import run_in_threadpool
from fastapi.security import HTTPAuthorizationCredentials, HTTPBearer

from app.services.keys import LOCAL_CALLER, Caller, caller_for_token
from core.config import AuthMode, get_settings
from core.db import new_session
from core.keys import hash_token

# auto_error=False: a missing header is answered below with 401 and a message, not HTTPBearer's bare 403.
bearer = HTTPBearer(auto_error=False, description="an API key from `trainyard keys create --user NAME`")
BearerDep = Annotated[HTTPAuthorizationCredentials | None, Security(bearer)]

_CHALLENGE = {"WWW-Authenticate": "Bearer"}
# A client polling its jobs sends the same key many times a second; one lookup per key per this many seconds
# serves them all. A key whose row is deleted therefore keeps working for at most this long.
KEY_TTL_S = 10.0
# Only keys found valid are kept, so this holds at most one entry per stored key, keyed by its hash.
_known_keys: dict[str, tuple[float, Caller]] = {}


def unauthorized(detail: str) -> HTTPException:
    return HTTPException(status.HTTP_401_UNAUTHORIZED, detail, headers=_CHALLENGE)


def _stored_caller(token: str) -> Caller | None:
    with new_session() as session:
        return caller_for_token(session, token)


async def _caller_for(token: str) -> Caller | None:
    key_hash, now = hash_token(token), time.monotonic()
    known = _known_keys.get(key_hash)
    if known is not None and known[0] > now:
        return known[1]
    caller = await run_in_threadpool(_stored_caller, token)
    if caller is not None:
        _known_keys[key_hash] = (now + KEY_TTL_S, caller)
    return caller


async def get_caller(credentials: BearerDep) -> Caller:
    """Who is asking. `async`, so the usual answer (auth off, or a key seen in the last KEY_TTL_S) costs no
    trip to a pool thread; only a key not seen lately is read from the database, in one."""
    if get_settings().auth is AuthMode.OFF:
        return LOCAL_CALLER
    if credentials is None:
        raise unauthorized(
            "this route needs an API key: send 'Authorization: Bearer <key>'; "
            "an admin creates one with `trainyard keys create --user NAME`"
        )
    caller = await _caller_for(credentials.credentials)
    if caller is None:
        raise unauthorized("the API key is not valid; ask an admin for a new one")
    return caller
