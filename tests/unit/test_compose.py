"""docker-compose.yml and the Dockerfile, checked without a Docker engine: every command they run exists in
this repository, every TRAINYARD_* variable is a real setting, and the services wait for what they need.

The commands themselves (alembic upgrade, python -m app.serve, python -m worker) are what
tests/integration/servers.py's Stack runs for every integration test, on SQLite and on PostgreSQL + Redis.
"""

from __future__ import annotations

import argparse
import copy
import fnmatch
import importlib
import importlib.util
import json
import re
import shlex
import subprocess
import sys
from importlib import metadata
from pathlib import Path
from typing import Any

import pytest
import yaml
from packaging.specifiers import SpecifierSet

from app.main import app
from app.serve import uvicorn_config
from core.config import AuthMode, Settings
from deploy.compose_check_config import for_check

ROOT = Path(__file__).resolve().parents[2]
PREFIX = "TRAINYARD_"
API_COMMAND = ["python", "-m", "app.serve"]
# ${NAME}, ${NAME:-default} and ${NAME:?error}: what compose substitutes from the shell or .env.
INTERPOLATION = re.compile(r"\$\{([A-Z_][A-Z0-9_]*)(?::?([-?])([^}]*))?\}")


@pytest.fixture(scope="module")
def compose() -> dict[str, Any]:
    loaded: dict[str, Any] = yaml.safe_load((ROOT / "docker-compose.yml").read_text())
    return loaded


@pytest.fixture(scope="module")
def services(compose: dict[str, Any]) -> dict[str, Any]:
    found: dict[str, Any] = compose["services"]
    return found


def interpolate(value: str, variables: dict[str, str] | None = None) -> str:
    """As compose would with `variables` set and nothing else: defaults apply, a required one stays <NAME>."""

    def substitute(match: re.Match[str]) -> str:
        name, operator, default = match.groups()
        if variables and name in variables:
            return variables[name]
        return default if operator == "-" else f"<{name}>"

    return INTERPOLATION.sub(substitute, value)


def assert_runnable(argv: list[str]) -> None:
    """The command names something this project installs: its own module, or a dependency's script."""
    program, *args = argv
    if program == "python":
        assert args[0] == "-m"
        module = importlib.util.find_spec(args[1])
        assert module is not None, argv
        if module.submodule_search_locations is not None:  # a package runs its __main__
            assert importlib.util.find_spec(f"{args[1]}.__main__") is not None, argv
    elif program == "alembic":
        assert args[:2] == ["-c", "migrations/alembic.ini"] and args[2:] == ["upgrade", "head"], argv
        assert (ROOT / args[1]).is_file()
        assert importlib.util.find_spec("alembic") is not None
    else:
        raise AssertionError(f"unexpected program in {argv}")


def test_services_and_their_order(services: dict[str, Any]) -> None:
    assert set(services) == {"postgres", "redis", "migrate", "api", "worker"}
    assert services["migrate"]["restart"] == "no"
    for name in ("api", "worker"):
        needs = services[name]["depends_on"]
        assert needs["migrate"] == {"condition": "service_completed_successfully"}
        assert needs["redis"] == {"condition": "service_healthy"}
    assert services["migrate"]["depends_on"]["postgres"] == {"condition": "service_healthy"}


def test_commands_exist(services: dict[str, Any]) -> None:
    assert services["migrate"]["command"] == ["alembic", "-c", "migrations/alembic.ini", "upgrade", "head"]
    assert services["api"]["command"] == API_COMMAND
    assert services["worker"]["command"] == ["python", "-m", "worker"]
    for name in ("migrate", "api", "worker"):
        assert services[name]["image"] == "trainyard:latest" and services[name]["build"] == "."
        assert_runnable(services[name]["command"])


def test_api_port_and_healthcheck(services: dict[str, Any]) -> None:
    api = services["api"]
    image_env = dict(
        variable.split("=", 1)
        for kind, rest in dockerfile_instructions()
        if kind == "ENV"
        for variable in rest.split()
    )
    env = {**image_env, **{name: interpolate(value) for name, value in api["environment"].items()}}
    settings = Settings(**{k[len(PREFIX) :].lower(): v for k, v in env.items() if k.startswith(PREFIX)})
    config = uvicorn_config(settings)
    assert config.host == "0.0.0.0"
    port = str(config.port)
    assert [interpolate(p).split(":")[1:] for p in api["ports"]] == [[port, port]]
    probe = " ".join(api["healthcheck"]["test"])
    assert f"http://127.0.0.1:{port}/healthz" in probe
    assert "/healthz" in app.openapi()["paths"]
    module, _, attr = config.app.partition(":")
    assert getattr(importlib.import_module(module), attr) is app


def test_every_recipe_starts_the_api_through_app_serve() -> None:
    """Where the limits of the settings are applied and the real auth mode is printed (app/serve.py)."""
    makefile = (ROOT / "Makefile").read_text()
    run = makefile[makefile.index("\nrun:") : makefile.index("\n\n", makefile.index("\nrun:"))]
    assert "$(PY) -m app.serve" in run and "uvicorn" not in run
    assert "auth o" not in run, "the API's banner says the auth mode; a fixed one in the Makefile may lie"
    commands = [json.loads(rest) for kind, rest in dockerfile_instructions() if kind == "CMD"]
    assert commands == [API_COMMAND]


def test_environment_names_are_settings(services: dict[str, Any]) -> None:
    fields = set(Settings.model_fields)
    for name, service in services.items():
        for variable, value in service.get("environment", {}).items():
            if variable.startswith(PREFIX):
                assert variable[len(PREFIX) :].lower() in fields, f"{name}: {variable} is no setting"
                assert isinstance(value, str), f"{name}: quote {variable} so YAML keeps it a string"
    assert AuthMode(services["api"]["environment"]["TRAINYARD_AUTH"]) is AuthMode.ON


def test_urls_reach_the_postgres_and_redis_services(services: dict[str, Any]) -> None:
    secrets = {"POSTGRES_PASSWORD": "pw1", "REDIS_PASSWORD": "pw2"}
    env = {k: interpolate(v, secrets) for k, v in services["worker"]["environment"].items()}
    postgres = {k: interpolate(v, secrets) for k, v in services["postgres"]["environment"].items()}
    user, db = postgres["POSTGRES_USER"], postgres["POSTGRES_DB"]
    assert env["TRAINYARD_DATABASE_URL"] == f"postgresql+psycopg://{user}:pw1@postgres:5432/{db}"
    assert env["TRAINYARD_BROKER_URL"] == "redis://:pw2@redis:6379/0"
    settings = Settings(**{k[len(PREFIX) :].lower(): v for k, v in env.items()})
    assert not settings.is_sqlite and settings.auth is AuthMode.ON


def test_healthchecks_and_volumes(compose: dict[str, Any], services: dict[str, Any]) -> None:
    assert services["postgres"]["healthcheck"]["test"][:2] == ["CMD", "pg_isready"]
    assert "pgdata:/var/lib/postgresql/data" in services["postgres"]["volumes"]
    assert "ping" in " ".join(services["redis"]["healthcheck"]["test"])
    settings_dirs = {services["worker"]["environment"][f"{PREFIX}{d}"] for d in ("RUNS_DIR", "DATA_DIR")}
    for name in ("api", "worker"):
        mounted = {interpolate(volume).split(":")[1] for volume in services[name]["volumes"]}
        assert settings_dirs <= mounted, f"{name} must see the runs and data the settings name"
    assert {"pgdata", "runs", "data"} <= set(compose["volumes"])


def test_worker_reserves_every_gpu(services: dict[str, Any]) -> None:
    devices = services["worker"]["deploy"]["resources"]["reservations"]["devices"]
    assert devices == [{"driver": "nvidia", "count": "all", "capabilities": ["gpu"]}]
    assert services["worker"]["ipc"] == "host"


def dockerfile_instructions() -> list[tuple[str, str]]:
    text = (ROOT / "Dockerfile").read_text().replace("\\\n", " ")
    lines = [line.strip() for line in text.splitlines() if line.strip()[:1] not in ("", "#")]
    return [(kind.upper(), rest.strip()) for kind, _, rest in (line.partition(" ") for line in lines)]


def test_dockerfile_runs_the_api_and_ships_what_compose_runs() -> None:
    instructions = dockerfile_instructions()
    assert next(rest for kind, rest in instructions if kind == "FROM") == "${BASE_IMAGE}"
    # A build with no --build-arg gets the CUDA base; deploy/compose_check.sh passes one made from Debian.
    args = dict(rest.split("=", 1) for kind, rest in instructions if kind == "ARG")
    assert re.fullmatch(r"pytorch/pytorch:2\.\d+\.\d+-cuda12\.\d+-cudnn9-runtime", args["BASE_IMAGE"])
    commands = [json.loads(rest) for kind, rest in instructions if kind in ("CMD", "ENTRYPOINT")]
    assert commands and all(isinstance(c, list) for c in commands), "exec form, so signals reach the process"
    for command in commands:
        assert_runnable(command)
    ignored = [
        line for line in (ROOT / ".dockerignore").read_text().splitlines() if line[:1] not in ("", "#")
    ]
    shipped = ("pyproject.toml", "app/main.py", "app/web/index.html", "worker/__main__.py", "trainers/run.py")
    for needed in (*shipped, "migrations/alembic.ini", "migrations/env.py"):
        assert (ROOT / needed).exists()
        assert not any(fnmatch.fnmatch(needed, p) or needed.startswith(f"{p}/") for p in ignored), needed
    for unwanted in (".venv", ".git", "var"):
        assert unwanted in ignored


def test_the_image_has_the_c_compiler_that_performance_compile_needs() -> None:
    """Inductor and Triton compile C launchers at a compiled job's first step; the runtime base has none."""
    installs = [
        rest.split()
        for kind, rest in dockerfile_instructions()
        if kind == "RUN" and "apt-get install" in rest
    ]
    packages = {word for words in installs for word in words if not word.startswith("-")}
    assert {"gcc", "libc6-dev"} <= packages, packages


def test_no_service_of_the_image_runs_as_root(services: dict[str, Any]) -> None:
    """The API and the worker read files that jobs wrote: as root, a link a job planted could reach any file
    of the box (docs/security.md)."""
    users = [rest for kind, rest in dockerfile_instructions() if kind == "USER"]
    assert users and users[-1] not in ("root", "0")
    assert services["api"]["user"] == users[-1]
    for name, service in services.items():
        if service.get("image") == "trainyard:latest":
            assert service.get("user", users[-1]) not in ("root", "0"), name


def test_compose_check_changes_only_what_needs_a_gpu_or_a_registry(compose: dict[str, Any]) -> None:
    """`make compose-check` (deploy/compose_check.sh) runs the shipped commands, users, healthchecks and
    volumes; it may only swap images, drop the GPU reservation and what docker-compose 1.x cannot pass on,
    and move published ports; and lower memlock only where the engine could not raise it."""
    shipped = copy.deepcopy(compose)
    for service in shipped["services"].values():
        if "build" in service:  # as `docker-compose config` resolves it
            service["build"] = {"context": service["build"]}
    images = {"base": "b", "image": "t", "postgres": "p", "redis": "r"}
    args = argparse.Namespace(api_port=18000, memlock_ceiling=None, **images)
    checked = for_check(copy.deepcopy(shipped), args)
    swapped = {"image", "build", "ports", "deploy", "security_opt"}
    for name, service in shipped["services"].items():
        kept = {key: value for key, value in service.items() if key not in swapped}
        assert {key: value for key, value in checked["services"][name].items() if key not in swapped} == kept
    assert checked["services"]["api"]["ports"] == ["127.0.0.1:18000:8000"]
    assert checked["services"]["worker"]["security_opt"] == ["seccomp=unconfined", "apparmor=unconfined"]
    assert {checked["services"][name]["image"] for name in ("migrate", "api", "worker")} == {"t"}


def test_the_torch_pins_match_what_pip_sees_installed() -> None:
    """The Dockerfile pins the base's torch and torchvision; a wheel from PyPI says 2.14.1+cu130 in its
    __version__ while pip knows it as 2.14.1, so pins read from there match nothing and the build stops."""
    command = next(rest for kind, rest in dockerfile_instructions() if kind == "RUN" and "torch-pins" in rest)
    words = shlex.split(command)
    code = words[words.index("python") + 2]
    printed = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    pins = dict(line.split("==") for line in printed.splitlines())
    assert set(pins) == {"torch", "torchvision"}
    for name, pinned in pins.items():
        assert SpecifierSet(f"=={pinned}").contains(metadata.version(name)), (name, pinned)
