"""The sandbox's command is a pure function of what the job may see: checked here flag by flag, without
starting anything (tests/integration/test_sandbox_escape.py runs it)."""

from __future__ import annotations

from pathlib import Path

import pytest

from core.config import Settings
from core.launch import Launch
from core.sandbox import (
    BoundFile,
    GpuDevice,
    HostSystem,
    Rlimits,
    Sandbox,
    confine,
    sandbox_argv,
    service_state,
)

VAR = Path("/srv/trainyard/var")
RUN_DIR = VAR / "runs" / "7"
BUNDLE = VAR / "code" / "ab12"
DATA_ROOT = VAR / "data" / "cifar"
PROJECT = Path("/root/trainyard")
LIMITS = Rlimits(processes=512, open_files=4096, file_bytes=2**30)
SYSTEM = HostSystem(
    shown=(Path("/usr"), Path("/sys"), Path("/etc/ld.so.cache")),
    links=((Path("/bin"), "usr/bin"), (Path("/lib"), "usr/lib")),
)
VENV = Path("/opt/venv")


def box(**changes: object) -> Sandbox:
    fields: dict[str, object] = {
        "run_dir": RUN_DIR,
        "cwd": PROJECT,
        "limits": LIMITS,
        "system": SYSTEM,
        "state": (VAR / "runs", VAR / "code", VAR / "data", VAR),
        "shown": (PROJECT / "trainers", VENV, Path("/usr/lib/python3")),
        "read_only": (BUNDLE, DATA_ROOT),
        "run_as": 65534,
    }
    return Sandbox(**{**fields, **changes})  # type: ignore[arg-type]


def after(argv: list[str], *args: str) -> int:
    """The index of the first run of `args` in argv; fails the test when there is none."""
    for i in range(len(argv)):
        if argv[i : i + len(args)] == list(args):
            return i
    raise AssertionError(f"{args} not in {argv}")


def test_a_root_worker_sets_up_as_root_and_runs_the_job_as_its_uid() -> None:
    argv = sandbox_argv(box())
    assert argv[:3] == ["env", "--ignore-signal=TERM", "bwrap"]  # see core/sandbox.py: a SIGTERM is the job's
    inside = argv.index("--") + 1
    assert argv[inside : inside + 9] == [
        *("setpriv", "--reuid=65534", "--regid=65534", "--clear-groups"),
        *("--inh-caps=-all", "--bounding-set=-all", "--no-new-privs", "--"),
        "env",
    ]
    assert argv[argv.index("prlimit") - 1] == "--default-signal=TERM"
    assert argv[argv.index("prlimit") :] == [
        *("prlimit", "--nproc=512", "--nofile=4096", f"--fsize={2**30}", "--core=0", "--"),
    ]
    assert "--unshare-user" not in argv
    for flag in ("--unshare-pid", "--unshare-ipc", "--unshare-net", "--die-with-parent"):
        assert argv.index(flag) < inside


def test_a_worker_without_root_maps_its_own_uid_in_a_user_namespace() -> None:
    argv = sandbox_argv(box(run_as=None))
    assert "--unshare-user" in argv and "setpriv" not in argv
    assert argv[argv.index("--") + 1 : argv.index("--") + 3] == ["env", "--default-signal=TERM"]


def test_a_multi_host_job_keeps_the_hosts_network() -> None:
    assert "--unshare-net" in sandbox_argv(box())
    assert "--unshare-net" not in sandbox_argv(box(share_network=True))


def binds(argv: list[str], option: str = "--ro-bind") -> list[str]:
    return [argv[i + 2] for i, arg in enumerate(argv) if arg == option]


def test_the_job_sees_the_system_its_packages_and_its_own_files_and_nothing_else_of_the_host() -> None:
    argv = sandbox_argv(box())
    assert "/" not in binds(argv)  # no `--ro-bind / /`: the root is bwrap's own, empty but for the mounts
    assert binds(argv) == [
        *("/usr", "/sys", "/etc/ld.so.cache", str(VENV), str(PROJECT / "trainers")),
        *(str(BUNDLE), str(DATA_ROOT)),
    ]  # /usr/lib/python3 is seen through /usr; the project root itself is not shown, nor /root
    assert after(argv, "--symlink", "usr/bin", "/bin") < after(argv, "--symlink", "usr/lib", "/lib")
    assert binds(argv, "--bind") == [str(RUN_DIR)]  # the run directory is the one writable place
    assert argv[argv.index("--remount-ro") : argv.index("--remount-ro") + 2] == ["--remount-ro", "/"]
    assert after(argv, "--bind", str(RUN_DIR)) < after(argv, "--remount-ro", "/")
    assert [argv[i + 1] for i, arg in enumerate(argv) if arg == "--tmpfs"] == ["/tmp", "/dev/shm"]
    assert after(argv, "--tmpfs", "/tmp") < after(argv, "--chmod", "1777", "/tmp")
    assert after(argv, "--tmpfs", "/dev/shm") < after(argv, "--chmod", "1777", "/dev/shm")
    assert "--ro-bind-fd" not in argv and confine(Launch(["python"], {}), box()).pass_fds == ()


def test_state_inside_a_shown_folder_is_hidden_after_it_is_shown() -> None:
    """A deployment that keeps var/ inside the Python environment's folder still hides it."""
    var = VENV / "var"
    argv = sandbox_argv(box(state=(var / "runs", var), run_dir=var / "runs" / "7"))
    assert after(argv, "--ro-bind", str(VENV), str(VENV)) < after(argv, "--tmpfs", str(var))
    assert after(argv, "--tmpfs", str(var)) < after(argv, "--dir", str(var / "runs"))
    assert after(argv, "--dir", str(var / "runs")) < after(argv, "--bind", str(var / "runs" / "7"))


def test_the_way_to_each_mount_point_in_the_empty_root_is_made_passable() -> None:
    argv = sandbox_argv(box())
    # bwrap would make /srv/trainyard/var/runs itself, mode 0700: the job's uid could not reach its run dir.
    for folder in ("/srv", "/srv/trainyard", str(VAR), str(VAR / "runs")):
        assert after(argv, "--dir", folder) < after(argv, "--bind", str(RUN_DIR))
    assert after(argv, "--dir", str(VAR / "code")) < after(argv, "--ro-bind", str(BUNDLE))
    assert after(argv, "--dir", str(PROJECT)) < after(argv, "--ro-bind", str(PROJECT / "trainers"))
    assert "--dir" not in argv[: after(argv, "--ro-bind", "/usr")]


def test_a_checkpoint_of_another_job_is_bound_from_the_descriptor_the_worker_opened() -> None:
    parent = VAR / "runs" / "3" / "checkpoints" / "step-00000010.pt"
    sandbox = box(resume=BoundFile(fd=9, path=parent))
    command = confine(Launch(["python"], {}), sandbox)
    assert after(command.argv, "--ro-bind-fd", "9", str(parent)) > after(command.argv, "--bind", str(RUN_DIR))
    assert after(command.argv, "--dir", str(parent.parent)) < after(command.argv, "--ro-bind-fd")
    assert command.pass_fds == (9,)


def test_only_the_job_s_own_gpus_are_bound_and_named_by_uuid() -> None:
    gpus = (GpuDevice("GPU-aaaa", "/dev/nvidia3"), GpuDevice("GPU-bbbb", "/dev/nvidia1"))
    sandbox = box(gpus=gpus, gpu_support=("/dev/nvidiactl", "/dev/nvidia-uvm"))
    command = confine(
        Launch(["python", "-m", "torch.distributed.run"], {"CUDA_VISIBLE_DEVICES": "3,1"}), sandbox
    )
    devices = [command.argv[i + 1] for i, arg in enumerate(command.argv) if arg == "--dev-bind"]
    assert devices == ["/dev/nvidia3", "/dev/nvidia1", "/dev/nvidiactl", "/dev/nvidia-uvm"]
    assert command.env["CUDA_VISIBLE_DEVICES"] == "GPU-aaaa,GPU-bbbb"
    assert command.argv[-3:] == ["python", "-m", "torch.distributed.run"]


def test_a_cpu_job_keeps_its_empty_device_list() -> None:
    command = confine(Launch(["python"], {"CUDA_VISIBLE_DEVICES": ""}), box())
    assert command.env["CUDA_VISIBLE_DEVICES"] == "" and "--dev-bind" not in command.argv


def test_state_that_holds_the_project_is_refused_with_the_settings_to_change() -> None:
    with pytest.raises(ValueError, match=r"state folder /root holds /root/trainyard.*TRAINYARD_RUNS_DIR"):
        sandbox_argv(box(state=(Path("/root"),)))


def test_service_state_names_the_sqlite_files_folders_and_no_server(tmp_path: Path) -> None:
    sqlite = Settings(
        runs_dir=tmp_path / "runs",
        code_dir=tmp_path / "code",
        data_dir=tmp_path / "data",
        database_url=f"sqlite:///{tmp_path}/db/trainyard.db",
        broker_url=f"sqla+sqlite:///{tmp_path}/broker/broker.db",
    )
    assert service_state(sqlite) == [
        *(tmp_path / "runs", tmp_path / "code", tmp_path / "data", tmp_path / "db", tmp_path / "broker"),
    ]
    servers = sqlite.model_copy(
        update={"database_url": "postgresql+psycopg://u:p@db/t", "broker_url": "redis://:p@redis:6379/0"}
    )
    assert service_state(servers) == [tmp_path / "runs", tmp_path / "code", tmp_path / "data"]
