"""What an API process holds once it has started (its modules, the app and its routes, the services' threads)
is never garbage, yet the collector's full passes scanned all of it each time: a pass held the event loop, and
every request waiting on it, for as long as the scan took, which was the slowest requests' time under load
(bench/RESULTS.md, docs/performance.md). Frozen after start-up, those objects are left out of every pass; what
requests allocate is collected as before."""

from __future__ import annotations

import gc
from collections.abc import Iterator
from contextlib import contextmanager


@contextmanager
def started_heap_frozen() -> Iterator[None]:
    """Freezes what the process holds now, for as long as it serves; given back to the collector after."""
    gc.collect()  # garbage frozen now would never be collected
    gc.freeze()
    try:
        yield
    finally:
        gc.unfreeze()
