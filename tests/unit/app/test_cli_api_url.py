"""Which API the CLI talks to: --url, then TRAINYARD_URL, then var/api-url (written by `make run`) in the
current folder or one above it, then the default; an unreachable one is named with where it came from."""

from __future__ import annotations

from pathlib import Path

import pytest
from click.testing import CliRunner

from app.cli import api_url, cli
from app.cli.api_url import ApiUrl, find_api_url
from app.client import DEFAULT_URL

# Nothing listens on port 9 (discard): a connection there is refused at once.
CLOSED = "http://127.0.0.1:9"


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
    assert f"cannot reach the API at {CLOSED} (from {named}):" in result.output
    assert "Traceback" not in result.output


def test_the_default_is_named_as_such(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("TRAINYARD_URL", raising=False)
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(api_url, "DEFAULT_URL", CLOSED)  # the real default may have a service behind it
    result = CliRunner().invoke(cli, ["ls"])
    assert result.exit_code == 1
    assert f"cannot reach the API at {CLOSED} (from the default):" in result.output
