"""What the API shows of the server's disk: the folders the settings name (runs, data, code) are written as
their variables, $TRAINYARD_RUNS_DIR and the like, never as the server's absolute paths. What is stored
keeps the real paths, which the worker runs and resumes from."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from core.config import Settings
from jobspec.shown_paths import Placeholders


def server_folders(settings: Settings) -> dict[str, Path]:
    prefix = settings.model_config.get("env_prefix", "")
    return {
        f"{prefix}{name.upper()}": getattr(settings, name) for name in ("runs_dir", "data_dir", "code_dir")
    }


def shown_plan(plan: dict[str, Any] | str, settings: Settings) -> dict[str, Any]:
    """The plan (or its JSON as stored) with every string in it (argv, resume_path) shown so, and the
    interpreter by its name. Written in the plan's JSON text, a pass per folder: walking each of its values
    in Python took most of the time of a job the API lists."""
    document = plan if isinstance(plan, str) else json.dumps(plan)
    result: dict[str, Any] = json.loads(Placeholders(server_folders(settings)).in_json(document))
    argv = result.get("argv")
    if argv and Path(argv[0]).is_absolute():
        # The interpreter the worker ran (its virtualenv's, or an environment's) by its name alone: where
        # the server keeps it is nothing a user needs.
        result["argv"] = [Path(argv[0]).name, *argv[1:]]
    return result
