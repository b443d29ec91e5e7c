"""bench.api_load checks every answer: a wrong one is counted as a failure and named under the table."""

from __future__ import annotations

import argparse
import os

import pytest

from bench.api_load import ALL_CPUS, Phase, check_job, cpu_list, host_label, results_table
from bench.lean_http import Reply


def test_a_lookup_must_answer_200_with_the_job_asked_for() -> None:
    check = check_job([5, 6])
    assert check(0, Reply(200, b'{"id": 5, "name": "x"}')) is None
    assert check(1, Reply(200, b'{"id": 5}')) == "HTTP 200 with another job than the one asked for"
    assert check(1, Reply(500, b"oops")) == "HTTP 500"
    assert check(1, Reply(200, b"<html>")) == "HTTP 200 without a job id at id"


def test_failures_are_listed_under_the_table_with_both_sides_cpu() -> None:
    phase = Phase("GET", 4, 2, 1.0, [1.0, 2.0, 3.0], 0.004, 0.002, {"HTTP 500": 1, "ProtocolError": 1})
    table = results_table([phase])
    assert table.splitlines()[2] == "| GET | 2/4 | 2 | 2.0 | 3.0 | 3.0 | 1.00 | 0.50 |"
    assert table.endswith("Failed: GET: 1 x HTTP 500, 1 x ProtocolError")


def test_the_heading_names_the_host_it_ran_on_not_a_2_core_machine() -> None:
    label = host_label(3.25)
    assert label.startswith(f"{os.cpu_count()}-core host (")
    assert label.endswith("load average 3.2 at the start")


def test_client_cpus_are_a_comma_list_of_cpus_this_process_may_use() -> None:
    first = min(ALL_CPUS)
    assert cpu_list(f"{first}") == {first}
    with pytest.raises(argparse.ArgumentTypeError, match="not a comma list of CPU numbers"):
        cpu_list("0-1")
    with pytest.raises(argparse.ArgumentTypeError, match="may only run on CPUs"):
        cpu_list(str(max(ALL_CPUS) + 1))
