"""Fair share's use: halved every half-life, and keyed so that one ORDER BY ranks users charged at different
times as their use stands now."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from core.config import Settings
from core.models import UserUsage
from core.usage import NO_USE, Use, share_key, use_now

T0 = datetime(2026, 11, 1, tzinfo=UTC)


def test_use_halves_every_half_life(settings: Settings) -> None:
    half_life = timedelta(seconds=settings.fair_share_half_life_s)
    assert half_life == timedelta(hours=24)  # the default
    row = UserUsage(owner="ada", gpu_seconds=3600.0, cpu_core_seconds=7200.0, as_of=T0, share_key=0.0)
    assert use_now(row, T0 + half_life, settings) == Use(1800.0, 3600.0)
    assert use_now(row, T0 + 2 * half_life, settings) == Use(900.0, 1800.0)
    assert use_now(row, T0 - half_life, settings) == Use(3600.0, 7200.0)  # a clock behind: no growth


def test_share_key_orders_users_as_their_use_stands_now(settings: Settings) -> None:
    # Bob ran 48 GPU-h five half-lives ago (1.5 GPU-h left), Ada 14.2 GPU-h just now.
    bob = share_key(Use(48 * 3600.0, 0.0), T0, settings)
    ada = share_key(Use(14.2 * 3600.0, 0.0), T0 + timedelta(days=5), settings)
    assert bob < ada
    # The key does not move as time passes: it is the same for the decayed use at any later moment.
    later = T0 + timedelta(days=5)
    decayed = Use(48 * 3600.0 / 32, 0.0)
    assert share_key(decayed, later, settings) == pytest.approx(bob, abs=1e-9)
    # CPU core-seconds count at their weight; no use sorts first.
    cpu = share_key(Use(0.0, 10.0 / settings.fair_share_cpu_weight), T0, settings)
    assert cpu == pytest.approx(share_key(Use(10.0, 0.0), T0, settings))
    assert share_key(Use(0.0, 0.0), T0, settings) == NO_USE
