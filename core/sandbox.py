"""The bubblewrap sandbox around a job's torchrun: a pure builder of the command's prefix, as core/launch.py.

What the ranks of a sandboxed job see, on a root of bwrap's own that is read-only and empty otherwise: the
host's system (/usr, its libraries, /sys and the few files of /etc that programs read to start) and the
Python environment, read-only; of the project only the runtime packages the ranks import; this job's run
directory read-write; its bundle, its data and exactly the checkpoint file it resumes from read-only; their
own /tmp, process table, SysV IPC and /dev/shm; only their own GPUs' device files; no network but loopback
unless the job spans hosts or reads its data from an object store; a uid of no account. Nothing else of the
host is there at all: not its other folders, not the service's state, not the worker's home.
docs/security.md is the threat model and says why each flag is there.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from pathlib import Path

from sqlalchemy.engine import make_url

from core.config import Settings
from core.launch import Launch

# Empty and the job's alone, writable by any of its uids as on any host: /tmp, and POSIX shared memory, which
# NCCL and the data loaders' workers pass tensors through.
SCRATCH = (Path("/tmp"), Path("/dev/shm"))
# The host's system, shown read-only where present: programs and libraries (on a merged-/usr system the
# top-level ones are links into /usr, and are made as links), and /sys, where the GPU driver and NCCL read
# the machine's topology.
SYSTEM_FOLDERS = tuple(
    Path(p) for p in ("/usr", "/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32", "/sys")
)
# What programs read of /etc to start and to name hosts (a multi-host job resolves its peers): the dynamic
# linker's cache, the time zone, certificates, the name service's files. The rest of /etc is the host's.
SYSTEM_ETC = tuple(
    Path("/etc", name)
    for name in (
        *("ld.so.cache", "ld.so.conf", "ld.so.conf.d", "alternatives", "localtime", "ssl", "ca-certificates"),
        *("nsswitch.conf", "host.conf", "gai.conf", "hosts", "resolv.conf", "passwd", "group"),
    )
)
# The GPU driver's shared device files, bound when present: a CUDA context needs the first two.
GPU_SUPPORT_FILES = ("/dev/nvidiactl", "/dev/nvidia-uvm", "/dev/nvidia-uvm-tools", "/dev/nvidia-modeset")


@dataclass(frozen=True)
class Rlimits:
    processes: int  # RLIMIT_NPROC: threads count too; per job in a user namespace, else per job uid
    open_files: int  # RLIMIT_NOFILE, per process
    file_bytes: int  # RLIMIT_FSIZE: a larger write fails with EFBIG


@dataclass(frozen=True)
class GpuDevice:
    uuid: str  # what CUDA_VISIBLE_DEVICES names: CUDA numbers only the GPUs it can open, from 0
    path: str  # its device file, /dev/nvidia<minor>


@dataclass(frozen=True)
class HostSystem:
    """What SYSTEM_FOLDERS and SYSTEM_ETC are on this host (worker/sandbox.py reads it)."""

    shown: tuple[Path, ...]  # real folders and files, bound read-only
    links: tuple[tuple[Path, str], ...] = ()  # (path, its target): /bin -> usr/bin


@dataclass(frozen=True)
class BoundFile:
    """A file bound read-only from a descriptor the worker opened without following any link, so that what
    the job sees is the file checked, whatever its name leads to by the time bwrap runs."""

    fd: int
    path: Path  # where the job sees it: the path the plan names


@dataclass(frozen=True)
class Sandbox:
    run_dir: Path  # the one writable place
    cwd: Path  # where torchrun starts: the project root, so `-m trainers.run` imports
    limits: Rlimits
    system: HostSystem
    state: tuple[Path, ...]  # the service's own folders: hidden where a shown folder holds them
    shown: tuple[Path, ...] = ()  # read-only: the project's runtime packages, the Python environment
    read_only: tuple[Path, ...] = ()  # the job's bundle and data root
    resume: BoundFile | None = None  # the checkpoint it resumes from, when that lies outside its run dir
    gpus: tuple[GpuDevice, ...] = ()
    gpu_support: tuple[str, ...] = ()  # those of GPU_SUPPORT_FILES present on the host
    # A multi-host job (its ranks and rendezvous reach other hosts), or one whose data is in an object store.
    share_network: bool = False
    run_as: int | None = None  # a root worker's job uid; None: the worker's own, in a user namespace


def service_state(settings: Settings) -> list[Path]:
    """The folders that hold the service's state on this host: stores, the SQLite database, the broker."""
    folders = [settings.runs_dir, settings.code_dir, settings.data_dir]
    for url in (settings.database_url, settings.broker_url.removeprefix("sqla+")):
        parsed = make_url(url)
        if parsed.get_backend_name() == "sqlite" and parsed.database not in (None, "", ":memory:"):
            folders.append(Path(str(parsed.database)).resolve().parent)
    return folders


def _outermost(paths: tuple[Path, ...]) -> list[Path]:
    """Each path once, leaving out those inside another: one tmpfs over the outer hides them all."""
    unique = sorted(set(paths), key=lambda p: (len(p.parts), str(p)))  # the same argv every time
    return [p for i, p in enumerate(unique) if not any(p.is_relative_to(q) for q in unique[:i])]


def _check(box: Sandbox) -> None:
    needed = (box.cwd, *box.shown)
    for folder in box.state:
        for path in needed:
            if path.is_relative_to(folder):
                raise ValueError(
                    f"the service's state folder {folder} holds {path}, which sandboxed jobs must see; move "
                    "the runs, code and data folders, the SQLite database and the broker out of the project "
                    "and the Python environment (TRAINYARD_RUNS_DIR, _CODE_DIR, _DATA_DIR, _DATABASE_URL, "
                    "_BROKER_URL)"
                )


class _Mounts:
    """bwrap's mount arguments, in order. bwrap applies them in turn, and a bind's source is always the
    host's path, never what an earlier tmpfs covered: show, then hide what a shown folder holds of the
    service's state, then show again the job's own.

    bwrap makes the missing folders on the way to a mount point with mode 0700, its own, which the job's uid
    could not pass; inside a fresh tmpfs (the sandbox's root is one) each is made first with --dir (0755):
    they hold nothing but the way.
    """

    def __init__(self) -> None:
        self.args = ["--dev", "/dev", "--proc", "/proc"]
        self._mounted: dict[Path, bool] = {Path("/"): True}  # mount point -> is a fresh tmpfs
        self._made: set[Path] = set()

    def _way_to(self, dest: Path) -> None:
        below = max(
            (m for m in self._mounted if dest.is_relative_to(m) and m != dest), key=lambda m: len(m.parts)
        )
        if not self._mounted[below]:
            return
        for folder in reversed(dest.parents):
            if folder.is_relative_to(below) and folder != below and folder not in self._made:
                self.args += ["--dir", str(folder)]
                self._made.add(folder)

    def tmpfs(self, folder: Path) -> None:
        self._way_to(folder)
        self.args += ["--tmpfs", str(folder)]
        self._mounted[folder] = True

    def bind(self, option: str, path: Path, source: str | None = None) -> None:
        self._way_to(path)
        self.args += [option, source or str(path), str(path)]
        self._mounted[path] = False

    def link(self, path: Path, target: str) -> None:
        self._way_to(path)
        self.args += ["--symlink", target, str(path)]


def _mounts(box: Sandbox) -> list[str]:
    mounts = _Mounts()
    for path in box.system.shown:
        mounts.bind("--ro-bind", path)
    for path, target in box.system.links:
        mounts.link(path, target)
    for folder in SCRATCH:
        mounts.tmpfs(folder)
        mounts.args += ["--chmod", "1777", str(folder)]
    shown = [p for p in _outermost(box.shown) if not any(p.is_relative_to(s) for s in box.system.shown)]
    for path in shown:
        mounts.bind("--ro-bind", path)
    for folder in _outermost(box.state):
        if any(folder.is_relative_to(path) for path in shown):
            mounts.tmpfs(folder)
    mounts.bind("--bind", box.run_dir)
    for path in box.read_only:
        mounts.bind("--ro-bind", path)
    if box.resume is not None:
        mounts.bind("--ro-bind-fd", box.resume.path, str(box.resume.fd))
    for device in (*(gpu.path for gpu in box.gpus), *box.gpu_support):
        mounts.args += ["--dev-bind", device, device]
    mounts.args += ["--remount-ro", "/"]  # the root's folders are the way to mounts, never a place to write
    return mounts.args


def sandbox_argv(box: Sandbox, info_fd: int | None = None) -> list[str]:
    """What goes before the torchrun command; with `info_fd`, bwrap writes there, as JSON, the host's pid of
    the sandbox's first process (worker/executors/local/warm/held_sandbox.py enters its namespaces)."""
    _check(box)
    if box.run_as is None:
        # The worker's own uid, mapped in a user namespace of the job's: bwrap needs one to sandbox at all.
        user_namespace, switch_user = ["--unshare-user"], []
    else:
        # bwrap runs as root, so that it can bind what only root may read (the Python environment under
        # /root, a 0700 runs folder), and the job's uid is taken inside, with no capability left to regain.
        uid = box.run_as
        user_namespace = []
        switch_user = [
            *("setpriv", f"--reuid={uid}", f"--regid={uid}", "--clear-groups"),
            *("--inh-caps=-all", "--bounding-set=-all", "--no-new-privs", "--"),
        ]
    limits = box.limits
    return [
        # bwrap itself would die of the SIGTERM that asks the job to stop, and take the sandbox with it
        # (--die-with-parent) before the ranks save their final checkpoint: it ignores it, torchrun inside
        # gets it back below, and bwrap ends when torchrun does.
        *("env", "--ignore-signal=TERM"),
        "bwrap",
        *([] if info_fd is None else ["--info-fd", str(info_fd)]),
        *user_namespace,
        *("--unshare-pid", "--unshare-ipc"),
        *([] if box.share_network else ["--unshare-net"]),
        "--die-with-parent",
        *_mounts(box),
        *("--chdir", str(box.cwd)),
        "--",
        *switch_user,
        *("env", "--default-signal=TERM"),
        "prlimit",
        f"--nproc={limits.processes}",
        f"--nofile={limits.open_files}",
        f"--fsize={limits.file_bytes}",
        "--core=0",
        "--",
    ]


def confine(command: Launch, box: Sandbox) -> Launch:
    """`command` run inside the sandbox; its GPUs named by UUID when it has any (see GpuDevice); the file it
    resumes from handed to bwrap as a descriptor."""
    env = command.env
    if box.gpus:
        env = {**env, "CUDA_VISIBLE_DEVICES": ",".join(gpu.uuid for gpu in box.gpus)}
    fds = () if box.resume is None else (box.resume.fd,)
    return replace(command, argv=[*sandbox_argv(box), *command.argv], env=env, pass_fds=fds)
