"""Users' recent use of the cluster, as fair share counts it (core/usage.py): for GET /v1/usage and the
queue's explanation of its order."""

from __future__ import annotations

from collections.abc import Collection

from sqlalchemy import select
from sqlalchemy.orm import Session

from app.schemas import UsagePublic, UsagesPublic
from core.config import Settings
from core.models import UserUsage, utcnow
from core.usage import Use, use_now

HOUR_S = 3600.0


def read_use(session: Session, settings: Settings, users: Collection[str] | None = None) -> dict[str, Use]:
    """Each user's use now, least first; `users` None reads everyone's. A user never charged has none."""
    query = select(UserUsage)
    if users is not None:
        query = query.where(UserUsage.owner.in_(users))
    now = utcnow()
    uses = {row.owner: use_now(row, now, settings) for row in session.scalars(query)}
    return dict(sorted(uses.items(), key=lambda item: (item[1].weighted(settings), item[0])))


def list_usage(session: Session, settings: Settings, user: str | None) -> UsagesPublic:
    """`user`'s own use, or with None everyone's."""
    uses = read_use(session, settings, None if user is None else [user])
    return UsagesPublic(
        data=[
            UsagePublic(
                user=owner,
                gpu_hours=use.gpu_seconds / HOUR_S,
                cpu_core_hours=use.cpu_core_seconds / HOUR_S,
            )
            for owner, use in uses.items()
        ],
        half_life_h=settings.fair_share_half_life_s / HOUR_S,
    )


def hours(use: Use) -> str:
    """'14.2 GPU-h', '3.0 CPU core-h', or both: how much a user ran lately, as a person reads it."""
    gpu, cpu = f"{use.gpu_seconds / HOUR_S:.1f} GPU-h", f"{use.cpu_core_seconds / HOUR_S:.1f} CPU core-h"
    if cpu.startswith("0.0 "):
        return gpu
    return cpu if gpu.startswith("0.0 ") else f"{gpu} and {cpu}"


def explain_share(order: list[str], uses: dict[str, Use], settings: Settings) -> str:
    """'among jobs of equal priority the users who used less lately start first: bob has used 0.3 GPU-h,
    ada 14.2 GPU-h (use halves every 24 h)', naming `order`'s users in the order their jobs start."""
    none = Use(0.0, 0.0)
    named = [
        f"{user} {'has used ' if i == 0 else ''}{hours(uses.get(user, none))}" for i, user in enumerate(order)
    ]
    half_life = f"{settings.fair_share_half_life_s / HOUR_S:g} h"
    return (
        "among jobs of equal priority the users who used less lately start first: "
        f"{', '.join(named)} (use halves every {half_life})"
    )
