"""What the API shows of the server's disk: the folders the settings name (runs, data, code) are written as
their variables, $TRAINYARD_RUNS_DIR and the like, never as the server's absolute paths. What is stored
keeps the real paths, which the worker runs and resumes from."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from core.config import Settings
from jobspec.shown_paths import with_placeholders


def server_folders(settings: Settings) -> dict[str, Path]:
    prefix = settings.model_config.get("env_prefix", "")
    return {
        f"{prefix}{name.upper()}": getattr(settings, name) for name in ("runs_dir", "data_dir", "code_dir")
    }


def shown_plan(plan: dict[str, Any], settings: Settings) -> dict[str, Any]:
    """The plan with every string in it (argv, resume_path) shown so, and the interpreter by its name."""
    folders = server_folders(settings)

    def shown(value: Any) -> Any:
        if isinstance(value, str):
            return with_placeholders(value, folders)
        if isinstance(value, list):
            return [shown(item) for item in value]
        if isinstance(value, dict):
            return {key: shown(item) for key, item in value.items()}
        return value

    result: dict[str, Any] = shown(plan)
    argv = result.get("argv")
    if argv and Path(argv[0]).is_absolute():
        # The interpreter the worker ran (its virtualenv's, or an environment's) by its name alone: where
        # the server keeps it is nothing a user needs.
        result["argv"] = [Path(argv[0]).name, *argv[1:]]
    return result
