"""What every executor shares about an attempt, written once: starting one (queued -> starting), its events
pumped into SQL with its uploads and its pruner, its runtime deadline, the queue's own limit, and how it ends.

worker/executors/local and worker/executors/slurm both stand on these, and neither imports the other."""
