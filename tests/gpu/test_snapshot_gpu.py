"""A checkpoint snapshot on the GPU: training that goes on in place never changes what is written."""

from __future__ import annotations

import pytest
import torch

from trainers import snapshot
from trainers.snapshot import Snapshot

pytestmark = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")


@pytest.mark.parametrize("room", [True, False], ids=["device-clone", "pinned-host"])
def test_snapshot_holds_the_state_of_when_it_was_taken(room: bool, monkeypatch: pytest.MonkeyPatch) -> None:
    if not room:
        monkeypatch.setattr(snapshot, "CLONE_HEADROOM", 10**9)  # as if the GPU were full
    weight = torch.randn(256, 128, 3, 3, device="cuda").contiguous(memory_format=torch.channels_last)
    state = {"model": {"w": weight}, "optimizer": {"state": {0: {"momentum": weight * 2}}}, "step": 3}
    expected = {"w": weight.cpu(), "momentum": (weight * 2).cpu()}
    taken = Snapshot.take(state)
    for _ in range(20):  # the steps that follow update the state in place while the copy is in flight
        weight.mul_(1.5).add_(1.0)
        state["optimizer"]["state"][0]["momentum"].zero_()
    host = taken.on_host()
    assert host["step"] == 3
    assert host["model"]["w"].device.type == "cpu"
    assert torch.equal(host["model"]["w"], expected["w"])
    assert torch.equal(host["optimizer"]["state"][0]["momentum"], expected["momentum"])
