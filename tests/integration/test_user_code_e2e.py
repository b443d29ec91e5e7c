"""A user's own model through the whole service, as a user drives it: `trainyard code push` and `submit
--code`, follow to the end, read the curve and the logs, download a checkpoint; and a hostile bundle that
looks around from inside its model factory while the job runs in the sandbox."""

from __future__ import annotations

import io
import json
import textwrap
from pathlib import Path

import torch

from tests.integration.jobs import metric_values, wait_status
from tests.integration.servers import ROOT, Stack
from tests.integration.test_cli_e2e import job_id_of, trainyard

BYOM = ROOT / "examples" / "byom"


def byom_spec(tmp_path: Path, **train: object) -> Path:
    spec = json.loads((BYOM / "spec.json").read_text())
    spec.pop("code")  # `submit --code DIR` pushes the bundle and fills it in
    spec["train"] |= train
    path = tmp_path / "byom.json"
    path.write_text(json.dumps(spec))
    return path


def test_push_submit_follow_and_download(embedded_stack: Stack, tmp_path: Path) -> None:
    pushed = trainyard(embedded_stack, "code", "push", BYOM)
    assert pushed.returncode == 0, pushed.stdout + pushed.stderr
    code_id = pushed.stdout.strip().splitlines()[-1]
    assert code_id.startswith("sha256:")

    run = trainyard(embedded_stack, "submit", byom_spec(tmp_path), "--code", BYOM, "--follow", timeout=300)
    assert run.returncode == 0, run.stdout + run.stderr
    job_id = job_id_of(run.stdout)

    with embedded_stack.client() as client:
        job = wait_status(client, job_id, {"succeeded"})
        assert job["spec"]["code"] == code_id, "pushing the same tree again gives the same id"
        losses = [value for _, value in metric_values(client, job_id, "loss")]
        assert len(losses) >= 4 and losses[-1] < losses[0]
        checkpoints = client.get(f"/v1/jobs/{job_id}/checkpoints").json()["data"]
        assert checkpoints, "a checkpoint every 10 steps"
        download = client.get(f"/v1/checkpoints/{checkpoints[-1]['id']}/download")
        assert download.status_code == 200
        state = torch.load(io.BytesIO(download.content), weights_only=True)
        assert any(key.startswith("features.") for key in state["model"]), "the bundle's own modules"

    shown = trainyard(embedded_stack, "code", "show", code_id)
    assert str(job_id) in shown.stdout, "the bundle lists the jobs that use it"


# The model factory of a bundle that tries what a hostile user would, and prints what it saw.
PROBE = textwrap.dedent(
    """
    import os, socket
    from torch import nn

    def attempt(name, action):
        try:
            action()
            print(f"PROBE {name}: allowed", flush=True)
        except Exception as exc:
            print(f"PROBE {name}: refused ({type(exc).__name__})", flush=True)

    def build(database, runs_dir, api_port):
        attempt("read database", lambda: open(database, "rb").read(16))
        print(f"PROBE runs visible: {sorted(os.listdir(runs_dir))}", flush=True)
        attempt("read pid 1 environ", lambda: open("/proc/1/environ", "rb").read())
        attempt("write /usr", lambda: open("/usr/probe", "w").write("x"))
        attempt("reach the API", lambda: socket.create_connection(("127.0.0.1", api_port), timeout=2))
        secrets = [name for name in os.environ if "DATABASE" in name or "BROKER" in name]
        print(f"PROBE secrets in environment: {secrets}", flush=True)
        return nn.Linear(4, 2)
    """
)
PROBE_DATA = textwrap.dedent(
    """
    import torch
    from torch.utils.data import TensorDataset

    def build():
        generator = torch.Generator().manual_seed(0)
        features = torch.randn(64, 4, generator=generator)
        return TensorDataset(features, (features[:, 0] > 0).long()), None
    """
)


def test_a_hostile_bundle_sees_nothing_of_the_service(embedded_stack: Stack, tmp_path: Path) -> None:
    bundle = tmp_path / "hostile"
    bundle.mkdir()
    (bundle / "probe.py").write_text(PROBE)
    (bundle / "data.py").write_text(PROBE_DATA)
    database = embedded_stack.env["TRAINYARD_DATABASE_URL"].removeprefix("sqlite:///")
    spec = {
        "name": "hostile",
        "model": {
            "factory": "probe:build",
            "kwargs": {
                "database": database,
                "runs_dir": embedded_stack.env["TRAINYARD_RUNS_DIR"],
                "api_port": int(embedded_stack.url.rsplit(":", 1)[1]),
            },
        },
        "data": {"factory": "data:build", "loader_workers": 0},
        "train": {"max_steps": 2, "batch_size": 8},
        "checkpoint": {"every_n_epochs": 0, "save_final": False},
    }
    path = tmp_path / "hostile.json"
    path.write_text(json.dumps(spec))
    run = trainyard(embedded_stack, "submit", path, "--code", bundle, "--follow", timeout=300)
    assert run.returncode == 0, run.stdout + run.stderr
    job_id = job_id_of(run.stdout)

    with embedded_stack.client() as client:
        log = client.get(f"/v1/jobs/{job_id}/logs", params={"rank": 0}).json()["text"]
    seen = {line for line in log.splitlines() if line.startswith("PROBE")}
    assert seen == {
        "PROBE read database: refused (FileNotFoundError)",
        f"PROBE runs visible: {[str(job_id)]}",
        "PROBE read pid 1 environ: refused (PermissionError)",
        "PROBE write /usr: refused (OSError)",
        "PROBE reach the API: refused (ConnectionRefusedError)",
        "PROBE secrets in environment: []",
    }, log
