"""`trainyard`, the package users import: `trainyard.client` (the REST client), `trainyard.cli` (the
`trainyard` command) and `trainyard.job` (the library a program job's script reports through).

Each module names the project's own code rather than copying it: the client is app/client.py, the CLI
app/cli, the library trainers/job. pyproject.toml maps this folder to the top-level name `trainyard`; the
folder holds no `__init__.py` above it, so it is no part of the `app` package (nor of import-linter's
graph of it). Nothing is imported here: a script that imports trainyard.job inside a job loads no client.
"""
