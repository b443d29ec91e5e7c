"""A schema made by create_all from core/models.py alone, before anything else of the service is imported (a
script, a test's template database), has what every submission writes through: the tables the jobs table's
triggers keep (owner_unfinished for the quotas, queue_changes for the API's queue index) and those triggers.
In a process of its own, since this one has imported everything already."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from core.project import PROJECT_ROOT

SCRIPT = """
import sys
from sqlalchemy import create_engine, text
from sqlalchemy.orm import Session
from core.models import Base, Job
assert "core.queue_order" not in sys.modules and "core.quotas" not in sys.modules, sorted(sys.modules)
engine = create_engine("sqlite:///" + sys.argv[1])
Base.metadata.create_all(engine)
with Session(engine) as session:
    session.add(Job(name="j", owner="ann", status="queued", spec={}, plan={}, total_gpus=2))
    session.commit()
    print(session.execute(text("SELECT jobs, gpus FROM owner_unfinished WHERE owner = 'ann'")).one())
    print(session.execute(text("SELECT count(*) FROM queue_changes")).scalar_one())
"""


def test_create_all_from_the_models_alone_keeps_quota_counts_and_queue_changes(tmp_path: Path) -> None:
    done = subprocess.run(
        [sys.executable, "-c", SCRIPT, str(tmp_path / "t.db")],
        cwd=PROJECT_ROOT,
        capture_output=True,
        text=True,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    assert done.stdout.split("\n")[:2] == ["(1, 2)", "1"]
