"""All settings, from TRAINYARD_* environment variables. Built on first use so tests can override them."""

from __future__ import annotations

import socket
from enum import StrEnum
from functools import lru_cache
from pathlib import Path

from pydantic import Field, field_validator
from pydantic_settings import BaseSettings, SettingsConfigDict

VAR_DIR = Path("var")


class AuthMode(StrEnum):
    ON = "on"
    OFF = "off"


class Settings(BaseSettings):
    model_config = SettingsConfigDict(env_prefix="TRAINYARD_", extra="ignore")

    database_url: str = f"sqlite:///{VAR_DIR}/trainyard.db"
    broker_url: str = f"sqla+sqlite:///{VAR_DIR}/broker.db"
    runs_dir: Path = VAR_DIR / "runs"
    data_dir: Path = VAR_DIR / "data"
    host: str = "127.0.0.1"
    port: int = Field(8000, ge=1, le=65535)
    hostname: str = Field(default_factory=socket.gethostname, description="this worker's host identity")
    worker_concurrency: int = Field(4, ge=1, le=256, description="jobs one worker supervises at once")
    heartbeat_s: float = Field(2.0, gt=0, le=300)
    lease_timeout_s: float = Field(30.0, gt=0, le=3600, description="older heartbeat: reaped")
    requeue_after_s: float = Field(10.0, gt=0, le=3600, description="re-ring the doorbell for queued jobs")
    cancel_grace_s: float = Field(10.0, ge=0, le=300, description="SIGTERM to SIGKILL")
    auth: AuthMode = Field(
        AuthMode.OFF, description="on: every route but /healthz needs a bearer API key (docker-compose)"
    )
    quota_max_jobs: int = Field(32, ge=1, le=100_000, description="a user's queued and active jobs")
    quota_max_gpus: int = Field(64, ge=0, le=100_000, description="GPUs a user's unfinished jobs ask for")
    quota_retry_after_s: int = Field(30, ge=1, le=86400, description="Retry-After of a 429 over quota")
    gpu_inventory: str | None = Field(
        None, description="test only: comma-separated fake GPU ids that replace NVML discovery"
    )

    @field_validator("runs_dir", "data_dir")
    @classmethod
    def absolute(cls, path: Path) -> Path:
        return path.resolve()

    @property
    def is_sqlite(self) -> bool:
        return self.database_url.startswith("sqlite")


@lru_cache
def get_settings() -> Settings:
    return Settings()
