"""A hostile rank: run inside the sandbox by tests/integration/test_sandbox_escape.py, it tries everything its
plan (a JSON file, argv[1]) lists and writes down what it saw (argv[2]). It imports nothing of the project: it
stands for user code, which could have been anything."""

from __future__ import annotations

import errno
import json
import os
import signal
import socket
import sys
import time
from collections.abc import Callable
from typing import Any

seen: dict[str, Any] = {}


def attempt(name: str, action: Callable[[], object]) -> None:
    try:
        seen[name] = {"ok": True, "value": action()}
    except OSError as exc:
        seen[name] = {"ok": False, "error": errno.errorcode.get(exc.errno or 0, type(exc).__name__)}


def read(path: str) -> str:
    with open(path, "rb") as file:
        return file.read(1 << 16).decode("utf-8", errors="replace")


def write(path: str) -> str:
    with open(path, "w") as file:
        file.write("pwned\n")
    return path


def connect(address: str, port: int) -> bool:
    with socket.create_connection((address, port), timeout=3) as connection:
        connection.sendall(b"pwned\n")
    return True


def fork_until_refused(most: int) -> dict[str, Any]:
    """Children that sleep, until fork fails; then they are killed and reaped."""
    children, refused = [], None
    while len(children) < most:
        try:
            pid = os.fork()
        except OSError as exc:
            refused = errno.errorcode[exc.errno or 0]
            break
        if pid == 0:
            time.sleep(120)
            os._exit(0)
        children.append(pid)
    for pid in children:
        os.kill(pid, signal.SIGKILL)
        os.waitpid(pid, 0)
    return {"forked": len(children), "refused": refused}


def write_past(path: str, size: int) -> dict[str, Any]:
    written, refused = 0, None
    with open(path, "wb", buffering=0) as file:
        try:
            while written < size:
                written += file.write(b"x" * 65536)
        except OSError as exc:  # Python ignores SIGXFSZ, so an over-limit write fails with EFBIG
            refused = errno.errorcode[exc.errno or 0]
    return {"written": written, "refused": refused}


def main() -> None:
    plan = json.loads(read(sys.argv[1]))
    for name, path in plan["read"].items():
        attempt(f"read {name}", lambda path=path: read(path))
    for name, path in plan["write"].items():
        attempt(f"write {name}", lambda path=path: write(path))
    for name, pid in plan["kill"].items():
        attempt(f"kill {name}", lambda pid=pid: os.kill(pid, signal.SIGKILL))
    for name, (address, port) in plan["connect"].items():
        attempt(f"connect {name}", lambda address=address, port=port: connect(address, port))
    attempt("setuid 0", lambda: os.setuid(0))
    attempt("open /dev/tty", lambda: os.open("/dev/tty", os.O_RDWR))
    seen["environ"] = dict(os.environ)
    seen["uid"] = os.getuid()
    seen["status"] = [
        line for line in read("/proc/self/status").splitlines() if line.startswith(("Cap", "No"))
    ]
    seen["pids"] = sorted(int(name) for name in os.listdir("/proc") if name.isdigit())
    seen["devices"] = sorted(os.listdir("/dev"))
    seen["listed"] = {folder: sorted(os.listdir(folder)) for folder in ("/", "/etc", os.getcwd())}
    seen["fork"] = fork_until_refused(plan["fork_at_most"])
    seen["big file"] = write_past(plan["big_file"], plan["big_file_bytes"])
    with open(sys.argv[2], "w") as report:
        json.dump(seen, report)


if __name__ == "__main__":
    main()
