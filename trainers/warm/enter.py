"""A forked child of the warm standby enters a job's running sandbox and becomes what bwrap would have run
there: the sandbox's namespaces, its root and working directory, the job's uid, no capability, no new
privileges and the job's resource limits, in the order that keeps each step allowed.

worker/executors/local/warm/held_sandbox.py starts the job's very bubblewrap command (core/sandbox.py) with a
holder in place of torchrun, and hands the standby descriptors of that holder's namespaces. The view is
bwrap's own; only the way in differs: setns(2) and the credential changes that `setpriv` and `prlimit` make in
the cold command.
"""

from __future__ import annotations

import ctypes
import fcntl
import os
import platform
import resource
import signal
import sys
import traceback
from collections.abc import Callable
from dataclasses import dataclass

# setns(2) types, in the order they are entered: the user namespace that owns the others first (its
# capabilities allow the rest), the mount namespace late (it moves the root), the pid namespace, which only
# the children of the caller join, last.
NAMESPACES = {"ipc": 0x08000000, "net": 0x40000000, "mnt": 0x00020000, "pid": 0x20000000}
CLONE_NEWUSER = 0x10000000
NS_GET_USERNS = 0xB701  # ioctl: the user namespace that owns a namespace
PR_CAPBSET_DROP, PR_SET_NO_NEW_PRIVS, PR_CAP_AMBIENT, PR_CAP_AMBIENT_CLEAR_ALL = 24, 38, 47, 4
CAPABILITY_VERSION_3 = 0x20080522
SYS_CAPSET = {"x86_64": 126, "aarch64": 91}  # no libc wrapper is exported for it


@dataclass(frozen=True)
class Confinement:
    """What the sandbox's command applies inside bwrap (core/sandbox.py::sandbox_argv): `setpriv` to `uid`
    when the worker is root, else the worker's own uid mapped in the sandbox's user namespace; `prlimit`."""

    cwd: str
    uid: int | None
    processes: int
    open_files: int
    file_bytes: int


_libc = ctypes.CDLL(None, use_errno=True)


def _check(result: int, what: str) -> None:
    if result != 0:
        errno = ctypes.get_errno()
        raise OSError(errno, f"{what}: {os.strerror(errno)}")


def _setns(fd: int, kind: int) -> None:
    _check(_libc.setns(fd, kind), "setns")


def foreign(fds: dict[str, int]) -> set[str]:
    """The namespaces among `fds` (by name: user, ipc, net, mnt, pid) that are not this process's own: a
    multi-host job shares the host's network, and a root worker's sandbox has no user namespace."""
    own = {name: os.stat(f"/proc/self/ns/{name}").st_ino for name in fds}
    return {name for name, fd in fds.items() if os.fstat(fd).st_ino != own[name]}


def join_namespaces(fds: dict[str, int]) -> None:
    """Join the sandbox's namespaces; of its pid namespace, this process's children will be members, not
    itself. Must run single-threaded (a forked child), as setns of a user or mount namespace asks."""
    entering = foreign(fds)
    if "user" in entering:
        # bwrap nests the sandbox's user namespace in the one that owns its other namespaces: join the owner
        # (whose capabilities allow the rest), and the sandbox's own after them.
        owner = fcntl.ioctl(fds["mnt"], NS_GET_USERNS)
        _setns(owner, CLONE_NEWUSER)
        os.close(owner)
    for name, kind in NAMESPACES.items():
        if name in entering:
            _setns(fds[name], kind)
    if "user" in entering:
        _setns(fds["user"], CLONE_NEWUSER)


def _clear_capabilities() -> None:
    header = (ctypes.c_uint32 * 2)(CAPABILITY_VERSION_3, 0)
    data = (ctypes.c_uint32 * 6)()  # effective, permitted, inheritable: twice 32 bits each, all empty
    _check(_libc.syscall(SYS_CAPSET[platform.machine()], header, data), "capset")


def _last_capability() -> int:
    with open("/proc/sys/kernel/cap_last_cap", encoding="ascii") as file:
        return int(file.read())


def confine_self(confinement: Confinement) -> None:
    """Become the job's process, as `setpriv … prlimit …` makes it in the cold command: limits first (as
    the job's uid could only lower them), the bounding set while the capability to drop it is held, then the
    uid, then no capability in any set and no_new_privs."""
    os.chdir(confinement.cwd)
    for limit, value in (
        (resource.RLIMIT_NPROC, confinement.processes),
        (resource.RLIMIT_NOFILE, confinement.open_files),
        (resource.RLIMIT_FSIZE, confinement.file_bytes),
        (resource.RLIMIT_CORE, 0),
    ):
        resource.setrlimit(limit, (value, value))
    for capability in range(_last_capability() + 1):
        _check(_libc.prctl(PR_CAPBSET_DROP, capability, 0, 0, 0), "dropping the bounding set")
    if confinement.uid is not None:
        os.setgroups([])
        os.setresgid(confinement.uid, confinement.uid, confinement.uid)
        os.setresuid(confinement.uid, confinement.uid, confinement.uid)
    _check(_libc.prctl(PR_CAP_AMBIENT, PR_CAP_AMBIENT_CLEAR_ALL, 0, 0, 0), "clearing ambient capabilities")
    _clear_capabilities()
    _check(_libc.prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0), "no_new_privs")


def _exit_status(pid: int) -> int:
    """The child's exit status as a shell (and bwrap, for the command it ran) reports it: 128 + a signal."""
    code = os.waitstatus_to_exitcode(os.waitpid(pid, 0)[1])
    return code if code >= 0 else 128 - code


def _fork_into(body: Callable[[], None]) -> int:
    """`body` in a child, which ends with it; the child's pid. A failure is printed to the job's log."""
    child = os.fork()
    if child == 0:
        try:
            body()
        except BaseException:
            traceback.print_exc()
            sys.stderr.flush()
            os._exit(1)
        os._exit(0)
    return child


def _enter_and_run(body: Callable[[], None], fds: dict[str, int], confinement: Confinement) -> None:
    """In the standby's child: join the sandbox, keep no descriptor of the worker's side (the namespaces',
    the lifeline), become the job's uid, then run `body` in a child of its own, which is in the sandbox's pid
    namespace as this process cannot be; end with its status."""
    join_namespaces(fds)
    os.closerange(3, os.sysconf("SC_OPEN_MAX"))
    confine_self(confinement)

    def job() -> None:
        signal.signal(signal.SIGTERM, signal.SIG_DFL)  # the job's torchrun takes SIGTERM as a cold one does
        body()

    os._exit(_exit_status(_fork_into(job)))


def run_inside(body: Callable[[], None], fds: dict[str, int], confinement: Confinement) -> int:
    """Run `body` (the job's torchrun) inside the sandbox whose namespaces `fds` holds, and return its exit
    status once the sandbox has ended: the standby stays outside, the process the worker supervises.

    `fds` also holds "lifeline", the holder's stdin, which keeps the sandbox up until this process closes
    it, and "ended", bwrap's stdout, which reads end-of-file once bwrap has exited: bwrap's init has then
    taken every process of the sandbox's pid namespace with it, one that left the job's session and cleared
    its environment included, as when a cold job's bwrap ends.
    """
    lifeline, ended = fds.pop("lifeline"), fds.pop("ended")
    # This process and its child only wait: the job's torchrun takes a cancel's SIGTERM and saves a final
    # checkpoint, which their deaths would cut short by tearing the sandbox down.
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    child = _fork_into(lambda: _enter_and_run(body, fds, confinement))
    for fd in fds.values():
        os.close(fd)
    status = _exit_status(child)
    os.close(lifeline)
    while os.read(ended, 4096):
        pass
    os.close(ended)
    return status
