"""The user's code bundle inside the job: its modules imported from RunConfig.code_dir, and the functions a
spec names as `module:function` resolved and called. Nothing of it runs at submit time (the API never imports
user code), and every failure here (no such module or function, a syntax error, an exception, a wrong return
type) is a UserCodeError naming the spec's field and the user's own frames.
"""

from __future__ import annotations

import importlib
import inspect
import os
import sys
from collections.abc import Callable
from pathlib import Path
from types import ModuleType
from typing import Any

from torch import nn

from trainers.user_errors import UserCodeError, failure, inside_bundle


def type_name(value: object) -> str:
    return "None" if value is None else f"a {type(value).__module__}.{type(value).__qualname__}"


class Bundle:
    """An unpacked bundle, first on sys.path: its modules win over installed ones of the same name that are
    not imported yet, and data loader workers (forked) see them too."""

    def __init__(self, code_dir: str | Path) -> None:
        self.root = Path(os.path.abspath(code_dir))
        if not self.root.is_dir():
            raise FileNotFoundError(f"the job's code bundle is not unpacked at {self.root}")
        if str(self.root) not in sys.path:
            sys.path.insert(0, str(self.root))
        importlib.invalidate_caches()

    def modules(self) -> list[str]:
        """The bundle's top-level modules and packages."""
        found = {p.stem for p in self.root.glob("*.py")} | {
            p.name for p in self.root.iterdir() if p.is_dir() and (p / "__init__.py").exists()
        }
        return sorted(found)

    def _holds(self, module: ModuleType) -> bool:
        paths = [module.__file__] if module.__file__ else list(getattr(module, "__path__", []))
        return any(inside_bundle(path, self.root) is not None for path in paths)

    def _module(self, field: str, entry: str, name: str) -> ModuleType:
        try:
            module = importlib.import_module(name)
        except ModuleNotFoundError as exc:
            if exc.name is None or not (name == exc.name or name.startswith(exc.name + ".")):
                raise failure(f"importing {name} for {field}", exc, self.root) from exc
            raise UserCodeError(
                f"{field} {entry!r}: the code bundle has no module {exc.name!r}; it has "
                f"{', '.join(self.modules()) or 'no Python modules at its top level'}"
            ) from exc
        except Exception as exc:  # a syntax error, or the module raising while it is imported
            raise failure(f"importing {name} for {field}", exc, self.root) from exc
        if not self._holds(module):
            raise UserCodeError(
                f"{field} {entry!r}: {name} is an installed module ({module.__file__ or name}), which the "
                f"bundle cannot replace; rename the bundle's {name}"
            )
        return module

    def function(self, field: str, entry: str) -> Callable[..., Any]:
        """The function `entry` ("module:function") names; raises UserCodeError naming `field`."""
        module_name, name = entry.split(":")
        module = self._module(field, entry, module_name)
        function = getattr(module, name, None)
        if not callable(function):
            defined = [
                key
                for key, value in vars(module).items()
                if callable(value) and getattr(value, "__module__", None) == module.__name__
            ]
            raise UserCodeError(
                f"{field} {entry!r}: module {module_name} has no function {name!r}; it defines "
                f"{', '.join(sorted(defined)) or 'none'}"
            )
        return function

    def call(self, field: str, entry: str, **kwargs: Any) -> Any:
        """What the function `entry` returns when called with kwargs."""
        function = self.function(field, entry)
        try:
            return function(**kwargs)
        except Exception as exc:
            raise failure(f"{field} {entry!r}", exc, self.root, self._defined_at(function)) from exc

    def _defined_at(self, function: Callable[..., Any]) -> str | None:
        try:
            file, line = inspect.getsourcefile(function), inspect.getsourcelines(function)[1]
        except (OSError, TypeError):
            return None
        where = None if file is None else inside_bundle(file, self.root)
        return None if where is None else f"defined at {where}, line {line}"


def build_user_model(bundle: Bundle, entry: str, kwargs: dict[str, Any]) -> nn.Module:
    """model.factory(**model.kwargs), which must be an nn.Module."""
    model = bundle.call("model.factory", entry, **kwargs)
    if not isinstance(model, nn.Module):
        raise UserCodeError(
            f"model.factory {entry!r} returned {type_name(model)}, not a torch.nn.Module; return the model"
        )
    return model
