"""torch's NCCL flight recorder, reduced to which rank is missing from which collective.

On a NCCL timeout each rank dumps its ring of recent collectives to `stacks/nccl-trace-rank-<rank>`
(core/launch.py::flight_recorder sets it up). The dump is a pickle of plain containers (torch's
distributed/flight_recorder/components/loader.py reads it: {"version", "pg_config", "entries": [{"pg_id",
"collective_seq_id", "profiling_name", "state", ...}]}); the job wrote it, so it is read through the confined
opener, bounded, by an unpickler that builds no object but containers, strings and numbers.

Checked against the dumps of a hung 2-GPU job (tests/gpu/test_stall_nccl_gpu.py on 2 H200s; kept in
tests/unit/worker/nccl_hang/ for tests/unit/worker/test_flight.py).
"""

from __future__ import annotations

import io
import pickle
from collections import defaultdict
from pathlib import Path
from typing import Any

from jobspec.files import JobFileError, job_files, open_job_file
from jobspec.stacks import NCCL_TRACE_PREFIX, STACKS_DIR

DUMP_MAX_BYTES = 16 << 20  # a ring of 2000 entries with their frames is a few MB
COLLECTIVES_SHOWN = 16
# torch's C++ pickler writes lists of ints and such through these helpers; each builds a plain list.
_LIST_BUILDERS = {
    ("torch.jit._pickle", name) for name in ("build_intlist", "build_doublelist", "build_boollist")
}


class _Plain(pickle.Unpickler):
    def find_class(self, module: str, name: str) -> Any:
        if (module, name) in _LIST_BUILDERS:
            return list
        raise pickle.UnpicklingError(f"{module}.{name} is not a plain value of a flight-recorder dump")


def _dump(run_dir: Path, name: str) -> dict[str, Any] | None:
    try:
        with open_job_file(run_dir, name, DUMP_MAX_BYTES) as opened:
            raw = b"".join(opened.chunks())
    except JobFileError:
        return None
    try:
        loaded = _Plain(io.BytesIO(raw)).load()
    except Exception:  # whatever a job made of the file: it is no dump, and says nothing
        return None
    return loaded if isinstance(loaded, dict) else None


def dumps(run_dir: Path) -> dict[int, dict[str, Any]]:
    """Each rank's dump, by rank; none where the ranks dumped nothing."""
    try:
        names = job_files(run_dir, STACKS_DIR, deep=False)
    except JobFileError:
        return {}
    found: dict[int, dict[str, Any]] = {}
    for name in names:
        suffix = name.rsplit("/", 1)[-1].removeprefix(NCCL_TRACE_PREFIX)
        if suffix != name.rsplit("/", 1)[-1] and suffix.isdigit() and (dump := _dump(run_dir, name)):
            found[int(suffix)] = dump
    return found


def missing(dumps: dict[int, dict[str, Any]]) -> list[dict[str, Any]]:
    """Per process group, the latest collective any rank entered and the ranks of the group whose dump never
    reached it: [{"pg", "seq", "collective", "waiting", "missing"}]."""
    latest: dict[str, dict[int, tuple[int, str]]] = defaultdict(dict)  # pg -> rank -> (seq, name)
    members: dict[str, list[int]] = {}
    for rank, dump in dumps.items():
        for pg, config in (dump.get("pg_config") or {}).items():
            if isinstance(config, dict) and isinstance(ranks := _ranks(config.get("ranks")), list):
                members[str(pg)] = ranks
        for entry in dump.get("entries") or []:
            if not isinstance(entry, dict) or entry.get("is_p2p"):
                continue
            pg, seq = _group(entry), entry.get("collective_seq_id")
            if isinstance(seq, int) and seq > latest[pg].get(rank, (-1, ""))[0]:
                latest[pg][rank] = (seq, str(entry.get("profiling_name", "")))
    found = []
    for pg, seen in sorted(latest.items()):
        seq, name = max(seen.values())
        waiting = sorted(rank for rank, (at, _) in seen.items() if at == seq)
        group = members.get(pg, sorted(dumps))
        late = sorted(rank for rank in group if seen.get(rank, (-1, ""))[0] < seq)
        if late:
            found.append({"pg": pg, "seq": seq, "collective": name, "waiting": waiting, "missing": late})
    return found[:COLLECTIVES_SHOWN]


def _group(entry: dict[str, Any]) -> str:
    """The entry's process group by the name pg_config keys it with ("process_group": (name, desc)), else
    its id."""
    named = entry.get("process_group")
    if isinstance(named, list | tuple) and named:
        return str(named[0])
    return str(entry.get("pg_id"))


def _ranks(said: Any) -> list[int] | None:
    """A group's global ranks, as the dump lists them (a list, or its text "[0, 1]")."""
    if isinstance(said, str):
        said = [part.strip() for part in said.strip("[]").split(",") if part.strip()]
    if not isinstance(said, list):
        return None
    try:
        return [int(rank) for rank in said]
    except (TypeError, ValueError):
        return None


def summary(run_dir: Path) -> list[dict[str, Any]]:
    """Which rank is missing from which collective, from the dumps in the run directory; [] without any."""
    return missing(dumps(run_dir))
