"""The ranks' own environment variables: plain values, stored and shown as given, or references to the
owner's secrets (`{"secret": "hf-token"}`), which the worker resolves when it launches the attempt and which
reach only the ranks' environment (docs/secrets.md). No torch, no database: the API validates these.
"""

from __future__ import annotations

import re
from typing import Annotated

from pydantic import AfterValidator, Field

from jobspec.spec_fields import Section

# A secret's name, as POST /v1/secrets takes it and a reference names it.
SECRET_NAME_PATTERN = r"^[a-z0-9][a-z0-9_.-]{0,63}$"
MAX_ENV = 64
# Linux takes one environment string of at most 128 KiB (MAX_ARG_STRLEN); a secret is capped at half.
MAX_SECRET_BYTES = 64 * 1024
MAX_PLAIN_VALUE = 4096

# What the launcher sets for every rank (core/launch.py::launch_env, and torchrun's own per-rank variables),
# or what decides which code runs: a job's env may not replace them. tests/unit/core/test_secret_env.py
# checks that every name launch_env sets is here.
RESERVED_NAMES = frozenset(
    {
        *("PATH", "HOME", "CUDA_VISIBLE_DEVICES", "CUDA_DEVICE_ORDER", "OMP_NUM_THREADS"),
        *("TORCHELASTIC_ERROR_FILE", "TORCHINDUCTOR_CACHE_DIR", "TORCHINDUCTOR_COMPILE_THREADS"),
        *("HF_HUB_OFFLINE", "TRANSFORMERS_OFFLINE"),
        *("RANK", "LOCAL_RANK", "WORLD_SIZE", "LOCAL_WORLD_SIZE", "GROUP_RANK", "ROLE_RANK"),
        *("ROLE_WORLD_SIZE", "GROUP_WORLD_SIZE", "ROLE_NAME", "MASTER_ADDR", "MASTER_PORT"),
        *("TORCH_NCCL_TRACE_BUFFER_SIZE", "TORCH_NCCL_DUMP_ON_TIMEOUT", "TORCH_NCCL_DEBUG_INFO_TEMP_FILE"),
    }
)
RESERVED_PREFIXES = ("TRAINYARD_", "LD_", "PYTHON", "TORCHELASTIC_")
_ENV_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]{0,127}")


def reserved(name: str) -> bool:
    return name in RESERVED_NAMES or name.startswith(RESERVED_PREFIXES)


class SecretRef(Section):
    """A variable of `env` whose value is a secret's: `{"secret": NAME}`. The worker resolves it when it
    starts each attempt and hands the value to the ranks' environment alone; the stored spec, the plan,
    events and MLflow keep the reference, and the job's logs show `****` where the value was printed
    (docs/secrets.md)."""

    secret: str = Field(
        pattern=SECRET_NAME_PATTERN,
        description="the name of a secret of yours (POST /v1/secrets), or one an admin shared",
    )


def _env_names(env: dict[str, str | SecretRef]) -> dict[str, str | SecretRef]:
    for name in env:
        if not _ENV_NAME.fullmatch(name):
            raise ValueError(
                f"env.{name}: not an environment variable's name; use letters, digits and _, not starting "
                "with a digit (128 characters at most)"
            )
        if reserved(name):
            raise ValueError(
                f"env.{name}: set by Trainyard for every rank (TRAINYARD_*, CUDA_VISIBLE_DEVICES, PATH, "
                "LD_*, PYTHON*, HOME, torchrun's RANK and WORLD_SIZE, ...); pick another name and read it "
                "in your code"
            )
    return env


JobEnv = Annotated[
    dict[str, Annotated[str, Field(max_length=MAX_PLAIN_VALUE)] | SecretRef],
    Field(
        max_length=MAX_ENV,
        description="the ranks' environment variables: a plain value (stored and shown as given), or "
        '{"secret": NAME}, a secret\'s value that reaches only the ranks and is masked in their logs',
    ),
    AfterValidator(_env_names),
]


def secret_refs(env: dict[str, str | SecretRef]) -> dict[str, str]:
    """The variables that name a secret, with the secret each names."""
    return {name: value.secret for name, value in env.items() if isinstance(value, SecretRef)}


def plain_env(env: dict[str, str | SecretRef]) -> dict[str, str]:
    return {name: value for name, value in env.items() if isinstance(value, str)}
