"""The names a Python module's source defines at its top level, read with `ast` and never run: the API's
check that a spec's `module:function` exists before the job waits in the queue (trainers/user_code.py finds
it by importing, inside the job). The source is untrusted text; nothing in it is executed. No torch.
"""

from __future__ import annotations

import ast
from collections.abc import Iterator
from dataclasses import dataclass

# Statements whose bodies run at import, at the module's own level: `try: from fast import build` counts.
_BLOCKS = (ast.If, ast.Try, ast.TryStar, ast.With, ast.AsyncWith, ast.For, ast.AsyncFor, ast.While)


@dataclass(frozen=True)
class Unparsable:
    """The source does not parse: Python's reason, and the line where it stopped (None when it cannot say)."""

    reason: str
    line: int | None


@dataclass(frozen=True)
class Defined:
    """What a module defines. `complete` is False where its names cannot be read off the source: a
    `from x import *`, or a module-level `__getattr__` that makes names up on demand."""

    names: frozenset[str]
    complete: bool


def _targets(node: ast.expr) -> Iterator[str]:
    """The names an assignment target binds: `a`, `a, (b, *c)`; not `a.b` or `a[0]`, which bind none."""
    if isinstance(node, ast.Name):
        yield node.id
    elif isinstance(node, ast.Starred):
        yield from _targets(node.value)
    elif isinstance(node, ast.Tuple | ast.List):
        for element in node.elts:
            yield from _targets(element)


def _bound(statement: ast.stmt) -> Iterator[str]:
    match statement:
        case ast.FunctionDef(name=name) | ast.AsyncFunctionDef(name=name) | ast.ClassDef(name=name):
            yield name
        case ast.Assign(targets=targets):
            for target in targets:
                yield from _targets(target)
        case ast.AnnAssign(target=target) | ast.AugAssign(target=target):
            yield from _targets(target)
        case ast.Import(names=aliases):
            yield from (alias.asname or alias.name.partition(".")[0] for alias in aliases)
        case ast.ImportFrom(names=aliases):
            yield from (alias.asname or alias.name for alias in aliases)
        case ast.For(target=target) | ast.AsyncFor(target=target):
            yield from _targets(target)
        case ast.With(items=items) | ast.AsyncWith(items=items):
            for item in items:
                if item.optional_vars is not None:
                    yield from _targets(item.optional_vars)


def _top_level(body: list[ast.stmt]) -> Iterator[ast.stmt]:
    """The module's statements, those inside its top-level if/try/with/for blocks included (not those of its
    functions and classes, which bind names of their own scope)."""
    for statement in body:
        yield statement
        if isinstance(statement, _BLOCKS):
            for block in ("body", "orelse", "finalbody"):
                yield from _top_level(getattr(statement, block, []))
            for handler in getattr(statement, "handlers", []):
                yield from _top_level(handler.body)


def defined_names(source: bytes, filename: str) -> Defined | Unparsable:
    """The names `source` defines at its top level, or why it does not parse."""
    try:
        tree = ast.parse(source, filename=filename)
    except SyntaxError as exc:
        return Unparsable(exc.msg, exc.lineno)
    except ValueError as exc:  # null bytes, on some Python versions
        return Unparsable(str(exc), None)
    except (RecursionError, MemoryError):  # nesting deeper than the parser's stack (`-` * 100_000 + "1")
        return Unparsable("it nests deeper than Python's parser goes", None)
    statements = list(_top_level(tree.body))
    names = frozenset(name for statement in statements for name in _bound(statement))
    starred = any(
        isinstance(s, ast.ImportFrom) and any(alias.name == "*" for alias in s.names) for s in statements
    )
    return Defined(names, complete=not starred and "__getattr__" not in names)
