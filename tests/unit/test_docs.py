"""The README stays a five-minute read whose first-job commands all run, and every relative link of the
README and the guides leads to a file, and a `#anchor` to a heading in it. The runnable blocks themselves
run against a real service in tests/integration/test_docs_commands.py."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.doc_blocks import README, ROOT, anchors, doc_files, fenced_blocks, relative_links, section

FIRST_JOBS = ["A first job with curl", "A first job with the CLI", "A first job with your own model"]
SHELLS = {"sh", "bash", "shell", "console"}


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
