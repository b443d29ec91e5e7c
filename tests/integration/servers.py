"""Real servers on loopback for integration tests: redis-server, PostgreSQL, uvicorn and a Celery worker."""

from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import httpx
import psutil
import sqlalchemy

from core.secrets import new_key
from worker.executors.local.warm.factory_handle import FACTORY_MODULE

ROOT = Path(__file__).resolve().parents[2]
PG_BIN = Path("/usr/lib/postgresql/15/bin")


# One TLS context for the clients the tests make: a new httpx client loads the CA bundle otherwise, tens of
# milliseconds of CPU, which polling a server that is starting paid every 0.2 s.
LOCAL_TLS = httpx.create_ssl_context()


def local_get(url: str) -> httpx.Response:
    return httpx.get(url, timeout=2, verify=LOCAL_TLS)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def wait_for(check: Callable[[], bool], timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            if check():
                return
        except Exception:  # the server is not up yet: any error means "try again"
            pass
        time.sleep(0.2)
    raise TimeoutError(f"{what} not ready after {timeout:.0f}s")


def terminate(*procs: subprocess.Popen[bytes]) -> list[subprocess.Popen[bytes]]:
    """SIGTERM to each one still running, all at once (a worker's warm shutdown takes seconds); those told."""
    running = [proc for proc in procs if proc.poll() is None]
    for proc in running:
        proc.send_signal(signal.SIGTERM)
    return running


def await_exit(procs: list[subprocess.Popen[bytes]], grace: float = 15.0) -> None:
    """Wait for processes already told to stop; SIGKILL to any still running after the grace."""
    deadline = time.monotonic() + grace
    for proc in procs:
        try:
            proc.wait(max(0.0, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


def stop(*procs: subprocess.Popen[bytes], grace: float = 15.0) -> None:
    await_exit(terminate(*procs), grace)


@dataclass
class Redis:
    port: int
    workdir: Path
    proc: subprocess.Popen[bytes] | None = None
    counter: int = 0

    def new_url(self) -> str:
        """A database number of its own per stack, so no stack ever hears another's doorbell."""
        self.counter += 1
        return f"redis://127.0.0.1:{self.port}/{self.counter}"

    @classmethod
    def start(cls, workdir: Path) -> Redis:
        server = cls(free_port(), workdir)
        server.launch()
        return server

    def launch(self) -> None:
        argv = ["redis-server", "--port", str(self.port), "--bind", "127.0.0.1", "--save", "", "--dir"]
        self.proc = subprocess.Popen(
            [*argv, str(self.workdir)], stdout=subprocess.DEVNULL, stderr=subprocess.STDOUT
        )
        wait_for(lambda: socket.create_connection(("127.0.0.1", self.port), 1).close() is None, 20, "redis")

    def stop(self) -> None:
        if self.proc is not None:
            stop(self.proc)

    def restart(self) -> None:
        """On the same port, empty (no persistence): what the clients see as the broker going away."""
        self.stop()
        self.launch()


def as_postgres() -> list[str]:
    """The prefix that runs a PostgreSQL command as the postgres user, which the server needs under root."""
    return ["runuser", "-u", "postgres", "--"] if os.geteuid() == 0 else []


@dataclass
class Postgres:
    """A throwaway cluster; its server refuses to run as root, so it runs as the postgres user."""

    workdir: Path
    datadir: Path
    port: int
    counter: int = 0

    @classmethod
    def start(cls) -> Postgres:
        # Not under pytest's tmp dir: that is root-only, and the server runs as postgres.
        workdir = Path(tempfile.mkdtemp(prefix="trainyard-pg-"))
        workdir.chmod(0o755)
        if os.geteuid() == 0:
            shutil.chown(workdir, "postgres")
        datadir = workdir / "data"
        as_pg = as_postgres()
        subprocess.run(
            [*as_pg, str(PG_BIN / "initdb"), "-A", "trust", "-U", "postgres", "-D", str(datadir)],
            check=True,
            capture_output=True,
        )
        port = free_port()
        opts = f"-p {port} -k {workdir} -c listen_addresses=127.0.0.1 -c fsync=off"
        subprocess.run(
            [
                *as_pg,
                str(PG_BIN / "pg_ctl"),
                "-D",
                str(datadir),
                "-o",
                opts,
                "-w",
                "-l",
                str(workdir / "log"),
                "start",
            ],
            check=True,
            capture_output=True,
        )
        return cls(workdir, datadir, port)

    def new_database(self) -> str:
        import psycopg

        self.counter += 1
        name = f"trainyard_{self.counter}"
        with psycopg.connect(f"host=127.0.0.1 port={self.port} user=postgres", autocommit=True) as conn:
            conn.execute(f"CREATE DATABASE {name}")
        return f"postgresql+psycopg://postgres@127.0.0.1:{self.port}/{name}"

    def restart(self) -> None:
        """As after a crash: every connection cut at once (immediate mode), then the server recovers from its
        log and takes connections again, with the options it was started with (postmaster.opts)."""
        pg_ctl = [
            *as_postgres(),
            str(PG_BIN / "pg_ctl"),
            "-D",
            str(self.datadir),
            "-l",
            str(self.workdir / "log"),
        ]
        subprocess.run([*pg_ctl, "-m", "immediate", "-w", "restart"], check=True, capture_output=True)

    def stop(self) -> None:
        as_pg = as_postgres()
        subprocess.run(
            [*as_pg, str(PG_BIN / "pg_ctl"), "-D", str(self.datadir), "-m", "fast", "stop"],
            capture_output=True,
        )
        shutil.rmtree(self.workdir, ignore_errors=True)


# A lease short enough that a worker or host gone quiet is noticed within seconds, with beats often enough
# that a busy box's late one does not lose a live worker its jobs.
SHORT_LEASE = {"TRAINYARD_LEASE_TIMEOUT_S": "4", "TRAINYARD_HEARTBEAT_S": "0.5"}


WARM_WAIT_S = 60


def standby_forked(worker_pid: int) -> bool:
    """Whether the worker's standby factory has forked a standby, which it does once it has its imports."""
    try:
        for process in psutil.Process(worker_pid).children(recursive=True):
            parent = process.parent()
            if parent is not None and all(FACTORY_MODULE in p.cmdline() for p in (process, parent)):
                return True
    except psutil.Error:
        return False
    return False


@dataclass
class Stack:
    """Trainyard as `make run` starts it: migrations, then the API (uvicorn through app.serve) and a real
    Celery worker."""

    env: dict[str, str]
    workdir: Path
    url: str = ""
    api_env: dict[str, str] = field(
        default_factory=dict
    )  # the API's own, as on a host apart from the workers
    procs: dict[str, subprocess.Popen[bytes]] = field(default_factory=dict)

    @classmethod
    def start(
        cls,
        workdir: Path,
        database_url: str,
        broker_url: str,
        api_env: dict[str, str] | None = None,
        **extra_env: str,
    ) -> Stack:
        env = {
            **os.environ,
            "TRAINYARD_DATABASE_URL": database_url,
            "TRAINYARD_BROKER_URL": broker_url,
            "TRAINYARD_RUNS_DIR": str(workdir / "runs"),
            "TRAINYARD_DATA_DIR": str(workdir / "data"),
            "TRAINYARD_CODE_DIR": str(workdir / "code"),
            "TRAINYARD_COMPILE_CACHE_DIR": str(workdir / "compile-cache"),
            # Each beat wakes the worker for a pass over the database: every stack alive through a part of
            # `make test` paid it twice a second. A lease of seconds beats faster (SHORT_LEASE).
            "TRAINYARD_HEARTBEAT_S": "1",
            "TRAINYARD_REQUEUE_AFTER_S": "3",
            # A cancelled sandboxed rank's final checkpoint must come within it while the other parts of
            # `make test` loads both cores (tests/parts.py): 5 s ran out once.
            "TRAINYARD_CANCEL_GRACE_S": "15",
            # Tests run tiny CPU jobs side by side on a CI box of two cores, as they did before CPU
            # accounting: without it they would queue one behind another into their timeouts.
            "TRAINYARD_CPU_OVERCOMMIT": "4",
            "TRAINYARD_WEBHOOK_ALLOW": "127.0.0.1",  # tests' webhook receivers listen on loopback
            # A forecaster process per API process, importing torch: on where a test asks for it
            # (tests/integration/test_forecast.py), off elsewhere, whose jobs it would only delay.
            "TRAINYARD_FORECAST": "off",
            "TRAINYARD_SECRETS_KEY": new_key(),  # one for the API and the workers of this stack
            "CUDA_VISIBLE_DEVICES": "",
            **extra_env,
        }
        stack = cls(env, workdir, api_env=api_env or {})
        alembic = [sys.executable, "-m", "alembic", "-c", "migrations/alembic.ini", "upgrade", "head"]
        subprocess.run(alembic, cwd=ROOT, env=env, check=True, capture_output=True)
        stack._spawn_api()
        stack.start_worker()  # while the API starts: neither needs the other to come up
        stack._wait_api()
        return stack

    @classmethod
    def embedded(cls, workdir: Path, api_env: dict[str, str] | None = None, **extra_env: str) -> Stack:
        """The `make run` default: SQLite in WAL mode as the database and as the broker, no server."""
        return cls.start(
            workdir,
            f"sqlite:///{workdir}/trainyard.db",
            f"sqla+sqlite:///{workdir}/broker.db",
            api_env,
            **extra_env,
        )

    def _spawn(self, name: str, argv: list[str], env: dict[str, str] | None = None, cwd: Path = ROOT) -> None:
        log = (self.workdir / f"{name}.log").open("ab")
        self.procs[name] = subprocess.Popen(
            argv, cwd=cwd, env={**self.env, **(env or {})}, stdout=log, stderr=subprocess.STDOUT
        )

    def start_api(self) -> None:
        self._spawn_api()
        self._wait_api()

    def _spawn_api(self) -> None:
        port = free_port()
        self.url = f"http://127.0.0.1:{port}"
        where = {"TRAINYARD_HOST": "127.0.0.1", "TRAINYARD_PORT": str(port)}
        # In its own folder: the API writes var/api-url where it runs, which must not be the checkout's, where
        # a developer's `make run` and the CLI look for it.
        self._spawn("api", [sys.executable, "-m", "app.serve"], {**self.api_env, **where}, self.workdir)

    def _wait_api(self) -> None:
        wait_for(lambda: local_get(f"{self.url}/healthz").status_code == 200, 60, "api")

    def start_worker(self, name: str = "worker", **env: str) -> None:
        """Several workers may run side by side under different names, as on several GPU hosts; `env` gives
        one its own settings (TRAINYARD_HOSTNAME: a host identity of its own)."""
        registered = self.sql("SELECT count(*) FROM workers")
        self._spawn(name, [sys.executable, "-m", "worker"], env)
        if {**self.env, **env}.get("TRAINYARD_EXECUTOR") == "slurm":
            # It registers no host (Slurm has the nodes): Celery's own line says it takes doorbells.
            wait_for(lambda: " ready." in self.log(name), 90, name)
            return
        # A worker announces itself (and its GPUs, none here) in the workers table with its first heartbeat.
        wait_for(lambda: self.sql("SELECT count(*) FROM workers") > registered, 90, name)
        self._wait_warm(self.procs[name])

    @staticmethod
    def _wait_warm(worker: subprocess.Popen[bytes]) -> None:
        """Until its standby factory has its imports, a job the worker starts runs cold, each rank importing
        torch itself: on two cores, seconds of CPU a job more than waiting here for the factory's first
        standby. Not an assertion: a test of the worker's start itself says what it expects."""
        deadline = time.monotonic() + WARM_WAIT_S
        while time.monotonic() < deadline and worker.poll() is None and not standby_forked(worker.pid):
            time.sleep(0.2)

    def sql(self, query: str) -> int:
        """One number straight from the database, for what the API does not show."""
        engine = sqlalchemy.create_engine(self.env["TRAINYARD_DATABASE_URL"])
        try:
            with engine.connect() as conn:
                return int(conn.execute(sqlalchemy.text(query)).scalar_one())
        finally:
            engine.dispose()

    def admin_key(self, user: str = "root") -> str:
        """An admin key made as an operator makes the first one: `python -m core.keys` on the server."""
        argv = [sys.executable, "-m", "core.keys", "create", "--user", user, "--admin"]
        made = subprocess.run(argv, cwd=ROOT, env=self.env, capture_output=True, text=True, timeout=60)
        assert made.returncode == 0, made.stderr
        return made.stdout.strip()

    def client(self) -> httpx.Client:
        return httpx.Client(base_url=self.url, timeout=30, verify=LOCAL_TLS)

    def log(self, name: str) -> str:
        return (self.workdir / f"{name}.log").read_text(errors="replace")

    def stop(self) -> None:
        stop(*self.procs.values())

    def terminate(self) -> list[subprocess.Popen[bytes]]:
        """Tell every process to stop without waiting for them; the ones told, for `await_exit`."""
        return terminate(*self.procs.values())
