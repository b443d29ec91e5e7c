"""Throughput benchmarks: the seed articles' loop, a hand-written ceiling, and a Trainyard job."""
