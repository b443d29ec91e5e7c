"""The README stays a five-minute read whose first-job commands all run, and every relative link of the
README and the guides leads to a file, and a `#anchor` to a heading in it. What a guide says of the code is
checked where a machine can: the files and functions it names exist, the settings it names are settings,
and the webhook events it lists are the ones sent. The runnable blocks themselves run against a real service
in tests/integration/test_docs_commands.py."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from core.config import Settings
from core.integrations.webhook_events import EVENT_NAMES
from tests.doc_blocks import README, ROOT, anchors, doc_files, fenced_blocks, relative_links, section

FIRST_JOBS = ["A first job with curl", "A first job with the CLI", "A first job with your own model"]
SHELLS = {"sh", "bash", "shell", "console"}
# A file of the repository in a code span, and a name in it after `::`: `worker/publish.py::resume_file`.
NAMED_CODE = re.compile(
    r"`((?:app|bench|core|deploy|examples|jobspec|migrations|tests|trainers|web|worker)/[\w./-]*\w)(?:::(\w+))?"
)
SETTING = re.compile(r"\bTRAINYARD_[A-Z0-9_]*[A-Z0-9]")
# What a guide may name beside the settings: variables that the code, the Makefile or compose read.
READERS = (
    "app",
    "core",
    "worker",
    "jobspec",
    "trainers",
    "deploy",
    "bench",
    "Makefile",
    "docker-compose.yml",
)


def test_the_readme_is_at_most_300_lines() -> None:
    lines = len(README.read_text().splitlines())
    assert lines <= 300, f"README.md has {lines} lines: move detail into a guide in docs/ and link to it"


def test_the_quick_start_is_make_run_and_make_test() -> None:
    block = section(README, "Quick start")[0]
    commands = [line.split("#")[0].strip() for line in block.code.splitlines()]
    assert commands == ["make run", "make test"]


@pytest.mark.parametrize("heading", FIRST_JOBS)
def test_every_command_of_a_first_job_is_runnable(heading: str) -> None:
    shell = [block for block in section(README, heading) if block.info[:1] and block.info[0] in SHELLS]
    assert shell, f"README's '{heading}' shows no command"
    unmarked = [block.where() for block in shell if not block.runnable]
    assert not unmarked, f"mark these ```bash runnable, so that the docs tests run them: {unmarked}"


@pytest.mark.parametrize("path", doc_files(), ids=lambda path: path.name)
def test_relative_links_lead_to_a_file_and_a_heading(path: Path) -> None:
    broken = []
    for line, target in relative_links(path):
        name, _, anchor = target.partition("#")
        linked = (path.parent / name).resolve() if name else path
        if not linked.exists():
            broken.append(f"{path.name}:{line}: {target} (no such file)")
        elif anchor and linked.suffix == ".md" and anchor not in anchors(linked):
            broken.append(f"{path.name}:{line}: {target} (no heading #{anchor} in {linked.name})")
    assert not broken, "\n".join(broken)


def test_the_link_check_sees_a_broken_link(tmp_path: Path) -> None:
    page = tmp_path / "page.md"
    page.write_text("# Page\n\n[up](#page) [gone](missing.md) [`code`](#nowhere)\n\n```sh\n[no](x.md)\n```\n")
    assert relative_links(page) == [(3, "#page"), (3, "missing.md"), (3, "#nowhere")]
    assert anchors(page) == {"page"}


def test_every_guide_opens_with_its_title_and_a_paragraph() -> None:
    for path in doc_files()[1:]:
        lines = path.read_text().splitlines()
        assert lines[0].startswith("# ") and not lines[1] and lines[2], f"{path.relative_to(ROOT)}"


def test_runnable_blocks_are_shell() -> None:
    for path in doc_files():
        for block in fenced_blocks(path):
            if block.runnable:
                assert block.info[0] in SHELLS, f"{block.where()}: a runnable block runs in bash"


def defines(path: Path, name: str) -> bool:
    return (
        re.search(rf"^\s*(?:async def|def|class) {name}\b|^{name}\s*[:=]", path.read_text(), re.MULTILINE)
        is not None
    )


@pytest.mark.parametrize("path", doc_files(), ids=lambda path: path.name)
def test_the_files_and_functions_a_guide_names_exist(path: Path) -> None:
    missing = []
    for target, name in sorted(set(NAMED_CODE.findall(path.read_text()))):
        named = ROOT / target
        if not named.exists():
            missing.append(f"{target} (no such file)")
        elif name and named.suffix == ".py" and not defines(named, name):
            missing.append(f"{target}::{name} (not defined there)")
    assert not missing, f"{path.name} names code that is not there: {missing}"


def test_the_name_check_sees_what_is_not_there(tmp_path: Path) -> None:
    module = tmp_path / "module.py"
    module.write_text("LIMIT: int = 3\n\n\nclass Box:\n    def open(self) -> None: ...\n")
    assert defines(module, "LIMIT") and defines(module, "Box") and defines(module, "open")
    assert not defines(module, "close") and not defines(module, "Bo")
    assert NAMED_CODE.findall("see `worker/publish.py::resume_file`, `app/sdk/` and `runs/<id>`") == [
        ("worker/publish.py", "resume_file"),
        ("app/sdk", ""),
    ]


def test_the_settings_a_guide_names_are_read() -> None:
    settings = {f"TRAINYARD_{name.upper()}" for name in Settings.model_fields}
    code = "\n".join(
        path.read_text()
        for reader in READERS
        for path in ([ROOT / reader] if (ROOT / reader).is_file() else sorted((ROOT / reader).rglob("*.py")))
    )
    unread = {
        f"{path.name}: {name}"
        for path in doc_files()
        for name in SETTING.findall(path.read_text())
        if name not in settings and name not in code
    }
    assert not unread, f"no setting, and nothing reads it: {sorted(unread)}"


def test_every_setting_is_documented() -> None:
    docs = "\n".join(path.read_text() for path in doc_files())
    # operations.md's configuration table names them without the prefix, several to a row.
    rows = re.findall(
        r"^\| ((?:`[A-Z0-9_]+`(?:, )?)+) \|", (ROOT / "docs" / "operations.md").read_text(), re.M
    )
    tabled = {name for row in rows for name in re.findall(r"`([A-Z0-9_]+)`", row)}
    undocumented = [
        f"TRAINYARD_{name.upper()}"
        for name, field in Settings.model_fields.items()
        if f"TRAINYARD_{name.upper()}" not in docs
        and name.upper() not in tabled
        and not (field.description or "").startswith("test only")
    ]
    assert not undocumented, f"add these to docs/operations.md's configuration table: {undocumented}"


def test_the_webhook_events_listed_are_the_ones_sent() -> None:
    text = (ROOT / "docs" / "integrations.md").read_text()
    listed = re.search(r"^- `events`:(.*?)^-", text, re.MULTILINE | re.DOTALL)
    assert listed, "docs/integrations.md lists the events under a `- `events`:` bullet"
    assert sorted(set(re.findall(r"`(job\.\w+)`", listed[1]))) == sorted(EVENT_NAMES)
