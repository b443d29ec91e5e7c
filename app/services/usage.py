"""Users' recent use of the cluster, as fair share counts it (core/usage.py): for GET /v1/usage and the
queue's explanation of its order."""

from __future__ import annotations

from collections.abc import Callable, Collection
from dataclasses import dataclass

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


@dataclass(frozen=True)
class Unit:
    name: str
    seconds: Callable[[Use], float]


GPU_H = Unit("GPU-h", lambda use: use.gpu_seconds)
CPU_CORE_H = Unit("CPU core-h", lambda use: use.cpu_core_seconds)


def deciding_units(uses: Collection[Use], settings: Settings) -> list[Unit]:
    """The units whose use sets these users apart: GPU-h where any has used GPUs, CPU core-h where any has
    used cores and fair share counts them (TRAINYARD_FAIR_SHARE_CPU_WEIGHT above 0); none when no one used
    anything."""
    counted = [GPU_H, CPU_CORE_H] if settings.fair_share_cpu_weight > 0 else [GPU_H]
    return [unit for unit in counted if any(unit.seconds(use) > 0 for use in uses)]


def amount(seconds: float) -> str:
    """Hours to one decimal, and to two significant digits below 0.1, so that a few minutes' use does not
    read as none."""
    value = seconds / HOUR_S
    return f"{value:.1f}" if value == 0 or value >= 0.1 else f"{value:.2g}"


def explain_share(order: list[str], uses: dict[str, Use], settings: Settings) -> str:
    """'among jobs of equal priority the users who used less lately start first: bob has used 0.3 GPU-h,
    ada 14.2 GPU-h (use halves every 24 h)', naming `order`'s users in the order their jobs start, in the
    units that decided it (GPU-h, CPU core-h, or both with a core-hour's weight) among all of `uses`, the
    use of every user whose jobs it orders, of whom `order` may name only the caller."""
    units = deciding_units(uses.values(), settings)
    half_life = f"use halves every {settings.fair_share_half_life_s / HOUR_S:g} h"
    if not units:
        return (
            "among jobs of equal priority the users who used less lately start first; none of these has "
            f"used any lately, so the oldest job starts first ({half_life})"
        )
    none = Use(0.0, 0.0)
    named = [
        f"{user} {'has used ' if i == 0 else ''}"
        + " and ".join(f"{amount(unit.seconds(uses.get(user, none)))} {unit.name}" for unit in units)
        for i, user in enumerate(order)
    ]
    weight = f"; a CPU core-h counts {settings.fair_share_cpu_weight:g} GPU-h" if len(units) > 1 else ""
    return (
        "among jobs of equal priority the users who used less lately start first: "
        f"{', '.join(named)} ({half_life}{weight})"
    )
