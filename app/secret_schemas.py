"""Bodies of /v1/secrets: what a user sends (a name and a value) and what comes back, which never holds the
value: once sent, it is sealed (core/secrets.py) and shown to no one."""

from __future__ import annotations

from typing import Annotated

from pydantic import AfterValidator, BaseModel, ConfigDict, Field

from app.schemas import UtcDatetime
from jobspec.spec_env import MAX_SECRET_BYTES, SECRET_NAME_PATTERN


def _storable(value: str) -> str:
    # An environment string ends at its first NUL, and Linux caps one at 128 KiB.
    if "\0" in value:
        raise ValueError("holds a NUL character, which no environment variable can carry; remove it")
    if len(value.encode()) > MAX_SECRET_BYTES:
        raise ValueError(f"is longer than {MAX_SECRET_BYTES} bytes; a secret is a token or a key, not a file")
    return value


class SecretCreate(BaseModel):
    """POST /v1/secrets: store `value` sealed under `name` (replacing the caller's own of that name)."""

    model_config = ConfigDict(extra="forbid")

    name: str = Field(
        pattern=SECRET_NAME_PATTERN,
        description='lower-case letters, digits, -, _ and .; what a job\'s env names: {"secret": NAME}',
    )
    value: Annotated[str, AfterValidator(_storable)] = Field(
        min_length=1, description="never shown again, by any route; at most 64 KiB"
    )
    shared: bool = Field(False, strict=True, description="admins only: every user's jobs may name it")


class SecretPublic(BaseModel):
    """A secret as listed: who holds it and when it was made and last used, never its value."""

    model_config = ConfigDict(from_attributes=True)

    name: str
    owner: str
    shared: bool
    created_at: UtcDatetime
    last_used_at: UtcDatetime | None = Field(description="when a job last started with it")


class SecretsPublic(BaseModel):
    data: list[SecretPublic] = Field(
        description="the caller's secrets and the shared ones (an admin's: every user's), by owner and name"
    )
