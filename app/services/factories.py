"""At submit (and dry run, and retry), each `module:function` a spec names in its code bundle (model.factory,
data.factory, train.loss) is looked up in the module's source as the API stores it, read with `ast` and
never run: a function the module does not define, a module the bundle lacks, or one that does not parse is a
422 now, rather than a job that fails after it waited in the queue."""

from __future__ import annotations

from functools import lru_cache
from pathlib import Path, PurePosixPath

from sqlalchemy.orm import Session

from app.services.errors import InvalidSpec
from app.services.keys import Caller
from core import code_store
from core.config import Settings
from core.models import CodeBundle
from jobspec.module_names import Defined, Unparsable, defined_names
from jobspec.problems import Problem, SpecError
from jobspec.spec import JobSpec
from jobspec.user_fit import entry_points

# A module's source read at most; a larger one is left for the job to import (whether it defines the
# function cannot be told here), as are compiled modules.
MAX_SOURCE_BYTES = 1 << 20
SHOWN = 30  # names listed in a message


def _listed(names: list[str]) -> str:
    more = len(names) - SHOWN
    return ", ".join(names[:SHOWN]) + (f" and {more} more" if more > 0 else "") if names else "none"


def _candidates(module: str) -> list[str]:
    """The files `import module` would load from the bundle's top: pkg/mod.py or pkg/mod/__init__.py."""
    path = module.replace(".", "/")
    return [f"{path}.py", f"{path}/__init__.py"]


@lru_cache(maxsize=256)
def _read(root: Path, name: str) -> Defined | Unparsable | None:
    """What the file `name` of the bundle at `root` defines, or why it does not parse; None when the bundle
    has no such file. (Its unpacker made only regular files and folders, no links: core/code_unpack.py.)
    Bundles are content-addressed, so the answer for a path never changes."""
    path = root / name
    if not path.is_file():
        return None
    with path.open("rb") as file:
        source = file.read(MAX_SOURCE_BYTES + 1)
    if len(source) > MAX_SOURCE_BYTES:
        return Defined(frozenset(), complete=False)
    return defined_names(source, name)


def _modules(bundle: CodeBundle) -> list[str]:
    """The bundle's Python modules as `import` names, from its listed files."""
    paths = [PurePosixPath(str(entry["path"])) for entry in bundle.files]
    names = {
        ".".join(path.parent.parts if path.name == "__init__.py" else path.with_suffix("").parts)
        for path in paths
        if path.suffix == ".py"
    }
    return sorted(name for name in names if name)


def _compiled(root: Path, module: str) -> bool:
    """A compiled module (mod.cpython-311-x86_64-linux-gnu.so, mod.pyc) stands where no source does."""
    *package, last = module.split(".")
    folder = root.joinpath(*package)
    return folder.is_dir() and any(p.suffix in {".so", ".pyd", ".pyc"} for p in folder.glob(f"{last}.*"))


def _problem(root: Path, bundle: CodeBundle, field: str, entry: str, strict_syntax: bool) -> Problem | None:
    module, _, function = entry.partition(":")
    found = next(((name, d) for name in _candidates(module) if (d := _read(root, name)) is not None), None)
    if found is None:
        if _compiled(root, module):
            return None
        files = " or ".join(_candidates(module))
        return Problem(
            field,
            f"{field} {entry!r}: the code bundle has no module {module} (no {files}); its modules: "
            f"{_listed(_modules(bundle))}",
            "name a module of the pushed folder as a dotted path from its top, or push the folder holding it",
        )
    name, defined = found
    if isinstance(defined, Unparsable):
        if not strict_syntax:  # another interpreter (spec.environment) may read syntax this one does not
            return None
        line = "" if defined.line is None else f" at line {defined.line}"
        return Problem(
            field,
            f"{field} {entry!r}: {name} of the code bundle does not parse{line}: {defined.reason}",
            f"fix the syntax (`python -m py_compile {name}` shows it) and push the folder again",
        )
    if not defined.complete or function in defined.names:
        return None
    return Problem(
        field,
        f"{field} {entry!r}: module {module} ({name}) defines no {function!r}; it defines "
        f"{_listed(sorted(defined.names))}",
        f"name one of them after the colon, or define {function} at the top level of {name}",
    )


def _bundle_dir(settings: Settings, code_id: str) -> Path:
    try:
        return code_store.ensure_unpacked(settings, code_id)
    except code_store.BundleUnavailable as exc:
        raise InvalidSpec("code", str(exc)) from exc


def check_factories(session: Session, settings: Settings, spec: JobSpec, caller: Caller) -> None:
    """Every function the spec names in its bundle is defined by its module; raises SpecError naming each
    field that names one which is not. Runs after check_code, which found the caller's bundle."""
    if spec.code is None or spec.program is not None:
        return
    entries = entry_points(spec)
    bundle = session.get(CodeBundle, (spec.code, caller.user))
    if not entries or bundle is None:
        return
    root = _bundle_dir(settings, spec.code)
    strict = spec.environment is None
    found = (_problem(root, bundle, field, entry, strict) for field, entry in entries.items())
    if problems := [problem for problem in found if problem is not None]:
        raise SpecError(problems)
