"""What a pytest process holds once it has collected (the modules of every test file it imports: torch,
transformers, the app, the suite's own) is never garbage, yet every full pass of the garbage collector scanned
it all: about a second a pass once torch and transformers are in, and the unit tests of the API, the core and
the trainers made 89 full passes, 74 s of CPU, on two cores shared by the four parts of `make test`. Frozen
once collection ends, as an API process freezes what it holds once started (app/api/heap.py), it is left out
of every pass; what tests allocate is collected as before.

An API started in this process (a TestClient's lifespan, schemathesis' per test) freezes on start and thaws
everything when it stops, this process's heap with it: the next test freezes it again, without the full pass
the API's own start makes. Its garbage until then stays frozen: a test's worth at most, each such test.
"""

from __future__ import annotations

import gc

import pytest


def pytest_collection_finish(session: pytest.Session) -> None:
    gc.collect()  # garbage frozen now would never be collected
    gc.freeze()


def pytest_runtest_logfinish(nodeid: str, location: tuple[str, int | None, str]) -> None:
    if gc.get_freeze_count() == 0:
        gc.freeze()
