"""The NCCL flight recorder's dumps reduced to which rank is missing from which collective
(worker/attempts/flight.py), on hand-made dumps in the format torch's flight_recorder loader reads and on
the dumps of a real hung job (nccl_hang/: tests/gpu/test_stall_nccl_gpu.py on 2 H200s, torch 2.11, where rank
1 slept before an all_reduce rank 0 had entered); a dump that would build any object is refused."""

from __future__ import annotations

import os
import pickle
import shutil
from pathlib import Path
from typing import Any

from jobspec.stacks import NCCL_TRACE_PREFIX
from worker.attempts.flight import summary


def entry(seq: int, name: str = "nccl:all_reduce", state: str = "completed") -> dict[str, Any]:
    return {
        "record_id": seq,
        "pg_id": 0,
        "process_group": ("0", "default_pg"),
        "collective_seq_id": seq,
        "p2p_seq_id": 0,
        "profiling_name": name,
        "state": state,
        "input_sizes": [[4]],
        "is_p2p": False,
    }


def dump(entries: list[dict[str, Any]]) -> dict[str, Any]:
    return {
        "version": "2.4",
        "pg_config": {"0": {"name": "0", "desc": "default_pg", "ranks": "[0, 1, 2]"}},
        "entries": entries,
    }


def write(run_dir: Path, rank: int, data: bytes) -> None:
    (run_dir / "stacks").mkdir(exist_ok=True)
    (run_dir / "stacks" / f"{NCCL_TRACE_PREFIX}{rank}").write_bytes(data)


def test_the_ranks_behind_the_latest_collective_are_missing(tmp_path: Path) -> None:
    write(tmp_path, 0, pickle.dumps(dump([entry(1), entry(2), entry(3, state="started")])))
    write(tmp_path, 1, pickle.dumps(dump([entry(1), entry(2)])))
    # Rank 2 dumped nothing: the group's config still names it.
    assert summary(tmp_path) == [
        {"pg": "0", "seq": 3, "collective": "nccl:all_reduce", "waiting": [0], "missing": [1, 2]}
    ]


def test_the_dumps_of_a_real_hung_nccl_job_name_the_rank_that_never_arrived(tmp_path: Path) -> None:
    shutil.copytree(Path(__file__).with_name("nccl_hang"), tmp_path / "stacks")
    assert summary(tmp_path) == [
        {"pg": "0", "seq": 14, "collective": "nccl:all_reduce", "waiting": [0], "missing": [1]}
    ]


def test_ranks_all_at_the_same_collective_name_none(tmp_path: Path) -> None:
    for rank in (0, 1, 2):
        write(tmp_path, rank, pickle.dumps(dump([entry(1), entry(2, state="started")])))
    assert summary(tmp_path) == []


class Planted:
    def __reduce__(self) -> tuple[Any, tuple[str]]:
        return (os.system, ("touch /tmp/flight-planted",))


def test_a_dump_that_would_build_an_object_or_is_a_link_is_not_read(tmp_path: Path) -> None:
    write(tmp_path, 0, pickle.dumps({"entries": [Planted()]}))
    (tmp_path / "elsewhere").write_bytes(pickle.dumps(dump([entry(5)])))
    (tmp_path / "stacks" / f"{NCCL_TRACE_PREFIX}1").symlink_to(tmp_path / "elsewhere")
    assert summary(tmp_path) == []
    assert not Path("/tmp/flight-planted").exists()
