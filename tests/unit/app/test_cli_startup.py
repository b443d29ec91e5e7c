"""The `trainyard` command's start-up: every call loads app.cli, so loading it, printing a command's --help or
refusing its arguments imports none of httpx, pydantic, the API's schemas nor the server's packages (they were
most of a call's CPU); a request imports what it needs when it is made."""

from __future__ import annotations

import json
import subprocess
import sys

# Top-level packages that a call making no request must not load.
HEAVY_PACKAGES = frozenset(
    {
        "httpx",
        "httpcore",
        "pydantic",
        "pydantic_core",
        "pathspec",
        "fastapi",
        "starlette",
        "sqlalchemy",
        "celery",
        "kombu",
        "torch",
        "numpy",
    }
)
# The project's modules that build pydantic models as they are imported.
HEAVY_MODULES = frozenset(
    {"app.schemas", "app.secret_schemas", "app.timings", "jobspec.spec", "jobspec.plan", "jobspec.forecast"}
)
# Each: the arguments of one call that makes no request, and the exit status click gives it.
CALLS = (
    (["--help"], 0),
    (["ls", "--help"], 0),  # the group's callback runs first and makes the client: it must not connect
    (["retry", "--help"], 0),  # its --from choices are RetryFrom's
    (["sweep", "status", "--help"], 0),
    (["compare", "--help"], 0),
    (["status", "not-a-number"], 2),
)
LOADED = f"""
import json, sys
import app.cli
from click.testing import CliRunner
for args, code in {CALLS!r}:
    result = CliRunner().invoke(app.cli.cli, args, env={{"TRAINYARD_URL": "http://127.0.0.1:9"}})
    assert result.exit_code == code, (args, result.output)
print(json.dumps(sorted(sys.modules)))
"""


def test_a_call_that_makes_no_request_loads_no_http_client_and_no_schemas() -> None:
    done = subprocess.run([sys.executable, "-c", LOADED], capture_output=True, text=True, check=True)
    loaded = set(json.loads(done.stdout))
    assert not {m for m in loaded if m.split(".")[0] in HEAVY_PACKAGES}, sorted(loaded)
    assert not loaded & HEAVY_MODULES
    assert "app.cli.jobs" in loaded and "app.client" in loaded  # what ran is the command itself
