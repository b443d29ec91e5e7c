"""The Slurm executor (TRAINYARD_EXECUTOR=slurm): jobs handed to Slurm with sbatch and followed to their end.

`follow.py` is the worker's side on the login node, `node.py` the task that runs on each node of an
allocation, `commands.py` Slurm's own commands, `outcomes.py` what each Slurm state means for the job."""
