"""Which API the CLI talks to: --url, then TRAINYARD_URL, then var/api-url (written by `make run`) in the
current folder or one above it, then the default; an unreachable one is named with where it came from, and the
default, which nobody chose, is said to be one."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
from click.testing import CliRunner

from app.cli import api_url, cli
from app.cli.api_url import ApiUrl, find_api_url
from app.client import DEFAULT_URL

# Nothing listens on port 9 (discard): a connection there is refused at once.
CLOSED = "http://127.0.0.1:9"
TRAINYARD = Path(sys.executable).parent / "trainyard"


@pytest.fixture
def checkout(tmp_path: Path) -> Path:
    """A checkout whose `make run` wrote var/api-url, and a folder deep inside it."""
    (tmp_path / "var").mkdir()
    (tmp_path / "var" / "api-url").write_text(f"{CLOSED}\n")
    deep = tmp_path / "examples" / "mine"
    deep.mkdir(parents=True)
    return deep


def test_precedence_is_flag_env_file_default(checkout: Path, tmp_path: Path) -> None:
    written = str(tmp_path / "var" / "api-url")
    env = {"TRAINYARD_URL": "http://env:1"}
    assert find_api_url("http://flag:1", env, checkout) == ApiUrl("http://flag:1", "--url")
    assert find_api_url(None, env, checkout) == ApiUrl("http://env:1", "TRAINYARD_URL")
    assert find_api_url(None, {}, checkout) == ApiUrl(CLOSED, written)
    assert find_api_url(None, {"TRAINYARD_URL": ""}, tmp_path) == ApiUrl(CLOSED, written)
    outside = tmp_path.parent / f"{tmp_path.name}-elsewhere"
    outside.mkdir()
    assert find_api_url(None, {}, outside) == ApiUrl(DEFAULT_URL, "the default")


def test_the_nearest_file_wins_and_an_empty_one_names_nothing(checkout: Path, tmp_path: Path) -> None:
    (checkout / "var").mkdir()
    nearest = checkout / "var" / "api-url"
    nearest.write_text("http://127.0.0.1:9001")
    assert find_api_url(None, {}, checkout) == ApiUrl("http://127.0.0.1:9001", str(nearest))
    nearest.write_text("")
    assert find_api_url(None, {}, checkout).source == str(tmp_path / "var" / "api-url")


@pytest.mark.parametrize(
    ("flag", "env", "source"),
    [
        ([], {}, "{file}"),
        ([], {"TRAINYARD_URL": CLOSED}, "TRAINYARD_URL"),
        (["--url", CLOSED], {"TRAINYARD_URL": "http://127.0.0.1:8"}, "--url"),
    ],
)
def test_an_unreachable_api_is_named_with_its_source(
    checkout: Path,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    flag: list[str],
    env: dict[str, str],
    source: str,
) -> None:
    monkeypatch.delenv("TRAINYARD_URL", raising=False)
    monkeypatch.chdir(checkout)
    result = CliRunner(env=env).invoke(cli, [*flag, "ls"])
    assert result.exit_code == 1
    named = source.format(file=tmp_path / "var" / "api-url")
    assert f"nothing listening at {CLOSED} (from {named}):" in result.output
    assert "Traceback" not in result.output and "no TRAINYARD_URL set" not in result.output


def test_the_default_is_named_as_such(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("TRAINYARD_URL", raising=False)
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(api_url, "DEFAULT_URL", CLOSED)  # the real default may have a service behind it
    result = CliRunner().invoke(cli, ["ls"])
    assert result.exit_code == 1
    assert result.stderr.count(f"no TRAINYARD_URL set; using {CLOSED}") == 1
    assert f"nothing listening at {CLOSED} (the default; set TRAINYARD_URL):" in result.stderr
    assert result.stdout == ""


def test_outside_a_checkout_the_default_is_said_and_named_in_the_error(tmp_path: Path) -> None:
    """The console script as a user runs it in a folder of their own, TRAINYARD_URL unset, in a network of
    its own (a user namespace's) where nothing listens on the default port, whatever this box runs."""
    if subprocess.run(["unshare", "-rn", "true"], capture_output=True).returncode != 0:
        pytest.skip("needs `unshare -rn` (user namespaces) for a loopback where nothing listens")
    env = {name: value for name, value in os.environ.items() if name != "TRAINYARD_URL"}
    assert not any((place / "var" / "api-url").exists() for place in (tmp_path, *tmp_path.parents))
    result = subprocess.run(
        ["unshare", "-rn", "sh", "-c", 'ip link set lo up && exec "$0" "$@"', str(TRAINYARD), "status", "2"],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert result.returncode == 1 and result.stdout == ""
    said, error = result.stderr.splitlines()
    assert said == f"no TRAINYARD_URL set; using {DEFAULT_URL}"
    assert error.startswith(f"Error: nothing listening at {DEFAULT_URL} (the default; set TRAINYARD_URL): ")
    assert "make run" in error and "Traceback" not in result.stderr
