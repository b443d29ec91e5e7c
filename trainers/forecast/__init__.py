"""A job's forecast (issue 44): one real training step of its own model traced under fake tensors, on the API
or worker host, without allocating the weights or needing a GPU; its memory by category and its FLOPs, turned
into each device's peak and the step's time. `python -m trainers.forecast` is the entry point the service
runs (jobspec/forecast.py is what it answers)."""
