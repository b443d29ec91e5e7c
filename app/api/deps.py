"""Dependencies shared by the routes, typed so route signatures read like declarations."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Annotated

from fastapi import Depends, Path
from sqlalchemy.orm import Session

from app.core.config import Settings, get_settings
from app.core.db import new_session


def get_db() -> Iterator[Session]:
    with new_session() as session:
        yield session


SessionDep = Annotated[Session, Depends(get_db)]
SettingsDep = Annotated[Settings, Depends(get_settings)]
# Ids and steps are 32-bit INTEGER columns on PostgreSQL; larger values could only miss anyway.
DB_INT_MAX = 2**31 - 1
JobId = Annotated[int, Path(ge=1, le=DB_INT_MAX, description="job id")]
