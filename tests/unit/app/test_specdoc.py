"""docs/spec.md is what `python -m app.specdoc` prints now, and that covers every field of the spec."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from pydantic import BaseModel

from app.specdoc import render
from jobspec.spec import JobSpec, Strategy

ROOT = Path(__file__).resolve().parents[3]


def rows(text: str, section: str) -> dict[str, str]:
    """The rows of the field table of one `## section`, by field name."""
    body = text.split(f"\n## {section}\n", 1)[1]
    table = body.split("| field |", 1)[1].split("\n\n", 1)[0]
    return {line.split("`")[1]: line for line in table.splitlines() if line.startswith("| `")}


def test_docs_spec_md_is_current() -> None:
    stale = "docs/spec.md is stale: regenerate it with `python -m app.specdoc > docs/spec.md`"
    assert (ROOT / "docs" / "spec.md").read_text() == render(), stale


def test_module_prints_the_reference() -> None:
    printed = subprocess.run(
        [sys.executable, "-m", "app.specdoc"], cwd=ROOT, capture_output=True, text=True, check=True
    )
    assert printed.stdout == render()


def test_every_field_has_a_row() -> None:
    text = render()
    assert set(rows(text, "top level")) == set(JobSpec.model_fields)
    for name, field in JobSpec.model_fields.items():
        if isinstance(field.annotation, type) and issubclass(field.annotation, BaseModel):
            assert set(rows(text, name)) == set(field.annotation.model_fields), name


def test_rows_show_types_defaults_bounds_and_choices() -> None:
    text = render()
    train, parallel, data = rows(text, "train"), rows(text, "parallel"), rows(text, "data")
    assert "| float | `0.05` | > 0, ≤ 1e4 |" in train["lr"]
    assert "| int \\| null | `null` | ≥ 1, ≤ 100,000 |" in train["epochs"]
    assert all(f"`{strategy.value}`" in parallel["strategy"] for strategy in Strategy)
    assert "each ≥ 0, each ≤ 255" in parallel["gpus"]
    top = rows(text, "top level")
    # model and data, or program in their place: the header says so, and each of them may be left out.
    assert all("| null | `null` |" in top[name] for name in ("model", "data", "program"))
    assert "except `model` and `data`, or\n`program` in their place" in text and "`null`" in data["dataset"]
    assert (
        "| `mlp` | images | `hidden` (int, 4..16384, default 256), `depth` (int, 1..32, default 2) |" in text
    )
    assert "| `cifar10` | 3 x 32 x 32 | 10 | `data.root` | its test split |" in text
