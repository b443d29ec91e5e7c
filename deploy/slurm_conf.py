"""slurm.conf of the loopback cluster (deploy/slurm_cluster.py), as a pure function of its layout."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path


@dataclass(frozen=True)
class Layout:
    workdir: Path
    controller_host: str  # slurmctld checks that its own hostname is the one named here
    controller_addr: str
    controller_port: int
    slurmd_port: int
    nodes: dict[str, str]  # node name -> its address
    cpus_per_node: int

    @property
    def conf(self) -> Path:
        return self.workdir / "slurm.conf"

    @property
    def munge_socket(self) -> Path:
        return self.workdir / "munge" / "munge.socket"

    def node_dir(self, name: str) -> Path:
        return self.workdir / "nodes" / name


def slurm_conf(layout: Layout) -> str:
    work = layout.workdir
    node_lines = [
        f"NodeName={name} NodeHostname={name} NodeAddr={addr} CPUs={layout.cpus_per_node} State=UNKNOWN"
        for name, addr in layout.nodes.items()
    ]
    settings = {
        "ClusterName": "trainyard",
        "SlurmctldHost": f"{layout.controller_host}({layout.controller_addr})",
        "SlurmctldPort": layout.controller_port,
        "SlurmdPort": layout.slurmd_port,
        "SlurmUser": "root",
        "SlurmdUser": "root",
        "AuthType": "auth/munge",
        "CredType": "cred/munge",
        # A requeued job waits cred_expire seconds before it may start again (120 by default).
        "AuthInfo": f"socket={layout.munge_socket},cred_expire=10",
        "StateSaveLocation": work / "ctld" / "state",
        "SlurmctldPidFile": work / "ctld" / "slurmctld.pid",
        "SlurmctldLogFile": work / "ctld" / "slurmctld.log",
        # %n: each slurmd of this one machine keeps its own files.
        "SlurmdSpoolDir": work / "nodes" / "%n" / "spool",
        "SlurmdPidFile": work / "nodes" / "%n" / "slurmd.pid",
        "SlurmdLogFile": work / "nodes" / "%n" / "slurmd.log",
        "SlurmctldDebug": "info",
        "SlurmdDebug": "info",
        # The process tree, not cgroups: several slurmd share this machine's cgroup hierarchy, and the tree
        # holds a bubblewrap sandbox's grandchildren too (their outer pids and parents are in /proc).
        "ProctrackType": "proctrack/linuxproc",
        "TaskPlugin": "task/none",
        "SelectType": "select/cons_tres",
        "SelectTypeParameters": "CR_Core",
        "SchedulerType": "sched/backfill",
        "SchedulerParameters": "batch_sched_delay=0,sched_min_interval=0,bf_interval=1",
        "PreemptType": "preempt/none",
        "JobRequeue": 1,
        "ReturnToService": 2,
        # No slurmdbd here: a finished job stays visible to `scontrol show job` this long.
        "MinJobAge": 3600,
        "KillWait": 5,
        "SlurmdTimeout": 10,
        "InactiveLimit": 0,
        "MpiDefault": "none",
        "MailProg": "/bin/true",  # none here; the default, /bin/mail, is missing
        "JobAcctGatherType": "jobacct_gather/none",
        "AccountingStorageType": "accounting_storage/none",
        # Nodes declare CPUs that this machine's cores are shared out as.
        "SlurmdParameters": "config_overrides",
    }
    lines = [f"{key}={value}" for key, value in settings.items()]
    partition = (
        f"PartitionName=trainyard Nodes={','.join(layout.nodes)} Default=YES MaxTime=INFINITE State=UP"
    )
    return "\n".join([*lines, *node_lines, partition, ""])
