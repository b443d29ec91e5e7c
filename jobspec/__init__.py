"""The job contract: what a job is and how it will run, readable without torch.

The spec (`spec`, `spec_*`), the planner and its checkers (`plan`, `combinations`, `model_fit`, `user_fit`,
`data_plan`, `layout`, `stages`, `cluster`), the catalog of built-in architectures and datasets, the event
schema a job's ranks write (`events`, `startup`, `profile_summary`), and the checks on the files a run leaves
(`files`, `datadir`, `token_files`, `hf_files`, `module_names`). The API, the core and the worker read it; the
torch runtime (`trainers/`) executes a plan made here. It imports neither torch nor numpy (pyproject.toml's
import contracts), so the API and the client distribution load it without the runtime.
"""
