"""The warm launcher: a standby that has imported torchrun and the trainer becomes the job's torchrun, with
the job's environment and log, and forks the ranks of trainers.run; the next standby is started; without
one, a plain torchrun process starts."""

from __future__ import annotations

import json
import signal
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import psutil
import pytest
from torch.distributed.run import parse_args

from core.launch import JOB_TOKEN_ENV, RUN_DIR_ENV, Launch, build_launch
from core.project import PROJECT_ROOT
from jobspec.events import EVENTS_FILE, LAUNCHER_LOG, LOG_DIR, DoneEvent, parse_event, rank_log_name
from jobspec.startup import STANDBY_ID_ENV
from tests.integration.trainer_helpers import write_config
from tests.unit.conftest import job_body
from trainers.warm.standby import forked_ranks
from worker.executors.local.kill import job_processes, kill_job, mark_for
from worker.executors.local.warm.factory_handle import FACTORY_MODULE, LOST_EXIT_CODE, ForkedStandby
from worker.executors.local.warm.launcher import WarmLauncher
from worker.failure import FailureKind, classify_failure, root_cause

# Both ranks share the log, so each writes its line in one call: print's separate writes interleave.
RANK_SCRIPT = """
import os, sys
line = " ".join(["rank says", os.environ["JOB_MARKER"], os.environ["RANK"], os.environ["WORLD_SIZE"]])
os.write(1, (line + "\\n").encode())
sys.exit(int(os.environ.get("EXIT_WITH", "0")))
"""
TIMEOUT_S = 120


def torchrun(tmp_path: Path, **env: str) -> Launch:
    script = tmp_path / "rank.py"
    script.write_text(RANK_SCRIPT)
    argv = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nnodes", "1"]
    argv += ["--nproc-per-node", "2", str(script)]
    mark = {JOB_TOKEN_ENV: "test/7/1", RUN_DIR_ENV: str(tmp_path)}
    return Launch(argv=argv, env={"PATH": "/usr/bin:/bin", "JOB_MARKER": "job-7", **mark, **env})


def waiting_standby(launcher: WarmLauncher) -> ForkedStandby:
    """The standby the next job gets, once the factory has forked it: a job launched while the factory still
    imports starts cold."""
    launcher.prepare()
    standby = launcher.standby
    assert standby is not None and standby.forked(TIMEOUT_S)
    return standby


@pytest.fixture(scope="module")
def launcher() -> Iterator[WarmLauncher]:
    """One launcher, and so one factory, for the tests that only take standbys from it."""
    launcher = WarmLauncher(sys.executable, PROJECT_ROOT)
    yield launcher
    launcher.close()


def factories() -> list[psutil.Process]:
    """This process's standby factories."""
    return [child for child in psutil.Process().children() if FACTORY_MODULE in " ".join(child.cmdline())]


def new_factory(others: set[int]) -> psutil.Process:
    """The one factory of this process not among `others`, once it runs the factory's program: a child
    forked a moment ago shows its parent's command line until it has exec'd (a run of `make test` found none
    right after prepare())."""
    deadline = time.monotonic() + TIMEOUT_S
    while not (found := [factory for factory in factories() if factory.pid not in others]):
        assert time.monotonic() < deadline, f"no new standby factory within {TIMEOUT_S} s"
        time.sleep(0.05)
    (factory,) = found
    return factory


@pytest.fixture
def own_launcher() -> Iterator[WarmLauncher]:
    """A launcher with a factory of its own, started by the test."""
    launcher = WarmLauncher(sys.executable, PROJECT_ROOT)
    yield launcher
    launcher.close()


def test_the_standby_becomes_the_jobs_torchrun(tmp_path: Path, launcher: WarmLauncher) -> None:
    standby = waiting_standby(launcher)
    log = tmp_path / "launcher.log"
    process = launcher.start(torchrun(tmp_path), log)
    assert process is standby
    assert process.wait(TIMEOUT_S) == 0
    text = log.read_text()
    assert "rank says job-7 0 2" in text and "rank says job-7 1 2" in text
    follower = launcher.standby
    assert follower is not None and follower.pid != standby.pid and follower.poll() is None


def test_jobs_launched_together_each_get_a_waiting_standby(tmp_path: Path, launcher: WarmLauncher) -> None:
    """With two waiting, a second job launched at once starts warm too (a sweep's trials), not cold."""
    launcher.count = 2  # as WarmLauncher(count=2) keeps them; the module's factory forks the second
    try:
        waiting_standby(launcher)
        for name in "ab":
            (tmp_path / name).mkdir()
        first, second = (launcher.start(torchrun(tmp_path / name), tmp_path / f"{name}.log") for name in "ab")
        assert isinstance(first, ForkedStandby) and isinstance(second, ForkedStandby), "one started cold"
        assert first.wait(TIMEOUT_S) == 0 and second.wait(TIMEOUT_S) == 0
    finally:
        launcher.count = 1


def test_a_failing_rank_fails_the_standby_torchrun(tmp_path: Path, launcher: WarmLauncher) -> None:
    waiting_standby(launcher)
    process = launcher.start(torchrun(tmp_path, EXIT_WITH="3"), tmp_path / "launcher.log")
    assert process.wait(TIMEOUT_S) != 0
    assert "ChildFailedError" in (tmp_path / "launcher.log").read_text()


def test_with_the_launcher_disabled_torchrun_starts_cold(tmp_path: Path) -> None:
    launcher = WarmLauncher(sys.executable, PROJECT_ROOT, enabled=False)
    launcher.prepare()
    process = launcher.start(torchrun(tmp_path), tmp_path / "launcher.log")
    assert process.wait(TIMEOUT_S) == 0
    assert "rank says job-7 0 2" in (tmp_path / "launcher.log").read_text()
    assert launcher.standby is None


def test_with_its_standby_dead_torchrun_starts_cold_and_a_new_standby_waits(
    tmp_path: Path, launcher: WarmLauncher
) -> None:
    dead = waiting_standby(launcher)
    dead.kill()
    dead.wait()
    process = launcher.start(torchrun(tmp_path), tmp_path / "launcher.log")
    assert process.wait(TIMEOUT_S) == 0
    assert "rank says job-7 0 2" in (tmp_path / "launcher.log").read_text()
    assert process.pid != dead.pid and not isinstance(process, ForkedStandby)
    assert launcher.standby is not None and launcher.standby.poll() is None


def test_a_standby_exits_when_its_worker_goes_away(launcher: WarmLauncher) -> None:
    standby = waiting_standby(launcher)
    launcher._ready[0].channel.close()  # what the worker's death does to the socket of its stdin
    assert standby.wait(TIMEOUT_S) == 0


def test_a_command_that_wraps_torchrun_starts_cold_and_leaves_the_standby(
    tmp_path: Path, launcher: WarmLauncher
) -> None:
    """A sandbox's command (core/sandbox.py) puts bwrap before torchrun: the standby, outside any sandbox,
    must not run it in its stead."""
    standby = waiting_standby(launcher)
    plain = torchrun(tmp_path)
    process = launcher.start(Launch(["env", *plain.argv], plain.env), tmp_path / "launcher.log")
    assert process is not standby and launcher.standby is standby and standby.poll() is None
    assert process.wait(TIMEOUT_S) == 0
    assert "rank says job-7 0 2" in (tmp_path / "launcher.log").read_text()


HOST = "test-host"
JOB_ID = 1  # write_config's


def two_ranks(max_steps: int) -> dict[str, Any]:
    """A built-in job of 2 gloo ranks on the CPU."""
    parallel = {"strategy": "ddp", "nproc_per_node": 2}
    return job_body(train={"max_steps": max_steps, "batch_size": 8}, parallel=parallel)


def trainer_launch(
    runs: Path, spec: dict[str, Any], gpu_ids: list[int] | None = None, code_dir: Path | None = None
) -> Launch:
    """`spec` as job 1 in runs/1, launched as the worker launches it."""
    run_dir = runs / str(JOB_ID)
    config = write_config(run_dir, spec, code_dir=code_dir)
    return build_launch(
        config.plan,
        job_id=JOB_ID,
        attempt=1,
        host=HOST,
        run_dir=run_dir,
        data_dir=runs,
        gpu_ids=gpu_ids or [],
        python=sys.executable,
    )


def test_the_trainers_ranks_are_forked_through_torchruns_own_options(tmp_path: Path) -> None:
    args = trainer_launch(tmp_path, two_ranks(1)).argv[3:]
    forked = forked_ranks(args)
    assert forked is not None
    cold, warm = parse_args(args), parse_args(forked)
    assert warm.start_method == "fork" and warm.run_path and not warm.module
    assert warm.training_script == str(PROJECT_ROOT / "trainers" / "run.py")
    assert warm.training_script_args == cold.training_script_args == ["--run-dir", str(tmp_path / "1")]
    assert warm.nproc_per_node == cold.nproc_per_node and warm.standalone == cold.standalone
    assert forked_ranks(["--standalone", "--nproc-per-node", "2", "script.py"]) is None


def test_a_job_trains_in_ranks_forked_from_the_standby(tmp_path: Path, launcher: WarmLauncher) -> None:
    standby = waiting_standby(launcher)
    log = tmp_path / LAUNCHER_LOG
    process = launcher.start(trainer_launch(tmp_path, two_ranks(3)), log)
    assert process is standby
    assert process.wait(TIMEOUT_S) == 0, log.read_text()
    assert "ranks forked from it" in log.read_text()
    events = [parse_event(line) for line in (tmp_path / "1" / EVENTS_FILE).read_text().splitlines()]
    assert any(isinstance(event, DoneEvent) and event.step == 3 for event in events), events


def test_a_forked_rank_that_fails_fails_torchrun(tmp_path: Path, launcher: WarmLauncher) -> None:
    waiting_standby(launcher)
    command = trainer_launch(tmp_path, two_ranks(3))
    (tmp_path / "1" / "spec.json").unlink()  # every rank fails reading it
    log = tmp_path / LAUNCHER_LOG
    process = launcher.start(command, log)
    assert process.wait(TIMEOUT_S) != 0
    assert "ranks forked from it" in log.read_text() and "ChildFailedError" in log.read_text()
    # The error file the worker reads to tell why the job failed.
    error = json.loads((tmp_path / "1" / "error.json").read_text())
    assert "FileNotFoundError" in json.dumps(error)


def children(process: psutil.Process, count: int) -> list[psutil.Process]:
    deadline = time.monotonic() + TIMEOUT_S
    while len(found := process.children()) < count:
        assert time.monotonic() < deadline, f"{process.pid} never had {count} children"
        time.sleep(0.1)
    return found


def test_the_jobs_mark_finds_and_stops_ranks_forked_from_the_standby(
    tmp_path: Path, launcher: WarmLauncher
) -> None:
    waiting_standby(launcher)  # the job is handed to it
    process = launcher.start(trainer_launch(tmp_path, two_ranks(10_000_000)), tmp_path / LAUNCHER_LOG)
    agent = psutil.Process(process.pid)
    ranks = children(agent, 2)
    # Forked from the standby, not fresh `python -m trainers.run` interpreters.
    assert all(rank.cmdline() == agent.cmdline() for rank in ranks)
    mark = mark_for(JOB_ID, 1, HOST, tmp_path)
    # The ranks' /proc environ is the standby's: the job's token is not there, the standby's id is.
    assert {rank.pid for rank in ranks} <= {found.pid for found in job_processes(mark)}
    assert kill_job(mark, grace_s=10) == []  # no process group given: the reaper's case
    assert process.wait(TIMEOUT_S) != 0


def test_the_standby_sees_only_what_a_rank_may_inherit(
    own_launcher: WarmLauncher, monkeypatch: pytest.MonkeyPatch
) -> None:
    launcher = own_launcher
    monkeypatch.setenv("TRAINYARD_DATABASE_URL", "postgresql://trainyard:secret@db/trainyard")
    launcher.count = 2
    launcher.prepare()
    standbys = [standby.process for standby in launcher._ready]
    environs = [psutil.Process(standby.pid).environ() for standby in standbys]
    assert all("TRAINYARD_DATABASE_URL" not in environ and environ["PATH"] for environ in environs), environs
    # Forked from one factory, each shows its own id there, by which kill.py finds it and its ranks.
    assert [environ[STANDBY_ID_ENV] for environ in environs] == [standby.id for standby in standbys]
    factory = psutil.Process(standbys[0].pid).parent()
    assert factory is not None and factory.environ()[STANDBY_ID_ENV] not in {s.id for s in standbys}


def test_a_job_waits_for_no_import_of_the_factory(tmp_path: Path, own_launcher: WarmLauncher) -> None:
    """The first job after `make run` on a loaded box waited 53 s in its standby's channel for the factory's
    imports (issue 47). The factory stopped (SIGSTOP) stands for imports slower than any cold start: the job
    starts cold at once and runs, and the standby, not handed the job, takes the next one once forked."""
    others = {factory.pid for factory in factories()}  # the module's launcher's
    own_launcher.prepare()
    factory = new_factory(others)
    factory.suspend()
    try:
        standby = own_launcher.standby
        assert standby is not None and not standby.forked(0), "forked before the test could stop it"
        started = time.monotonic()
        process = own_launcher.start(torchrun(tmp_path), tmp_path / "launcher.log")
        assert time.monotonic() - started < 1, "the launch waited"
        assert not isinstance(process, ForkedStandby), "handed to a standby the factory has yet to fork"
        assert process.wait(TIMEOUT_S) == 0
        assert "rank says job-7 0 2" in (tmp_path / "launcher.log").read_text()
        assert own_launcher.standby is standby and standby.poll() is None
    finally:
        factory.resume()
    assert standby.forked(TIMEOUT_S)
    (tmp_path / "next").mkdir()
    follower = own_launcher.start(torchrun(tmp_path / "next"), tmp_path / "next.log")
    assert follower is standby and follower.wait(TIMEOUT_S) == 0


def test_standbys_outlive_their_factory_and_a_new_one_takes_over(
    tmp_path: Path, own_launcher: WarmLauncher
) -> None:
    launcher = own_launcher
    orphan = waiting_standby(launcher)
    factory = psutil.Process(orphan.pid).parent()
    assert factory is not None
    factory.kill()
    factory.wait(TIMEOUT_S)
    assert orphan.poll() is None, "a standby ended with its factory"
    process = launcher.start(torchrun(tmp_path), tmp_path / "launcher.log")
    assert process is orphan and process.wait(TIMEOUT_S) == LOST_EXIT_CODE  # its code died with the factory
    assert "rank says job-7 0 2" in (tmp_path / "launcher.log").read_text()
    follower = launcher.standby
    assert follower is not None and psutil.Process(follower.pid).parent().pid != factory.pid


def test_a_forked_rank_killed_by_a_signal_is_the_failure_reported(
    tmp_path: Path, launcher: WarmLauncher
) -> None:
    """Its peer then fails talking to it, at once: torchrun's fork start method reports one failure, which
    must be the kill."""
    waiting_standby(launcher)
    run_dir = tmp_path / "1"
    command = trainer_launch(tmp_path, two_ranks(10_000_000))
    (run_dir / LOG_DIR).mkdir()
    process = launcher.start(command, run_dir / LOG_DIR / LAUNCHER_LOG)  # where the worker reads it
    ranks = children(psutil.Process(process.pid), 2)
    events, deadline = run_dir / EVENTS_FILE, time.monotonic() + TIMEOUT_S
    while not (events.exists() and '"kind": "metrics"' in events.read_text()):  # in a collective by now
        assert time.monotonic() < deadline, "no metrics before the deadline"
        time.sleep(0.1)
    (victim,) = [rank for rank in ranks if any(f.path.endswith(rank_log_name(1)) for f in rank.open_files())]
    victim.kill()
    code = process.wait(TIMEOUT_S)
    assert classify_failure(run_dir, code) is FailureKind.CRASH, root_cause(run_dir, code)
    assert "rank 1 was killed by signal SIGKILL" in root_cause(run_dir, code)


def program_launch(runs: Path, name: str, script: str) -> Launch:
    """A program job of 2 ranks running `script`, as job 1 in runs/1."""
    code = runs / "code"
    code.mkdir()
    (code / f"{name}.py").write_text(script)
    spec = {
        "name": name,
        "code": "sha256:" + "0" * 64,
        "program": {"entrypoint": ["python", f"{name}.py"]},
        "parallel": {"strategy": "ddp", "nproc_per_node": 2},
        "train": {"max_steps": 1},
    }
    return trainer_launch(runs, spec, code_dir=code)


# A rank that takes a second over its stop, as one saving a final checkpoint on a loaded host does.
SLOW_STOP = """
import os, signal, time
from pathlib import Path
run_dir, rank = Path(os.environ["TRAINYARD_RUN_DIR"]), os.environ["RANK"]
def stop(*_):
    time.sleep(1.0)
    (run_dir / f"saved-{rank}").write_text("saved")
    os._exit(0)
signal.signal(signal.SIGTERM, stop)
(run_dir / f"ready-{rank}").write_text("")
while True:
    time.sleep(0.1)
"""


def test_a_cancelled_jobs_ranks_finish_their_stop_however_torchrun_ends(
    tmp_path: Path, launcher: WarmLauncher
) -> None:
    """A cancel's SIGTERM may reach torchrun more than once (kill.py signals its group, then each process;
    a loaded host, seen in CI, delivers them apart), and each that comes while torchrun waits for its ranks
    to stop cuts that wait short, until torchrun's main() raises. The standby must still wait for its ranks,
    as an interpreter's exit does: torch's forked ranks get SIGINT when their parent dies, which would cut a
    final checkpoint short."""
    command = program_launch(tmp_path, "slow_stop", SLOW_STOP)
    run_dir, log = tmp_path / "1", tmp_path / LAUNCHER_LOG
    waiting_standby(launcher)
    process = launcher.start(command, log)
    deadline = time.monotonic() + TIMEOUT_S
    while not all((run_dir / f"ready-{rank}").exists() for rank in (0, 1)):
        assert process.poll() is None and time.monotonic() < deadline, log.read_text()
        time.sleep(0.05)
    # Three, each once torchrun has signalled both ranks again: the first starts its shutdown, the second
    # ends that wait and starts another (torchrun's `finally`), the third ends that one and main() raises.
    for signalled in (2, 4):
        process.send_signal(signal.SIGTERM)
        while log.read_text().count("Closing process") < signalled:
            assert time.monotonic() < deadline, log.read_text()
            time.sleep(0.01)
    process.send_signal(signal.SIGTERM)
    assert process.wait(TIMEOUT_S) != 0
    logs = [(run_dir / LOG_DIR / rank_log_name(rank)).read_text() for rank in (0, 1)]
    assert [(run_dir / f"saved-{rank}").exists() for rank in (0, 1)] == [True, True], logs


def test_a_forked_rank_runs_as_many_threads_as_its_job_allows(tmp_path: Path, launcher: WarmLauncher) -> None:
    """The standby loaded torch without the job's OMP_NUM_THREADS, so its default is every core's."""
    command = program_launch(tmp_path, "threads", "import torch\nprint('threads', torch.get_num_threads())\n")
    command.env["OMP_NUM_THREADS"] = "1"
    waiting_standby(launcher)
    assert launcher.start(command, tmp_path / LAUNCHER_LOG).wait(TIMEOUT_S) == 0
    assert "ranks forked from it" in (tmp_path / LAUNCHER_LOG).read_text()
    assert "threads 1" in (tmp_path / "1" / LOG_DIR / rank_log_name(0)).read_text()
