"""What a pytest process holds once it has collected (the modules of every test file it imports: torch,
transformers, the app, the suite's own) is never garbage, yet every full pass of the garbage collector scanned
it all: about a second a pass once torch and transformers are in, and the unit tests of the API, the core and
the trainers made 89 full passes, 74 s of CPU, on two cores shared by the four parts of `make test`. Frozen
once collection ends, as an API process freezes what it holds once started (app/api/heap.py), it is left out
of every pass; what tests allocate is collected as before.

An API started in this process (a TestClient's lifespan, schemathesis' for each test) freezes on start and
thaws everything when it stops, this process's heap with it: the test after it freezes the heap again,
without the full pass the API's own start makes; that test's garbage stays frozen. The thaw is noted as it
happens: asking gc how much is frozen walks every frozen object, a twentieth of a second and more per test.
"""

from __future__ import annotations

import gc

import pytest

_thawed = False
_unfreeze = gc.unfreeze
_patch = pytest.MonkeyPatch()


def _unfreeze_noted() -> None:
    global _thawed
    _thawed = True
    _unfreeze()


def pytest_configure(config: pytest.Config) -> None:
    _patch.setattr(gc, "unfreeze", _unfreeze_noted)


def pytest_collection_finish(session: pytest.Session) -> None:
    gc.collect()  # garbage frozen now would never be collected
    gc.freeze()


def pytest_runtest_logfinish(nodeid: str, location: tuple[str, int | None, str]) -> None:
    global _thawed
    if _thawed:
        _thawed = False
        gc.freeze()


def pytest_unconfigure(config: pytest.Config) -> None:
    _patch.undo()
