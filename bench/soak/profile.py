"""How hard a soak pushes: `make soak`'s full load, or the light one `make test` runs beside the other parts
of the suite on two cores, which still does every kind of thing the full one does and kills every target."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Profile:
    load_users: tuple[str, ...]
    in_flight: int  # a user's unfinished jobs (a sweep's trials aside) before they submit another
    pollers: int  # dashboard pages left open
    sweep_chance: float  # per look of a user, when none of theirs runs (the first user sweeps at once)
    # The share of the window in which jobs are submitted: what is submitted late is what the drain waits for.
    submitting: float
    # TRAINYARD_RANK_NICE; None: the service's default. The light soak runs beside the other parts of
    # `make test`, which take the cores at full priority as the service never does: there its jobs' ranks
    # run at the tests' own priority, as every test's do (tests/parts.py).
    rank_nice: int | None = None


FULL = Profile(
    load_users=("alice", "bob", "carol"), in_flight=2, pollers=64, sweep_chance=0.1, submitting=1.0
)
# Two users with one job each in flight, one sweep, eight pages, no submission in the last quarter (the last
# kills still find jobs running): between them the users still submit every kind first (bench/soak/load.py),
# and a rank, a webhook sender and the pollers are busy when a kill comes.
LIGHT = Profile(
    load_users=("alice", "bob"), in_flight=1, pollers=8, sweep_chance=0.0, submitting=0.75, rank_nice=0
)
