"""What bench.runtime sets up for a hand-written loop: on the CPU (--smoke), one thread, as a job's CPU rank
gets, since a thread per core spin-waits through every op on a loaded box."""

from __future__ import annotations

import torch

from bench.runtime import joined


def test_a_loop_on_the_cpu_runs_one_thread() -> None:
    threads = torch.get_num_threads()
    torch.set_num_threads(2)  # a thread per core of a 2-core box
    try:
        with joined("cpu") as rank:
            assert (rank.device.type, torch.get_num_threads()) == ("cpu", 1)
    finally:
        torch.set_num_threads(threads)
