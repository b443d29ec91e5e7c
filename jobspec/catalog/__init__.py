"""The catalogue: what the service knows about each built-in architecture (archs.py) and dataset
(datasets.py), as plain data keyed by a StrEnum. The spec, the planner, the stage splitter and the reference
docs read it; the torch builders (trainers/models, trainers/data) are keyed by the same enums. No torch: the
API imports it.
"""
