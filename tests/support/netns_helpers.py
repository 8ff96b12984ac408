"""A veth pair into a network namespace, for tests that need a real link to a worker (root only)."""

from __future__ import annotations

import os
import shutil
import subprocess
from dataclasses import dataclass


def why_no_namespaces() -> str | None:
    """Why network namespaces cannot be made here, or None when they can."""
    if os.geteuid() != 0:
        return "needs root (network namespaces)"
    if not (shutil.which("ip") and shutil.which("tc")):
        return "needs ip and tc (apt-get install iproute2)"
    probe = f"specrun-probe-{os.getpid()}"
    made = subprocess.run(["ip", "netns", "add", probe], capture_output=True, text=True)
    subprocess.run(["ip", "netns", "del", probe], capture_output=True)
    return None if made.returncode == 0 else f"cannot create a network namespace: {made.stderr.strip()}"


def ip(*args: str, namespace: str | None = None) -> None:
    prefix = ["ip", "netns", "exec", namespace] if namespace else []
    subprocess.run([*prefix, "ip", *args], check=True, capture_output=True)


@dataclass
class Link:
    """The host end (host_ip on host_if) and the namespace end (ns_ip in namespace)."""

    namespace: str
    host_if: str
    ns_if: str
    host_ip: str
    ns_ip: str

    @classmethod
    def create(cls, tag: int) -> Link:
        net = f"10.212.{tag % 250}"
        link = cls(f"specrun-test-{tag}", f"spth{tag % 100000}", f"sptw{tag % 100000}", f"{net}.1", f"{net}.2")
        subprocess.run(["ip", "netns", "add", link.namespace], check=True, capture_output=True)
        try:
            ip("link", "add", link.host_if, "type", "veth", "peer", "name", link.ns_if)
            ip("link", "set", link.ns_if, "netns", link.namespace)
            ip("addr", "add", f"{link.host_ip}/24", "dev", link.host_if)
            ip("link", "set", link.host_if, "up")
            ip("addr", "add", f"{link.ns_ip}/24", "dev", link.ns_if, namespace=link.namespace)
            ip("link", "set", link.ns_if, "up", namespace=link.namespace)
            ip("link", "set", "lo", "up", namespace=link.namespace)
        except subprocess.CalledProcessError:
            link.remove()
            raise
        return link

    def cut(self) -> None:
        """Take the namespace's end down: packets vanish, nothing is closed or refused."""
        ip("link", "set", self.ns_if, "down", namespace=self.namespace)

    def remove(self) -> None:
        subprocess.run(["ip", "netns", "del", self.namespace], capture_output=True)
        subprocess.run(["ip", "link", "del", self.host_if], capture_output=True)
