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
JobId = Annotated[int, Path(ge=1, le=2**63 - 1, description="job id")]
