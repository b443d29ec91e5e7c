"""A real Slurm cluster on this machine, for `make slurm` and the tests of the Slurm executor: munged,
slurmctld and a slurmd per node, every node in network, mount and UTS namespaces of its own (the network:
deploy/slurm_net.py), all as root, every file under one directory. No systemd: each daemon runs in the
foreground, a child of this process.

    python -m deploy.slurm_cluster --dir var/slurm [--nodes 2]

prints what to export (SLURM_CONF) and stops everything on Ctrl-C or SIGTERM.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import signal
import socket
import subprocess
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from types import FrameType

from deploy.slurm_conf import Layout, slurm_conf
from deploy.slurm_net import Network, signal_pid

START_TIMEOUT_S = 15.0
STATE_FILE = "cluster.json"  # which network a run made, so that the next start in its directory can clear it
# The commands of slurm-wlm and munge that the cluster runs: without one it would die in a traceback.
DAEMONS = ("munged", "slurmctld", "slurmd", "srun", "sinfo", "scontrol")


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("0.0.0.0", 0))
        return int(s.getsockname()[1])


@dataclass
class SlurmCluster:
    workdir: Path
    node_names: list[str]
    env: dict[str, str]  # what a process needs to use the cluster's commands (sbatch, squeue, scontrol...)
    network: Network
    layout: Layout
    daemons: dict[str, subprocess.Popen[bytes]] = field(default_factory=dict)  # munged, slurmctld
    slurmds: dict[str, subprocess.Popen[bytes]] = field(default_factory=dict)

    @classmethod
    def start(cls, workdir: Path, nodes: int = 2, cpus_per_node: int = 2) -> SlurmCluster:
        """Returns once every node is idle and a job step spanning all of them has run."""
        if nodes < 1 or cpus_per_node < 1:
            raise ValueError(f"nodes={nodes}, cpus_per_node={cpus_per_node}: both must be 1 or more")
        workdir = workdir.resolve()
        clear_previous_run(workdir)
        workdir.mkdir(parents=True, exist_ok=True)
        names = [f"tynode{i + 1}" for i in range(nodes)]
        network = Network.claim(names)
        (workdir / STATE_FILE).write_text(json.dumps({"net": network.net, "nodes": names}))
        layout = Layout(
            workdir=workdir,
            controller_host=socket.gethostname(),
            controller_addr=network.controller_addr,
            controller_port=free_port(),
            slurmd_port=free_port(),
            nodes=network.addresses(),
            cpus_per_node=cpus_per_node,
        )
        cluster = cls(workdir, names, {"SLURM_CONF": str(layout.conf)}, network, layout)
        try:
            cluster.launch()
        except BaseException:
            cluster.stop()
            raise
        return cluster

    def launch(self) -> None:
        deadline = time.monotonic() + START_TIMEOUT_S
        self.start_munged()
        self.layout.conf.write_text(slurm_conf(self.layout))
        self.network.build(str(self.workdir))
        (self.workdir / "ctld" / "state").mkdir(parents=True, exist_ok=True)
        # -c: a fresh cluster, whatever a previous run in this directory left in its state.
        argv = ["slurmctld", "-D", "-c", "-f", str(self.layout.conf)]
        self.daemons["slurmctld"] = self.spawn(argv, self.workdir / "ctld" / "slurmctld.out")
        for name in self.node_names:
            self.start_slurmd(name)
        self.wait_until(self.all_idle, deadline - time.monotonic(), "every node idle")
        self.run(["srun", f"-N{len(self.node_names)}", "true"], timeout=deadline - time.monotonic())

    def wait_until(self, check: Callable[[], bool], timeout: float, what: str) -> None:
        """Polls `check`, a failing command of the cluster meaning "not yet" (slurmctld may not listen yet);
        fails at once, naming the daemons' output, if one of the daemons has exited."""
        deadline = time.monotonic() + timeout
        while not self.holds(check):
            for name, proc in [*self.daemons.items(), *self.slurmds.items()]:
                if proc.poll() is not None:
                    raise RuntimeError(
                        f"{name}'s daemon exited ({proc.returncode}): see {self.workdir}/*/*.out"
                    )
            if time.monotonic() > deadline:
                raise TimeoutError(f"{what} not within {timeout:.0f}s: see the logs under {self.workdir}")
            time.sleep(0.1)

    @staticmethod
    def holds(check: Callable[[], bool]) -> bool:
        try:
            return check()
        except RuntimeError:
            return False

    def spawn(self, argv: list[str], out: Path) -> subprocess.Popen[bytes]:
        """A daemon in the foreground; `out` takes what it prints before its log file opens."""
        out.parent.mkdir(parents=True, exist_ok=True)
        with out.open("ab") as sink:
            # A session of its own: a Ctrl-C reaches this process alone, whose stop() ends the daemons.
            return subprocess.Popen(
                argv, stdin=subprocess.DEVNULL, stdout=sink, stderr=subprocess.STDOUT, start_new_session=True
            )

    def start_munged(self) -> None:
        munge = self.layout.munge_socket.parent
        # munged wants its socket's folder open to all: any user's client may connect.
        munge.mkdir(mode=0o755, parents=True, exist_ok=True)
        key = munge / "munge.key"
        key.write_bytes(os.urandom(1024))
        key.chmod(0o600)
        argv = [
            "munged",
            "--foreground",
            "--force",
            f"--socket={self.layout.munge_socket}",
            f"--key-file={key}",
        ]
        argv += [f"--{kind}-file={munge / f'munged.{kind}'}" for kind in ("pid", "log", "seed")]
        self.daemons["munged"] = self.spawn(argv, munge / "munged.out")
        self.wait_until(self.layout.munge_socket.exists, 5, "munged's socket")

    def start_slurmd(self, name: str) -> None:
        node_dir = self.layout.node_dir(name)
        (node_dir / "spool").mkdir(parents=True, exist_ok=True)
        hosts = node_dir / "hosts"
        hosts.write_text(self.network.hosts_file(self.layout.controller_host))
        # Not `ip netns exec`, whose fresh /sys lacks the cgroup mounts that slurmd insists on. Mount and UTS
        # namespaces of the node's own: its hostname is its name, and its /etc/hosts maps that to its address.
        boot = 'mount --bind "$2" /etc/hosts && hostname "$0" && exec slurmd -D -N "$0" -f "$1"'
        argv = ["nsenter", f"--net=/run/netns/{self.network.namespace(name)}"]
        argv += ["unshare", "--mount", "--uts", "--propagation=slave"]
        argv += ["sh", "-c", boot, name, str(self.layout.conf), str(hosts)]
        self.slurmds[name] = self.spawn(argv, self.layout.node_dir(name) / "slurmd.out")

    def node_states(self) -> dict[str, str]:
        listed = self.run(["sinfo", "--noheader", "--Node", "--format=%N %t"])
        return dict(line.split(maxsplit=1) for line in listed.splitlines())

    def all_idle(self) -> bool:
        return set(self.node_states().values()) == {"idle"}

    def run(self, argv: list[str], timeout: float = 30.0) -> str:
        """One of the cluster's commands, as a client with `env` runs it; its output."""
        done = subprocess.run(
            argv, env=os.environ | self.env, capture_output=True, text=True, timeout=max(timeout, 1.0)
        )
        if done.returncode != 0:
            raise RuntimeError(f"{' '.join(argv)} failed ({done.returncode}): {done.stderr.strip()}")
        return done.stdout

    def node_down(self, name: str) -> None:
        """The node fails: every process on it dies at once, and Slurm is told at once rather than after
        SlurmdTimeout. Its running jobs that allow it (--requeue) are requeued."""
        self.network.kill_node(name)
        if slurmd := self.slurmds.pop(name, None):
            slurmd.wait()
        self.run(["scontrol", "update", f"NodeName={name}", "State=DOWN", "Reason=node_down"])

    def node_up(self, name: str) -> None:
        """The node boots again: its slurmd registers, and ReturnToService=2 makes it usable."""
        if name not in self.slurmds:
            self.start_slurmd(name)
        self.wait_until(lambda: self.node_states()[name] == "idle", 30, f"{name} idle")

    def stop(self) -> None:
        """Idempotent: kills every process of the nodes, then munged and slurmctld; removes the network."""
        self.network.teardown()
        running = [*self.slurmds.values(), *self.daemons.values()]
        for proc in running:
            proc.terminate()
        # A short grace: the next start clears the state that slurmctld saves, and its shutdown waits out
        # messages to nodes that are gone.
        deadline = time.monotonic() + 2
        for proc in running:
            try:
                proc.wait(max(0.0, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
        self.slurmds.clear()
        self.daemons.clear()
        (self.workdir / STATE_FILE).unlink(missing_ok=True)


def clear_previous_run(workdir: Path) -> None:
    """What a run in `workdir` left when it was killed before its stop: its network, the processes on its
    nodes, and its munged and slurmctld (found by their pid files, if they still name this directory)."""
    state = workdir / STATE_FILE
    if not state.exists():
        return
    recorded = json.loads(state.read_text())
    network = Network(recorded["net"], tuple(recorded["nodes"]))
    if network.owned_by(str(workdir)):
        network.teardown()
    for pid_file in (workdir / "munge" / "munged.pid", workdir / "ctld" / "slurmctld.pid"):
        try:
            pid = int(pid_file.read_text())
            if str(workdir) in Path(f"/proc/{pid}/cmdline").read_text():
                signal_pid(pid, signal.SIGKILL)
        except (OSError, ValueError):
            continue
    state.unlink()


def missing_daemons() -> str | None:
    """Why the cluster cannot start on this PATH, in a line that says what to install; None when it can."""
    missing = [name for name in DAEMONS if shutil.which(name) is None]
    if not missing:
        return None
    return (
        f"{', '.join(missing)} not found on PATH: install slurm-wlm and munge (`make slurm` does, as root; "
        "or `apt-get install slurm-wlm munge`)"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    parser.add_argument("--dir", type=Path, required=True, help="where config, state and logs go")
    parser.add_argument("--nodes", type=int, default=2)
    args = parser.parse_args()
    if (why := missing_daemons()) is not None:
        raise SystemExit(f"deploy.slurm_cluster: {why}")

    def interrupt(signum: int, frame: FrameType | None) -> None:
        raise KeyboardInterrupt

    # SIGINT too: a shell starts a background job with SIGINT ignored, and Python keeps it so.
    signal.signal(signal.SIGTERM, interrupt)
    signal.signal(signal.SIGINT, interrupt)
    cluster = SlurmCluster.start(args.dir, nodes=args.nodes)
    try:
        print(f"Slurm cluster up: nodes {', '.join(cluster.node_names)}; Ctrl-C stops it. In another shell:")
        for key, value in cluster.env.items():
            print(f"  export {key}={value}")
        while True:
            signal.pause()
    except KeyboardInterrupt:
        pass
    finally:
        cluster.stop()


if __name__ == "__main__":
    main()
