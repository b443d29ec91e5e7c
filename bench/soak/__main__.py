"""`python -m bench.soak [--minutes 30] [--db sqlite|postgres] [--seed 0] [--out var/soak/<db>-<time>]
[--light]`: a soak of the whole service under a mixed load and random kills (bench/soak/run.py); prints the
table of checks, writes report.json and summary.md under --out, and exits 1 when an invariant failed."""

from __future__ import annotations

import argparse
import shutil
import sys
import time
from pathlib import Path

from bench.soak.profile import FULL, LIGHT
from bench.soak.report import markdown, write
from bench.soak.run import soak
from bench.soak.stack import Db


def main() -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.soak", description=__doc__)
    parser.add_argument("--minutes", type=float, default=30.0, help="how long the load and the kills last")
    parser.add_argument("--db", type=Db, choices=list(Db), default=Db.SQLITE)
    parser.add_argument("--seed", type=int, default=0, help="of the kill schedule, the victims and the load")
    parser.add_argument("--out", type=Path, help="default: var/soak/<db>-<UTC time>")
    parser.add_argument("--keep", action="store_true", help="keep the service's files (runs, logs, database)")
    parser.add_argument(
        "--light",
        action="store_true",
        help="the light load `make test` runs (bench/soak/profile.py): fewer users, jobs and pages",
    )
    args = parser.parse_args()
    if args.minutes <= 0:
        parser.error(f"--minutes {args.minutes:g}: give a positive number of minutes, e.g. --minutes 3")
    out: Path = args.out or Path("var/soak") / f"{args.db}-{time.strftime('%Y%m%dT%H%M%SZ', time.gmtime())}"
    workdir = out / "service"
    outcome = soak(args.minutes, args.db, args.seed, workdir.resolve(), LIGHT if args.light else FULL)
    write(outcome, out)
    if not args.keep and outcome.ok:
        shutil.rmtree(workdir, ignore_errors=True)
    print(markdown(outcome))
    print(f"report: {out / 'report.json'}", file=sys.stderr)
    return 0 if outcome.ok else 1


if __name__ == "__main__":
    sys.exit(main())
