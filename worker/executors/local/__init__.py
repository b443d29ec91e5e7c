"""The local executor (TRAINYARD_EXECUTOR=local, the default): every GPU host runs a worker that claims
queued jobs in start order, leases their GPUs, starts torchrun on each node and supervises it; a reaper
requeues what a dead worker left."""
