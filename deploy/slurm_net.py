"""Network namespaces that make the nodes of the loopback Slurm cluster look like machines of their own.

Debian's slurmd is built without --enable-multiple-slurmd, and a 2-node PyTorch job needs an address per
node besides: each node gets a namespace with one interface, eth0, at 10.77.<net>.1x. The nodes and the root
namespace (10.77.<net>.1, where slurmctld and the cluster's clients run) meet on a bridge in a namespace of
its own, the "switch": a bridge in the root namespace would send its traffic through the host's iptables
FORWARD chain (br_netfilter), which Docker sets to DROP.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import time
from dataclasses import dataclass


def ip(*args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
    done = subprocess.run(["ip", *args], capture_output=True, text=True)
    if check and done.returncode != 0:
        raise RuntimeError(f"ip {' '.join(args)} failed: {done.stderr.strip()} (the cluster needs root)")
    return done


@dataclass(frozen=True)
class Network:
    net: int  # the third byte of 10.77.<net>.0/24, and the prefix of every name this network has
    node_names: tuple[str, ...]

    @classmethod
    def claim(cls, node_names: list[str]) -> Network:
        """The first free subnet: creating its switch namespace is the claim, atomic against a cluster
        starting beside this one."""
        for net in range(1, 255):
            added = ip("netns", "add", f"ty{net}-switch", check=False)
            if added.returncode == 0:
                return cls(net, tuple(node_names))
            if "File exists" not in added.stderr:
                raise RuntimeError(f"ip netns add failed: {added.stderr.strip()} (the cluster needs root)")
        raise RuntimeError("no free 10.77.<net>.0/24 subnet: stop other clusters (`ip netns list`)")

    @property
    def switch(self) -> str:
        return f"ty{self.net}-switch"

    @property
    def root_link(self) -> str:
        return f"ty{self.net}-root"

    @property
    def controller_addr(self) -> str:
        return f"10.77.{self.net}.1"

    def namespace(self, node: str) -> str:
        return f"ty{self.net}-{node}"

    def addresses(self) -> dict[str, str]:
        return {node: f"10.77.{self.net}.{11 + i}" for i, node in enumerate(self.node_names)}

    def build(self, owner: str) -> None:
        """`owner` (the cluster's directory) is kept as the root link's alias: see `owned_by`."""
        ip("-n", self.switch, "link", "add", "br0", "type", "bridge")
        ip("-n", self.switch, "link", "set", "br0", "up")
        ip("link", "add", self.root_link, "type", "veth", "peer", "name", "up0", "netns", self.switch)
        ip("-n", self.switch, "link", "set", "up0", "master", "br0", "up")
        ip("addr", "add", f"{self.controller_addr}/24", "dev", self.root_link)
        ip("link", "set", self.root_link, "alias", owner, "up")
        for i, (node, addr) in enumerate(self.addresses().items()):
            ns = self.namespace(node)
            ip("netns", "add", ns)
            port = f"p{i}"
            ip("-n", self.switch, "link", "add", port, "type", "veth", "peer", "name", "eth0", "netns", ns)
            ip("-n", self.switch, "link", "set", port, "master", "br0", "up")
            ip("-n", ns, "addr", "add", f"{addr}/24", "dev", "eth0")
            ip("-n", ns, "link", "set", "eth0", "up")
            ip("-n", ns, "link", "set", "lo", "up")

    def hosts_file(self, controller_host: str) -> str:
        """/etc/hosts as a node sees it: its own name resolves to its own address, as gloo needs."""
        lines = ["127.0.0.1 localhost", f"{self.controller_addr} {controller_host}"]
        lines += [f"{addr} {node}" for node, addr in self.addresses().items()]
        return "\n".join([*lines, ""])

    def kill_node(self, node: str, timeout: float = 10.0) -> None:
        """SIGKILL to everything in the node's namespace (slurmd, slurmstepd, the jobs' processes, whatever
        sandbox they are in), as a machine that loses power; returns once none is left."""
        ns = self.namespace(node)
        deadline = time.monotonic() + timeout
        while pids := namespace_pids(ns):
            for pid in pids:
                signal_pid(pid, signal.SIGKILL)
            if time.monotonic() > deadline:
                raise RuntimeError(f"processes {pids} in network namespace {ns} survive SIGKILL")
            time.sleep(0.05)

    def owned_by(self, owner: str) -> bool:
        """Whether this network is still the one that `owner` built: once removed, its subnet may have gone
        to another cluster since."""
        shown = ip("link", "show", self.root_link, check=False).stdout
        return f"alias {owner}" in (line.strip() for line in shown.splitlines())

    def teardown(self) -> None:
        """Idempotent: whatever part of the network exists goes, its processes first."""
        for node in self.node_names:
            self.kill_node(node)
            ip("netns", "delete", self.namespace(node), check=False)
        # Deleting the switch deletes every veth pair, the root namespace's end included.
        ip("netns", "delete", self.switch, check=False)
        ip("link", "delete", self.root_link, check=False)


def namespace_pids(ns: str) -> list[int]:
    listed = ip("netns", "pids", ns, check=False)
    return [int(pid) for pid in listed.stdout.split()] if listed.returncode == 0 else []


def signal_pid(pid: int, sig: signal.Signals) -> None:
    with contextlib.suppress(ProcessLookupError):
        os.kill(pid, sig)
