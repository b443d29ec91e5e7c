"""Warm start, the worker's side: the local executor starts a job's torchrun in a process that imported torch
before the job existed. The processes themselves are trainers/warm/ (they import torch; the worker never
does).

Which module runs in which process, and who starts whom:

- the worker: `launcher.py` (WarmLauncher) keeps standbys ready and hands a job to one, or starts torchrun
  cold when none is; `factory_handle.py` starts the factory and asks it for each standby (StandbyFactory),
  and supervises a forked standby as a process it had started (ForkedStandby); `held_sandbox.py` starts a
  sandboxed job's own bwrap sandbox with a holder in it, for the standby to enter.
- the factory, `python -m trainers.warm.factory`, started once by the worker: imports torch and the trainer,
  then forks every standby from itself and tells the worker how each ended.
- a standby, forked by the factory (trainers/warm/standby.py::serve): blocks on its stdin until the launcher
  hands it a job, then runs torchrun's main() in itself; a sandboxed job's torchrun runs in a child that
  entered the held sandbox (trainers/warm/enter.py).
- the ranks, forked by that torchrun (its fork start method) as `-m trainers.run`; trainers/warm/forked.py is
  what such a rank does differently.
"""
