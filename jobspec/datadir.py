"""Where on-disk datasets may be read from: data.root under TRAINYARD_DATA_DIR, and nowhere else; and where a
job writes what it derives from them (a tokenized corpus): its own run directory.

Shared by the API (refuse at submit) and the trainer (refuse at load); no torch import.
"""

from __future__ import annotations

import os
from pathlib import Path

from jobspec.data_store import is_store_root
from jobspec.files import inside
from jobspec.problems import Problem
from jobspec.shown_paths import with_placeholders
from jobspec.spec import JobSpec

DATA_DIR_ENV = "TRAINYARD_DATA_DIR"
DEFAULT_DATA_DIR = Path("var") / "data"
RUN_DIR_ENV = "TRAINYARD_RUN_DIR"  # set by the worker for every process of a job


def data_dir_from_env() -> Path:
    """The worker passes its own resolved data dir, so the trainer reads exactly what the API checked."""
    return Path(os.environ.get(DATA_DIR_ENV) or DEFAULT_DATA_DIR).resolve()


def run_dir_from_env() -> Path:
    """The job's run directory: the one place its ranks may write, inside a sandbox too."""
    run_dir = os.environ.get(RUN_DIR_ENV)
    if not run_dir:
        raise ValueError(f"{RUN_DIR_ENV} is not set: a job's ranks run with the worker's environment")
    return Path(run_dir)


class FolderMissing(ValueError):
    """A folder a spec names is not under TRAINYARD_DATA_DIR (yet). A submission is refused for it; a dry run
    plans the job all the same, as not runnable, since the folder may be put there before the submission."""


def resolve_data_root(data_dir: Path, root: str, field: str = "data.root") -> Path:
    """The real directory data.root (or another `field` naming a directory under data_dir) names; raises
    ValueError naming the field when it is missing or when it (or a symlink on its way) leads outside
    data_dir."""
    base = data_dir.resolve()
    # resolve() follows every symlink, so a link inside data_dir that points elsewhere is caught here.
    path = (base / root).resolve()
    if not path.is_relative_to(base):
        raise ValueError(
            f"{field} {root!r} leads outside {DATA_DIR_ENV} through a symlink; "
            "copy or mount the dataset inside it"
        )
    if not path.is_dir():
        raise FolderMissing(
            f"{field} {root!r} is not a directory under {DATA_DIR_ENV}; "
            "put the dataset there (nothing is downloaded) or fix the path"
        )
    return path


def data_folders(spec: JobSpec) -> dict[str, str]:
    """The folders a spec names under TRAINYARD_DATA_DIR, by field; a program names none (it reads its data
    itself), nor does an s3:// data.root."""
    named = {
        "data.root": spec.data and spec.data.root,
        "data.tokenizer": spec.data and spec.data.tokenizer,
        "model.path": spec.model and spec.model.path,
    }
    return {field: folder for field, folder in named.items() if folder and not is_store_root(folder)}


def absent_folders(spec: JobSpec, data_dir: Path) -> list[Problem]:
    """A problem for each folder of data_folders that is not there yet. One that leads outside data_dir is
    there, and wrong: the submit's own checks refuse it."""
    absent = []
    for field, folder in data_folders(spec).items():
        try:
            resolve_data_root(data_dir, folder, field)
        except FolderMissing as exc:
            absent.append(Problem(field, str(exc)))
        except ValueError:
            continue
    return absent


def shown_data_path(data_dir: Path, path: Path) -> str:
    """`path` as a message shows it: under $TRAINYARD_DATA_DIR, never the server's absolute path."""
    return with_placeholders(str(path), {DATA_DIR_ENV: data_dir})


def confined_file(data_dir: Path, path: Path) -> Path:
    """The real file `path` names, refused (ValueError) when a symlink leads it outside data_dir: data.root
    passed resolve_data_root, but any file in it may still be a link to anywhere. Every on-disk reader reads
    through this."""
    real = inside(path, data_dir)
    if real is None:
        raise ValueError(
            f"data.root: {shown_data_path(data_dir, path)} is a symlink leading outside {DATA_DIR_ENV}; "
            "put the file itself there, or link only to files inside it"
        )
    return real
