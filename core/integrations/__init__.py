"""What the service sends to other systems, as rows in SQL alone: the webhook outbox (`webhook_outbox.py`, a
delivery per matching webhook, written in a state change's own transaction) and the events a webhook may ask
for (`webhook_events.py`); the MLflow export's rows (`mlflow_outbox.py`: which jobs become runs, which one an
exporter works on, which metric rows are unsent). The senders, which talk to the receivers and to MLflow, are
in app/services/integrations/. No imports here: core.transitions reaches the outbox through this package."""
