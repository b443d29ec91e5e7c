"""Sweeps: a hyperparameter search whose trials are ordinary jobs.

- spec.py: the request (SweepSpec), its space counted, never listed; Optuna-free.
- told.py: a trial's end, recorded in the transaction of the state change that ends its job (light imports:
  core/transitions.py uses it).
- asks.py: the next trials, asked of Optuna and planned outside any write, then recorded in short writes;
  run by the API at creation and by the workers' reconciler (worker/reconcilers.py) after a trial's end.
- study.py: Optuna itself (imported only where a sweep is asked something or pruned).
- rows.py: reads of a sweep's rows: its trials, and their reports of the objective summed up by the database.
"""
