"""The OpenAPI document says what the error handlers (app/api/errors.py) send: every error leaves as
application/problem+json with a Problem body, so clients and schema-driven tests read the errors they get."""

from __future__ import annotations

from typing import Any

from fastapi import FastAPI

from app.schemas import Problem

PROBLEM_JSON = "application/problem+json"
_SCHEMAS = "#/components/schemas/"
# FastAPI documents a 422 by itself on every route with parameters, with its own handler's body.
_FASTAPI_422 = {"schema": {"$ref": f"{_SCHEMAS}HTTPValidationError"}}


def problem(description: str | None = None) -> dict[str, Any]:
    """A `responses=` entry for an error the handlers answer; the status phrase describes it unless told."""
    entry: dict[str, Any] = {"content": {PROBLEM_JSON: {"schema": {"$ref": f"{_SCHEMAS}Problem"}}}}
    if description is not None:
        entry["description"] = description
    return entry


def problems(*codes: int) -> dict[int | str, dict[str, Any]]:
    return {code: problem() for code in codes}


# A route that reads a JSON body: FastAPI answers 400 for bytes that do not decode, BodySizeLimit 413.
BODY_PROBLEMS = {400: problem("the body is not UTF-8 text"), **problems(413)}


def _document_problems(document: dict[str, Any]) -> None:
    schemas = document.setdefault("components", {}).setdefault("schemas", {})
    problem_schema = Problem.model_json_schema(ref_template=_SCHEMAS + "{model}")
    schemas.update(problem_schema.pop("$defs", {}), Problem=problem_schema)
    for operations in document["paths"].values():
        for operation in operations.values():
            unprocessable = operation.get("responses", {}).get("422")
            if unprocessable and unprocessable.get("content") == {"application/json": _FASTAPI_422}:
                unprocessable["content"] = problem()["content"]
    schemas.pop("HTTPValidationError", None)
    schemas.pop("ValidationError", None)


def install_openapi(app: FastAPI) -> None:
    generate = app.openapi

    def openapi() -> dict[str, Any]:
        fresh = app.openapi_schema is None
        # FastAPI keeps the document it builds and returns that same one from then on.
        document = generate()
        if fresh:
            _document_problems(document)
        return document

    app.openapi = openapi  # type: ignore[method-assign]
