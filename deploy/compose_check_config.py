"""docker-compose.yml as `docker-compose config` resolved it, made runnable on a box without GPUs or an image
registry, for deploy/compose_check.sh: everything else (commands, users, healthchecks, volumes, the order of
start) stays as shipped, since that is what the check is for.

    python deploy/compose_check_config.py --api-port 18000 --base IMAGE --image IMAGE \
        --postgres IMAGE --redis IMAGE < resolved.yml > check.yml
"""

from __future__ import annotations

import argparse
import resource
import sys
from pathlib import Path
from typing import Any

import yaml


def for_check(config: dict[str, Any], args: argparse.Namespace) -> dict[str, Any]:
    services: dict[str, Any] = config["services"]
    worker = services["worker"]
    # Docker refuses to start a container whose GPU reservation no driver can satisfy.
    worker.pop("deploy")
    # docker-compose 1.x (Debian's, which runs this check) hands this option to the daemon, which refuses
    # it ("invalid --security-opt"); Compose 2.15 and later apply it themselves. Only jobs with a code
    # bundle need it (bubblewrap's fresh /proc), and the check runs none.
    worker["security_opt"] = [opt for opt in worker["security_opt"] if opt != "systempaths=unconfined"]
    if args.memlock_ceiling is not None:
        worker["ulimits"]["memlock"] = args.memlock_ceiling
    services["postgres"]["image"] = args.postgres
    services["redis"]["image"] = args.redis
    # Nothing outside needs them here, and a host's own PostgreSQL or Redis may hold 5432 and 6379.
    for name in ("postgres", "redis"):
        services[name].pop("ports")
    for service in services.values():
        if service.get("image") == "trainyard:latest":
            # Its own tag: a real deployment's trainyard:latest, built on the CUDA base, stays as it is.
            service["image"] = args.image
            service["build"]["args"] = {"BASE_IMAGE": args.base}
    services["api"]["ports"] = [f"127.0.0.1:{args.api_port}:8000"]
    return config


def memlock_ceiling() -> int | None:
    """The most locked memory a container may get where the engine, started from here, cannot raise it:
    without CAP_SYS_RESOURCE (a sandboxed host) runc fails on `memlock: -1` ("error setting rlimit type
    8"). None where it can."""
    status = Path("/proc/self/status").read_text()
    effective = int(next(line.split()[1] for line in status.splitlines() if line.startswith("CapEff:")), 16)
    hard = resource.getrlimit(resource.RLIMIT_MEMLOCK)[1]
    cap_sys_resource = 24
    if effective >> cap_sys_resource & 1 or hard == resource.RLIM_INFINITY:
        return None
    return hard


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--api-port", type=int, required=True, help="published on 127.0.0.1")
    for image in ("base", "image", "postgres", "redis"):
        parser.add_argument(f"--{image}", required=True)
    args = parser.parse_args()
    args.memlock_ceiling = memlock_ceiling()
    yaml.safe_dump(for_check(yaml.safe_load(sys.stdin), args), sys.stdout, sort_keys=False)


if __name__ == "__main__":
    main()
