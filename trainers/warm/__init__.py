"""Warm start, the processes' side: the processes that import torch before their job exists, so that a job's
start waits for none of it. The worker starts and supervises them from worker/executors/local/warm/, without
importing torch.

Which module runs in which process, and who starts whom:

- `factory.py`, `python -m trainers.warm.factory`: started once by the worker
  (worker/executors/local/warm/factory_handle.py); imports torch and the trainer, then forks each standby.
- `standby.py`: each standby, a fork of the factory (`serve`); it blocks on its stdin until the worker's
  launcher (worker/executors/local/warm/launcher.py) hands it a job, then runs torchrun's main() in itself.
- `enter.py`: for a sandboxed job, the standby's child, which enters the sandbox the worker holds
  (worker/executors/local/warm/held_sandbox.py) and runs the job's torchrun there.
- `forked.py`: imported by each rank (trainers/run.py), forked by that torchrun (its fork start method) rather
  than started as an interpreter of its own.
"""
