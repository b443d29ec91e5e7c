"""tests/parts.py places a module by its `own_services` or `soak` marker, read from the module's text so that
the other parts never import it, and refuses a mark it could not have read that way."""

from __future__ import annotations

import pytest

pytest_plugins = ["pytester"]

# Importing this module fails the run, so a part that imports it shows.
NOT_TO_IMPORT = "raise RuntimeError('imported')\n"
ON_ITS_OWN = "import pytest\n\npytestmark = pytest.mark.own_services\n\n\ndef test_own():\n    pass\n"
IN_A_LIST = (
    "import pytest\n\npytestmark = [\n    pytest.mark.integration,\n    pytest.mark.own_services,\n]\n\n\n"
    "def test_listed():\n    pass\n"
)
NOTHING_RUNNING = "def test_plain():\n    pass\n"


def collected(pytester: pytest.Pytester, part: str) -> list[str]:
    result = pytester.runpytest("-p", "tests.parts", "--part", part, "--collect-only", "-q")
    assert result.ret in (pytest.ExitCode.OK, pytest.ExitCode.NO_TESTS_COLLECTED), result.stdout.str()
    return [line.split("::")[1] for line in result.stdout.lines if "::" in line]


def test_a_marked_module_is_in_services_and_no_other_part_imports_it(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(
        test_own=ON_ITS_OWN,
        test_listed=IN_A_LIST,
        test_plain=NOTHING_RUNNING,
        test_guarded=f"import pytest\n\npytestmark = pytest.mark.own_services\n{NOT_TO_IMPORT}",
    )
    assert collected(pytester, "rest") == ["test_plain"]
    assert collected(pytester, "stacks") == []
    pytester.path.joinpath("test_guarded.py").unlink()
    assert sorted(collected(pytester, "services")) == ["test_listed", "test_own"]


def test_the_soak_is_a_part_of_its_own_that_imports_nothing_else(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(
        test_soak="import pytest\n\npytestmark = pytest.mark.soak\n\n\ndef test_soaked():\n    pass\n",
        test_guarded=f"import pytest\n\npytestmark = pytest.mark.own_services\n{NOT_TO_IMPORT}",
        test_plain=NOT_TO_IMPORT,
    )
    assert collected(pytester, "soak") == ["test_soaked"]


def test_a_mark_on_a_test_alone_is_refused_naming_where_it_belongs(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(test_one="import pytest\n\n\n@pytest.mark.own_services\ndef test_one():\n    pass\n")
    result = pytester.runpytest("-p", "tests.parts", "--part", "rest", "--collect-only", "-q")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(
        ["*test_one.py::test_one: the own_services marker belongs to a whole module*"]
    )
