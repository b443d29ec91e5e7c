"""What the API shows of the server's disk: the folders the settings name (runs, data, code) are written as
their variables, $TRAINYARD_RUNS_DIR and the like, never as the server's absolute paths. What is stored
keeps the real paths, which the worker runs and resumes from."""

from __future__ import annotations

import json
from functools import lru_cache
from pathlib import Path
from typing import Any

from core.config import Settings
from jobspec.shown_paths import Placeholders

_FOLDERS = ("runs_dir", "data_dir", "code_dir")


def server_folders(settings: Settings) -> Placeholders:
    """The settings' folders, each to be written as its variable."""
    return _placeholders(*(getattr(settings, name) for name in _FOLDERS))


@lru_cache(maxsize=8)
def _placeholders(*folders: Path) -> Placeholders:
    # Made once, not for every plan the API shows: sorting and escaping the roots cost as much as using them.
    prefix = Settings.model_config.get("env_prefix", "")
    named = zip(_FOLDERS, folders, strict=True)
    return Placeholders({f"{prefix}{name.upper()}": path for name, path in named})


def shown_plan(plan: dict[str, Any] | str, settings: Settings) -> dict[str, Any]:
    """The plan (or its JSON as stored) with every string in it (argv, resume_path) shown so, and the
    interpreter by its name. Written in the plan's JSON text, a pass per folder: walking each of its values
    in Python took most of the time of a job the API lists."""
    document = plan if isinstance(plan, str) else json.dumps(plan)
    result: dict[str, Any] = json.loads(server_folders(settings).in_json(document))
    argv = result.get("argv")
    if argv and Path(argv[0]).is_absolute():
        # The interpreter the worker ran (its virtualenv's, or an environment's) by its name alone: where
        # the server keeps it is nothing a user needs.
        result["argv"] = [Path(argv[0]).name, *argv[1:]]
    return result
