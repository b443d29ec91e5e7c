"""The shared core under the API and the worker: settings, SQL models and sessions, job states and their
transitions, artifact storage, host inventory, API keys, the pure torchrun argv builder, and the doorbell that
enqueues by task name."""
