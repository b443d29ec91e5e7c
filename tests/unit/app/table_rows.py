"""Reading the CLI's tables back in tests."""

from __future__ import annotations


def table_rows(output: str) -> list[list[str]]:
    """The cells of every body row of the tables in `output` (rich draws │ between them; ┃ in headers)."""
    return [
        [cell.strip() for cell in line.split("│")[1:-1]]
        for line in output.splitlines()
        if line.startswith("│")
    ]
