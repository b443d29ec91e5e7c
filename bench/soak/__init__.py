"""The soak (issue 42): the whole service under a mixed load from several users while its processes are
killed at random, then checked for what must hold whatever happened. `python -m bench.soak --help`."""
