"""The soak's service, started as the integration tests start theirs (tests/integration/servers.py): the
embedded default (SQLite as database and broker) or PostgreSQL + Redis, with auth on, two API processes, an
MLflow tracking server; and the means to SIGKILL each kind of process it runs and bring it back."""

from __future__ import annotations

import contextlib
import random
import signal
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from enum import StrEnum
from pathlib import Path
from typing import Any

import psutil
import sqlalchemy

from bench.soak.processes import Tracker, api_processes, waiting_standbys
from core.config import Settings
from tests.integration.jobs import rank_processes
from tests.integration.servers import Postgres, Redis, Stack, await_exit
from tests.unit.mlflow_fixtures import MlflowServer


class Db(StrEnum):
    SQLITE = "sqlite"  # the embedded default: SQLite in WAL mode, the SQLAlchemy broker on SQLite
    POSTGRES = "postgres"  # PostgreSQL, and Redis as the broker


class Target(StrEnum):
    API = "api"  # one of the API's processes; uvicorn's supervisor starts another
    WORKER = "worker"  # the Celery worker, started again at once
    RANK = "rank"  # a rank of a running job, which restarts from its checkpoint
    STANDBY = "standby"  # a warm standby waiting for a job
    REDIS = "redis"  # the broker, started again empty on its port
    POSTGRES = "postgres"  # the database, restarted in immediate mode (as after a crash)


SETTINGS = {
    "TRAINYARD_AUTH": "on",
    "TRAINYARD_LOG_LEVEL": "warning",  # as `make run`: no line per request
    "TRAINYARD_API_WORKERS": "2",  # a killed API process leaves the other serving while it is replaced
    "TRAINYARD_WARM_STANDBYS": "2",
    # A killed worker's jobs are requeued within seconds of its replacement's start, as in
    # tests/integration/test_faults_worker.py, yet a heartbeat late on the busy box is not taken for death.
    "TRAINYARD_LEASE_TIMEOUT_S": "10",
}


@dataclass(frozen=True)
class Killed:
    pid: int
    detail: str


@dataclass
class SoakStack:
    stack: Stack
    db: Db
    mlflow: MlflowServer
    redis: Redis | None = None
    postgres: Postgres | None = None
    engine: sqlalchemy.Engine = field(init=False)
    tracker: Tracker = field(init=False)

    def __post_init__(self) -> None:
        self.engine = sqlalchemy.create_engine(self.stack.env["TRAINYARD_DATABASE_URL"], pool_pre_ping=True)
        self.tracker = Tracker(self._roots, self.runs_dir)
        self.tracker.start()

    @classmethod
    def start(cls, db: Db, workdir: Path, rank_nice: int | None) -> SoakStack:
        (workdir / "stack").mkdir(parents=True)
        # The servers started so far are stopped if a later one fails; the pool, left first, waits for MLflow.
        with contextlib.ExitStack() as undo, ThreadPoolExecutor(1) as pool:
            mlflow = MlflowServer.at_free_port(workdir / "mlflow")
            undo.callback(mlflow.stop)
            # MLflow's start (seconds of imports) and the service's overlap: the service first talks to it
            # when a tracked job runs, after the soak's start.
            mlflow_up = pool.submit(mlflow.start)
            nice = Settings.model_fields["rank_nice"].default if rank_nice is None else rank_nice
            settings = {**SETTINGS, "TRAINYARD_MLFLOW_URI": mlflow.uri, "TRAINYARD_RANK_NICE": str(nice)}
            redis = postgres = None
            if db is Db.SQLITE:
                stack = Stack.embedded(workdir / "stack", None, **settings)
            else:
                redis = Redis.start(workdir)
                undo.callback(redis.stop)
                postgres = Postgres.start()
                undo.callback(postgres.stop)
                database = postgres.new_database()
                stack = Stack.start(workdir / "stack", database, redis.new_url(), None, **settings)
            undo.callback(stack.stop)
            mlflow_up.result()
            undo.pop_all()
        return cls(stack, db, mlflow, redis, postgres)

    @property
    def runs_dir(self) -> Path:
        return Path(self.stack.env["TRAINYARD_RUNS_DIR"])

    def targets(self) -> tuple[Target, ...]:
        if self.db is Db.SQLITE:
            return (Target.API, Target.WORKER, Target.RANK, Target.STANDBY)
        return tuple(Target)

    def rows(self, query: str | sqlalchemy.Executable, **params: Any) -> list[sqlalchemy.Row[Any]]:
        """Rows straight from the database; a query built on core.models' tables reads typed values (SQLite
        keeps times and JSON as text)."""
        statement = sqlalchemy.text(query) if isinstance(query, str) else query
        with self.engine.connect() as conn:
            return list(conn.execute(statement, params))

    def _roots(self) -> list[int]:
        servers = [self.mlflow.proc, self.redis.proc if self.redis else None]
        procs = [*self.stack.procs.values(), *(proc for proc in servers if proc is not None)]
        pids = [proc.pid for proc in procs if proc.poll() is None]
        # pg_ctl's server is a daemon: its pid is in its data directory while it runs.
        postmaster = self.postgres.datadir / "postmaster.pid" if self.postgres else None
        if postmaster is not None and postmaster.exists():
            pids.append(int(postmaster.read_text().split()[0]))
        return pids

    def kill(self, target: Target, rng: random.Random) -> Killed | None:
        """SIGKILL one process of the kind (PostgreSQL: a restart in immediate mode); None when none runs
        now (no job is running, every standby is busy)."""
        self.tracker.snapshot()  # the victim's children, before they lose their parent
        if target is Target.API:
            return _kill_one(api_processes(self.stack.procs["api"].pid), rng, "an API process")
        if target is Target.WORKER:
            worker = self.stack.procs["worker"]
            worker.kill()
            worker.wait()
            self.stack.start_worker()
            return Killed(worker.pid, "the worker, started again")
        if target is Target.RANK:
            running = [row.id for row in self.rows("SELECT id FROM jobs WHERE status = 'running'")]
            if not running:
                return None
            job_id = rng.choice(running)
            ranks = [found[0] for rank in (0, 1) if (found := rank_processes(self.runs_dir, job_id, rank))]
            return _kill_one(ranks, rng, f"a rank of job {job_id}")
        if target is Target.STANDBY:
            return _kill_one(waiting_standbys(self.runs_dir, self.tracker), rng, "a waiting standby")
        if target is Target.REDIS and self.redis is not None and self.redis.proc is not None:
            pid = self.redis.proc.pid
            self.redis.proc.kill()
            self.redis.proc.wait()
            self.redis.launch()
            return Killed(pid, "redis-server, started again empty")
        if target is Target.POSTGRES and self.postgres is not None:
            pid = self._roots()[-1]
            self.postgres.restart()
            return Killed(pid, "PostgreSQL, restarted in immediate mode")
        raise ValueError(f"target {target!r}: this stack has none; its targets are {self.targets()}")

    def stop(self) -> None:
        self.engine.dispose()
        told = self.stack.terminate()  # their shutdowns take seconds: MLflow stops meanwhile
        self.mlflow.stop()
        await_exit(told)
        for server in (self.redis, self.postgres):
            if server is not None:
                server.stop()
        self.tracker.stop()


def _kill_one(procs: list[psutil.Process], rng: random.Random, what: str) -> Killed | None:
    if not procs:
        return None
    victim = rng.choice(procs)
    try:
        victim.send_signal(signal.SIGKILL)
    except psutil.NoSuchProcess:
        return None
    return Killed(victim.pid, what)
