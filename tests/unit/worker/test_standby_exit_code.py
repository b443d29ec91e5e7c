"""A forked standby's exit code is the factory's word, which comes after its pidfd says it ended: on a
loaded box that word took over 5 s, and a job that had finished was recorded failed with LOST_EXIT_CODE. The
worker now waits for it while the factory lives, and not at all once the factory is known dead. A real child
process plays the standby; the factory's messages are played by the calls its reader thread makes."""

from __future__ import annotations

import subprocess
import threading
import time

from worker.executors.local.warm.factory_handle import LOST_EXIT_CODE, ForkedStandby

LATE_S = 6.0  # past the 5 s the worker used to wait


def ended_standby() -> tuple[ForkedStandby, subprocess.Popen[bytes]]:
    child = subprocess.Popen(["true"])
    standby = ForkedStandby("a" * 32)
    standby._set_forked(child.pid)
    while not standby._ended():  # its pidfd readable: it exited, not yet reaped
        time.sleep(0.01)
    return standby, child


def test_an_exit_code_that_comes_late_is_the_one_recorded() -> None:
    standby, child = ended_standby()
    threading.Timer(LATE_S, standby._set_exit, (0,)).start()
    assert standby.poll() == 0
    child.wait()


def test_a_standby_whose_factory_died_ends_lost_at_once() -> None:
    standby, child = ended_standby()
    standby._factory_gone()
    started = time.monotonic()
    assert standby.poll() == LOST_EXIT_CODE
    assert time.monotonic() - started < LATE_S
    child.wait()
