"""What a standby imports before it forks is what a rank would import before its first step: torch's
optimizers import torch._dynamo at their first construction, which every rank of every job paid anew until the
standby imported it (trainers/warm/standby.py::RANK_MODULES)."""

from __future__ import annotations

import subprocess
import sys

from core.project import PROJECT_ROOT

# In a fresh interpreter: this one has imported whatever earlier tests needed.
FIRST_OPTIMIZER = """
import sys
from trainers.warm.standby import import_rank_modules
import_rank_modules()
import torch
before = set(sys.modules)
for kind in (torch.optim.SGD, torch.optim.AdamW):
    kind(torch.nn.Linear(2, 2).parameters(), lr=0.1)
print(sorted(name for name in set(sys.modules) - before if name.startswith("torch")))
"""


def test_a_rank_s_first_optimizer_imports_nothing_of_torch_the_standby_did_not() -> None:
    ran = subprocess.run(
        [sys.executable, "-c", FIRST_OPTIMIZER], cwd=PROJECT_ROOT, capture_output=True, text=True, timeout=240
    )
    assert ran.returncode == 0, ran.stderr
    assert ran.stdout.strip() == "[]", ran.stdout
