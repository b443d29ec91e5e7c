"""A `module:function` the bundle does not define is refused at submit, dry run and retry (issue 28 #4), from
the module's source read with ast and never run: a 422 naming the field and listing what the module defines;
a module the bundle lacks lists its modules; one that does not parse gives the line."""

from __future__ import annotations

from typing import Any

import pytest
from fastapi.testclient import TestClient
from sqlalchemy.orm import Session

from core.config import Settings
from tests.unit.app.test_api_retry_user_code import GZIP, factory_body, fail, submitted
from tests.unit.code_archives import bundle_archive
from tests.unit.conftest import assert_nothing_stored, assert_problem

MODELS = """\
import os.path
from collections import OrderedDict as Ordered

WIDTH: int = 8
a, (b, *rest) = 1, (2, 3)


def build(width=WIDTH):
    def inner():  # not the module's: a function of build's own
        ...
    return inner


async def fetch():
    ...


class Net:
    def forward(self):
        ...


try:
    from fast import loss
except ImportError:
    def loss(model, batch):
        ...

if os.path.sep == "/":
    with open(__file__) as handle:
        ...
"""
FILES = {
    "models.py": MODELS,
    "data.py": "def build(root=None):\n    ...\n",
    "pkg/__init__.py": "",
    "pkg/nets.py": "def make():\n    ...\n",
    "broken.py": "def build():\n    return 1\ndef loss(:\n",
    "star.py": "from models import *\n",
    "lazy.py": "def __getattr__(name):\n    ...\n",
}
DEFINED = "Net, Ordered, WIDTH, a, b, build, fetch, handle, loss, os, rest"


@pytest.fixture
def code(client: TestClient) -> str:
    response = client.post("/v1/code", content=bundle_archive(FILES), headers=GZIP)
    assert response.status_code == 201, response.text
    return str(response.json()["id"])


def body(code: str, field: str, entry: str) -> dict[str, Any]:
    """The factory job with `field` (model.factory, data.factory or train.loss) naming `entry`."""
    spec = factory_body(code)
    section, name = field.split(".")
    spec[section] = {**spec[section], "loss" if section == "train" else name: entry}
    return spec


@pytest.mark.parametrize(
    ("field", "entry", "fragment"),
    [
        (
            "model.factory",
            "models:nope",
            f"module models (models.py) defines no 'nope'; it defines {DEFINED}",
        ),
        ("model.factory", "models:inner", "defines no 'inner'"),
        ("data.factory", "data:make", "module data (data.py) defines no 'make'; it defines build"),
        ("train.loss", "pkg.nets:loss", "module pkg.nets (pkg/nets.py) defines no 'loss'; it defines make"),
        (
            "model.factory",
            "nomod:build",
            "the code bundle has no module nomod (no nomod.py or nomod/__init__.py); its modules: broken, "
            "data, lazy, models, pkg, pkg.nets, star",
        ),
        ("model.factory", "broken:build", "broken.py of the code bundle does not parse at line 3"),
    ],
    ids=["missing-function", "nested-function", "data-factory", "loss-in-package", "no-module", "syntax"],
)
def test_a_function_the_bundle_lacks_is_refused_at_submit_naming_the_field(
    client: TestClient, session: Session, settings: Settings, code: str, field: str, entry: str, fragment: str
) -> None:
    for dry_run in (False, True):
        response = client.post("/v1/jobs", json=body(code, field, entry), params={"dry_run": dry_run})
        assert_problem(response, field, fragment)
    assert_nothing_stored(session, settings)


@pytest.mark.parametrize(
    "entry", ["models:build", "models:Net", "models:loss", "pkg.nets:make", "star:anything", "lazy:anything"]
)
def test_a_function_the_module_defines_or_may_make_is_taken(
    client: TestClient, code: str, entry: str
) -> None:
    response = client.post("/v1/jobs", json=body(code, "model.factory", entry), params={"dry_run": True})
    assert response.status_code == 200, response.text


def test_a_retry_checks_its_functions_too(client: TestClient, session: Session, code: str) -> None:
    job_id = submitted(client, body(code, "model.factory", "models:build"))
    fail(session, job_id, spec=body(code, "model.factory", "models:gone"))  # stored before the check was
    response = client.post(f"/v1/jobs/{job_id}/retry")
    assert_problem(response, "model.factory", "defines no 'gone'")
