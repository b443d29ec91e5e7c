"""The API's side of what the service sends to other systems, each a thread of every API process over the rows
of core/integrations/. Webhooks: a user's webhooks (`webhooks.py`), where one may send
(`webhook_destinations.py`), the sender thread (`webhook_sender.py`) and one attempt (`webhook_attempt.py`).
MLflow: the exporter thread (`mlflow_exporter.py`), one pass of a job's export (`mlflow_runs.py`) and what a
run shows of a job (`mlflow_params.py`)."""
