"""What the soak's service runs: its processes found by kind (an API process, a rank, a waiting standby),
and a record of every process it ever started, so that the end can name those still alive."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

import psutil

from jobspec.startup import STANDBY_ID_ENV
from worker.executors.local.kill import STANDBY_FILES

TRACK_S = 2.0  # between looks at the process trees: a rank lives for seconds, a job for several
LEFT_GRACE_S = 30.0


@dataclass(frozen=True)
class Seen:
    """A process by its pid and start time, so that a pid reused by another process is not mistaken for it."""

    pid: int
    created: float
    argv: str

    def alive(self) -> bool:
        try:
            return psutil.Process(self.pid).create_time() == self.created
        except psutil.Error:
            return False


def _environ(proc: psutil.Process) -> dict[str, str]:
    try:
        return proc.environ()
    except psutil.Error:
        return {}


def _seen(proc: psutil.Process) -> Seen | None:
    try:
        return Seen(proc.pid, proc.create_time(), " ".join(proc.cmdline()[:4]))
    except psutil.Error:
        return None


def api_processes(supervisor: int) -> list[psutil.Process]:
    """The processes uvicorn's supervisor runs the API in (multiprocessing's spawned children), not its
    resource tracker."""
    try:
        children = psutil.Process(supervisor).children()
    except psutil.Error:
        return []
    found = []
    for child in children:
        try:
            if any("spawn_main" in part for part in child.cmdline()):
                found.append(child)
        except psutil.Error:
            continue
    return found


def _handed_over(runs_dir: Path) -> set[str]:
    """Ids of the standbys that took a job on: the worker writes them into the job's run directory."""
    return {
        line
        for path in runs_dir.glob(f"*/{STANDBY_FILES.format('*')}")
        for line in path.read_text(errors="replace").split()
    }


def waiting_standbys(runs_dir: Path, tracker: Tracker) -> list[psutil.Process]:
    """This service's warm standbys no job has taken yet: a process the tracker saw under the service, with
    a standby id that no run directory names. Not every process with such an id: another service's on the
    same host (the suite runs several at once) has one too, and so has every process its ranks fork, since
    a fork keeps the standby's environment."""
    taken = _handed_over(runs_dir)
    tracker.snapshot()
    found = []
    for proc in psutil.process_iter():
        standby = _environ(proc).get(STANDBY_ID_ENV)
        if standby and standby not in taken and tracker.saw(proc):
            found.append(proc)
    return found


def _marked(runs_dir: Path) -> Iterator[psutil.Process]:
    """Processes of this service's jobs, wherever their parent went: the worker marks a job's processes with
    their run directory, and a standby that took a job on with its id, which the run directory holds."""
    taken = _handed_over(runs_dir)
    for proc in psutil.process_iter():
        env = _environ(proc)
        if env.get("TRAINYARD_RUN_DIR", "").startswith(f"{runs_dir}/") or env.get(STANDBY_ID_ENV) in taken:
            yield proc


class Tracker(threading.Thread):
    """Records the process trees under `roots` every TRACK_S, and on demand before a kill (whose orphans are
    no longer under any root afterwards)."""

    def __init__(self, roots: Callable[[], list[int]], runs_dir: Path) -> None:
        super().__init__(name="soak-process-tracker", daemon=True)
        self.roots = roots
        self.runs_dir = runs_dir
        self.seen: set[Seen] = set()
        self.lock = threading.Lock()
        self.stopping = threading.Event()

    def snapshot(self) -> None:
        procs: list[psutil.Process] = []
        for pid in self.roots():
            try:
                root = psutil.Process(pid)
                procs += [root, *root.children(recursive=True)]
            except psutil.Error:
                continue
        found = {seen for proc in procs if (seen := _seen(proc)) is not None}
        with self.lock:
            self.seen |= found

    def saw(self, proc: psutil.Process) -> bool:
        """Whether this process (by its pid and start time) is one the service ran."""
        seen = _seen(proc)
        with self.lock:
            return seen is not None and any((s.pid, s.created) == (seen.pid, seen.created) for s in self.seen)

    def run(self) -> None:
        while not self.stopping.wait(TRACK_S):
            self.snapshot()

    def stop(self) -> None:
        self.stopping.set()
        self.join()

    def left(self, grace_s: float = LEFT_GRACE_S) -> list[Seen]:
        """Every process the service ever ran, and any process marked as one of its jobs', still alive
        `grace_s` after the service was told to stop (a standby factory exits seconds after its worker)."""
        self.snapshot()
        marked = {seen for proc in _marked(self.runs_dir) if (seen := _seen(proc)) is not None}
        with self.lock:
            candidates = self.seen | marked
        deadline = time.monotonic() + grace_s
        while (alive := sorted((s for s in candidates if s.alive()), key=lambda s: s.pid)) and (
            time.monotonic() < deadline
        ):
            time.sleep(1.0)
        return alive
