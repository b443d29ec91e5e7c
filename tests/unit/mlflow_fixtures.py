"""A real MLflow tracking server on loopback (`mlflow server`, SQLite backend, artifacts served), started on
a port fixed up front, so a stack can be told its URI before it runs, and stopped and started again on the
same database, as a server that goes away and comes back."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

from tests.integration.servers import free_port, local_get, wait_for

# The server's own checks: no usage data sent out, no job runners it would start for GenAI features.
SERVER_ENV = {"MLFLOW_DISABLE_TELEMETRY": "true", "MLFLOW_SERVER_ENABLE_JOB_EXECUTION": "false"}
START_TIMEOUT_S = 90.0


@dataclass
class MlflowServer:
    root: Path
    port: int
    proc: subprocess.Popen[bytes] | None = None

    @classmethod
    def at_free_port(cls, root: Path) -> MlflowServer:
        root.mkdir(parents=True, exist_ok=True)
        return cls(root, free_port())

    @property
    def uri(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    @property
    def running(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def start(self) -> MlflowServer:
        argv = [
            *(sys.executable, "-m", "mlflow", "server", "--host", "127.0.0.1", "--port", str(self.port)),
            *("--backend-store-uri", f"sqlite:///{self.root / 'mlflow.db'}", "--workers", "1"),
            *("--artifacts-destination", str(self.root / "artifacts")),
        ]
        log = (self.root / "server.log").open("ab")
        # A session of its own: the server runs uvicorn in a child, and stop() ends both.
        self.proc = subprocess.Popen(
            argv,
            cwd=self.root,
            env={**os.environ, **SERVER_ENV},
            stdout=log,
            stderr=log,
            start_new_session=True,
        )
        wait_for(self._healthy, START_TIMEOUT_S, f"mlflow server (log: {self.root / 'server.log'})")
        return self

    def _healthy(self) -> bool:
        if not self.running:
            raise RuntimeError(f"mlflow server exited; see {self.root / 'server.log'}")
        return local_get(f"{self.uri}/health").status_code == 200

    def stop(self) -> None:
        if self.proc is None or not self.running:
            return
        os.killpg(self.proc.pid, signal.SIGTERM)
        try:
            self.proc.wait(15)
        except subprocess.TimeoutExpired:
            os.killpg(self.proc.pid, signal.SIGKILL)
            self.proc.wait()
