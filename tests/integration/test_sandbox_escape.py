"""User code cannot reach the service. A hostile rank (sandbox_hostile_rank.py), started in the sandbox as the
worker starts a job's torchrun, tries to read the service's secrets, write outside its run directory, signal
the worker and a process of its own uid outside, reach the host's network, gain privileges, fork without end
and write past its file size limit. Each try is refused or contained: the test reads the rank's report and
looks at the host. Cancel removes every process of the sandbox, one that hid from the job mark included."""

from __future__ import annotations

import json
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path
from typing import Any

import psutil
import pytest

from core.sandbox import SYSTEM_ETC, Sandbox, sandbox_argv
from core.sandbox_host import RANK_PACKAGES
from tests.integration.sandbox_launch import SECRET, Deployment, deploy, sandboxed_job, start
from worker.executors.local.kill import kill_job

HOSTILE = Path(__file__).with_name("sandbox_hostile_rank.py")
WORKER_SECRETS = {
    "TRAINYARD_DATABASE_URL": f"postgresql+psycopg://trainyard:{SECRET}@postgres:5432/trainyard",
    "TRAINYARD_BROKER_URL": f"redis://:{SECRET}@redis:6379/0",
    "AWS_SECRET_ACCESS_KEY": SECRET,
    "OPENAI_API_KEY": SECRET,
}
LIMITS = {"job_max_processes": 64, "job_max_file_gb": 1 / 1024}  # 1 MiB
BWRAP_DEV = ["core", "fd", "full", "null", "ptmx", "pts", "random", "shm", "stderr", "stdin", "stdout", "tty"]
UNPRIVILEGED_UID = 1000  # the Docker image's worker


@pytest.fixture
def worker_env(monkeypatch: pytest.MonkeyPatch) -> dict[str, str]:
    """This process stands for the worker: its environment (/proc/<pid>/environ) holds the secrets too."""
    for name, value in WORKER_SECRETS.items():
        monkeypatch.setenv(name, value)
    return dict(os.environ)


@pytest.fixture
def listeners() -> Iterator[list[socket.socket]]:
    """Ports listening on the host: one on loopback, one on every address."""
    servers = [socket.create_server(("127.0.0.1", 0)), socket.create_server(("0.0.0.0", 0))]
    yield servers
    for server in servers:
        server.close()


def host_address() -> str:
    """This host's address on its way out (no packet is sent)."""
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as probe:
        probe.connect(("10.255.255.255", 9))
        return str(probe.getsockname()[0])


def sentinel(uid: int) -> subprocess.Popen[bytes]:
    """A process of the job's own uid, outside the sandbox: same uid, yet out of the job's reach."""
    setpriv = ["setpriv", f"--reuid={uid}", f"--regid={uid}", "--clear-groups"]
    return subprocess.Popen([*setpriv, "sleep", "300"] if os.geteuid() == 0 else ["sleep", "300"])


def hostile_plan(deployment: Deployment, listeners: list[socket.socket], victim: int, home: Path) -> Path:
    run_dir, var = deployment.run_dir, deployment.var
    plan = {
        "read": {
            **{name: str(path) for name, path in deployment.secrets.items()},
            "worker home": str(home / ".netrc"),
            "pid 1 environ": "/proc/1/environ",
            "worker environ": f"/proc/{os.getpid()}/environ",
            "bundle": str(deployment.bundle / "models.py"),
            "data": str(var / "data" / "cifar" / "batch_1"),
        },
        "write": {
            "run dir": str(run_dir / "mine"),
            "tmp": "/tmp/mine",
            "shm": "/dev/shm/mine",
            "project": str(Path(__file__).parent / "pwned"),
            "var": str(var / "pwned"),
            "other job": str(deployment.settings.runs_dir / "8" / "pwned"),
            "bundle": str(deployment.bundle / "pwned.py"),
            "data": str(var / "data" / "cifar" / "pwned"),
            "etc": "/etc/pwned",
            "worker home": str(home / "pwned"),
        },
        "kill": {"worker": os.getpid(), "sentinel": victim},
        "connect": {
            "host loopback": ["127.0.0.1", listeners[0].getsockname()[1]],
            "host address": [host_address(), listeners[1].getsockname()[1]],
        },
        "fork_at_most": 10_000,
        "big_file": str(run_dir / "big"),
        "big_file_bytes": 4 << 20,
    }
    path = run_dir / "plan.json"
    path.write_text(json.dumps(plan))
    return path


def assert_sees_only_its_own(listed: dict[str, list[str]], box: Sandbox) -> None:
    """Of the host's top-level folders only the system's and the ways to what the job was given; of /etc
    only what programs read to start; of the project only the packages the ranks import."""
    given = (*box.shown, box.run_dir, *box.read_only)
    system = {path.parts[1] for path in (*box.system.shown, *(link for link, _ in box.system.links))}
    assert set(listed["/"]) == {"dev", "proc", "tmp", *system, *(path.parts[1] for path in given)}
    assert {"home", "var", "opt", "srv", "mnt", "boot", "media"}.isdisjoint(
        set(listed["/"]) - {path.parts[1] for path in given}
    )
    assert set(listed["/etc"]) <= {path.name for path in SYSTEM_ETC} and "shadow" not in listed["/etc"]
    if box.cwd != Path("/"):
        venv = Path(sys.prefix).resolve()  # the Python environment, when it lives in the checkout
        inner = {venv.relative_to(box.cwd).parts[0]} if venv.is_relative_to(box.cwd) else set()
        assert set(listed[str(box.cwd)]) == {Path(name).parts[0] for name in RANK_PACKAGES} | inner


def assert_contained(
    seen: dict[str, Any], deployment: Deployment, listeners: list[socket.socket], box: Sandbox
) -> None:
    refused = {
        name: outcome["error"]
        for name, outcome in seen.items()
        if isinstance(outcome, dict) and outcome.get("ok") is False
    }
    assert SECRET not in json.dumps(seen), "a secret reached the rank"
    for name in (*deployment.secrets, "worker home", "worker environ"):
        assert refused[f"read {name}"] == "ENOENT", name  # not there at all: hidden, not merely forbidden
    assert seen["read bundle"]["value"] == "WIDTH = 512\n" and seen["read data"]["value"] == "images\n"
    writes = json.loads((deployment.run_dir / "plan.json").read_text())["write"]
    assert all(seen[f"write {name}"]["ok"] for name in ("run dir", "tmp", "shm"))
    assert (deployment.run_dir / "mine").read_text() == "pwned\n"
    for name, path in writes.items():
        # Refused, or (a worker without root: the job owns its tmpfs) written where only the job sees it.
        assert name == "run dir" or not Path(path).exists(), f"write {name} reached the host"
    for name in ("project", "bundle", "data", "etc"):
        # A checkout under a folder the sandbox makes private (/tmp in CI) is not there at all: ENOENT.
        hidden = ("ENOENT",) if name == "project" else ()
        assert refused[f"write {name}"] in ("EROFS", "EACCES", *hidden), name
    assert refused["kill worker"] == refused["kill sentinel"] == "ESRCH"  # out of its process table
    assert refused["connect host loopback"] == "ECONNREFUSED"  # its own loopback, where nothing listens
    assert refused["connect host address"] == "ENETUNREACH"
    for server in listeners:
        server.setblocking(False)
        with pytest.raises(BlockingIOError):
            server.accept()
    # EINVAL: in a user namespace uid 0 does not even exist.
    assert refused["setuid 0"] in ("EPERM", "EINVAL") and refused["open /dev/tty"] == "ENXIO"
    assert "CapEff:\t0000000000000000" in seen["status"] and "NoNewPrivs:\t1" in seen["status"]
    assert max(seen["pids"]) < 50  # its own pid namespace: bwrap's init, torchrun, itself
    assert seen["devices"] == [*BWRAP_DEV, "urandom", "zero"]  # no disk, no GPU, no host tty
    assert_sees_only_its_own(seen["listed"], box)
    assert seen["environ"]["HOME"] == str(deployment.run_dir)
    assert seen["fork"]["refused"] == "EAGAIN" and 0 < seen["fork"]["forked"] < LIMITS["job_max_processes"]
    limit = 1 << 20
    assert seen["big file"] == {"written": limit, "refused": "EFBIG"}
    assert (deployment.run_dir / "big").stat().st_size == limit


def test_a_hostile_rank_under_torchrun_reaches_nothing_of_the_worker(
    tmp_path: Path, worker_env: dict[str, str], listeners: list[socket.socket]
) -> None:
    """As this worker launches it: root here, so the job's uid is 65534; a worker without root maps its own
    uid in a user namespace (the next test)."""
    deployment = deploy(tmp_path / "var", **LIMITS)  # type: ignore[arg-type]
    script = deployment.run_dir / HOSTILE.name  # the project's tests are not shown to the job
    shutil.copy(HOSTILE, script)
    rank = [str(script), str(deployment.run_dir / "plan.json"), str(deployment.run_dir / "report.json")]
    command, box, _ = sandboxed_job(deployment, rank, worker_env)
    job_uid = box.run_as if box.run_as is not None else os.geteuid()
    victim = sentinel(job_uid)
    try:
        hostile_plan(deployment, listeners, victim.pid, Path.home())
        process = start(command)
        output, _ = process.communicate(timeout=120)
        assert process.returncode == 0, output.decode(errors="replace")
        seen = json.loads((deployment.run_dir / "report.json").read_text())
        assert_contained(seen, deployment, listeners, box)
        assert seen["uid"] == job_uid and victim.poll() is None
    finally:
        victim.kill()


@pytest.fixture
def unprivileged_var() -> Iterator[Path]:
    """A var/ the Docker image's worker (uid 1000) owns, where it can reach it (pytest's tmp is root's)."""
    root = Path(tempfile.mkdtemp(prefix="trainyard-userns-"))
    root.chmod(0o755)
    yield root / "var"
    shutil.rmtree(root)


@pytest.mark.skipif(os.geteuid() != 0, reason="a worker without root runs the test above in this mode")
def test_a_hostile_rank_of_an_unprivileged_worker_reaches_nothing_either(
    unprivileged_var: Path, worker_env: dict[str, str], listeners: list[socket.socket]
) -> None:
    """The Docker image's case: the worker is uid 1000, so bwrap maps it in a user namespace of the job's and
    the rank's uid on the host is the worker's own. This box's venv lives under /root, out of uid 1000's
    reach, so the rank is the system's python3 started by the sandbox's command directly, not by torchrun."""
    deployment = deploy(unprivileged_var, **LIMITS)  # type: ignore[arg-type]
    home = unprivileged_var.parent / "home"
    home.mkdir()
    (home / ".netrc").write_text(f"machine s3 password {SECRET}\n")
    report = deployment.run_dir / "report.json"
    victim = sentinel(UNPRIVILEGED_UID)
    try:
        plan = hostile_plan(deployment, listeners, victim.pid, home)
        # A copy in the run directory: with nothing shown again, a checkout under /tmp would be hidden.
        script = deployment.run_dir / HOSTILE.name
        shutil.copy(HOSTILE, script)
        rank = ["/usr/bin/python3", str(script), str(plan), str(report)]
        command, box, _ = sandboxed_job(deployment, rank, worker_env)
        box = replace(box, run_as=None, shown=(), cwd=Path("/"))
        subprocess.run(["chown", "-R", str(UNPRIVILEGED_UID), str(unprivileged_var.parent)], check=True)
        worker = [
            "setpriv",
            f"--reuid={UNPRIVILEGED_UID}",
            f"--regid={UNPRIVILEGED_UID}",
            "--clear-groups",
            "--",
        ]
        argv = [*worker, *sandbox_argv(box), *rank]
        done = subprocess.run(argv, env=command.env, capture_output=True, timeout=60, start_new_session=True)
        assert done.returncode == 0, done.stdout + done.stderr
        seen = json.loads(report.read_text())
        assert_contained(seen, deployment, listeners, box)
        assert seen["uid"] == UNPRIVILEGED_UID and victim.poll() is None
    finally:
        victim.kill()


# A rank that stops cleanly on SIGTERM (as the trainer saves its final checkpoint), and before that leaves an
# escapee behind: its own session, no environment (so no job mark), deaf to SIGTERM, its parent gone.
CANCELLED_RANK = """
import os, signal, sys, time
run_dir = sys.argv[1]
if os.fork() == 0:
    os.setsid()
    if os.fork() == 0:
        deaf = "import signal, time; signal.signal(signal.SIGTERM, signal.SIG_IGN); time.sleep(300)"
        os.execve(sys.executable, [sys.executable, "-c", deaf], {})
    os._exit(0)
os.wait()

def stop(signum, frame):
    with open(os.path.join(run_dir, "stopped"), "w") as file:
        file.write("on SIGTERM\\n")
    sys.exit(0)

signal.signal(signal.SIGTERM, stop)
open(os.path.join(run_dir, "ready"), "w").close()
time.sleep(300)
"""


def test_cancel_stops_the_rank_cleanly_and_leaves_no_process_of_the_sandbox(
    tmp_path: Path, worker_env: dict[str, str]
) -> None:
    deployment = deploy(tmp_path / "var")
    script = deployment.run_dir / "rank.py"
    script.write_text(CANCELLED_RANK)
    command, _, mark = sandboxed_job(deployment, [str(script), str(deployment.run_dir)], worker_env)
    process = start(command)
    deadline = time.monotonic() + 60
    while not (deployment.run_dir / "ready").exists():
        assert process.poll() is None and time.monotonic() < deadline, process.communicate()[0]
        time.sleep(0.1)
    sandbox = psutil.Process(process.pid).children(recursive=True)
    unmarked = [p for p in sandbox if p.environ() == {}]
    assert len(unmarked) == 1 and not mark.matches(unmarked[0].environ())  # the job mark cannot find it

    survivors = kill_job(mark, grace_s=5, group=process.pid)  # as the supervisor stops a cancelled job
    process.wait(timeout=10)
    assert survivors == []
    assert (deployment.run_dir / "stopped").read_text() == "on SIGTERM\n"  # bwrap let the SIGTERM through
    left = [p for p in sandbox if p.is_running() and p.status() != psutil.STATUS_ZOMBIE]
    assert left == [], f"left behind: {[p.cmdline() for p in left]}"
