"""`import trainyard.job as ty`: the in-job library, trainers/job (its docstring shows a whole loop), under
the name users import. Its public names are trainers.job's own list, so the two cannot drift apart."""

from trainers.job import *  # noqa: F403
from trainers.job import __all__ as __all__
