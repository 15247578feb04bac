"""Emulated nodes on one machine: network namespaces joined by a Linux bridge.

Layout of one :func:`node_network` of ``n`` nodes (2 to :data:`MAX_NODES`; names carry a random
4-hex suffix ``XXXX``; :func:`two_node_network` is the same with ``n = 2``)::

    root namespace                       diag-a-XXXX (node-a)   diag-b-XXXX (node-b)   ...
    diagbrXXXX  10.231.N.1/24  <-veth->  eth0 10.231.N.2/24
                               <-veth->                         eth0 10.231.N.3/24
                               <-veth->                                                ... .4, .5

Node ``i`` (0-based) is ``node-{letter}`` with letter ``"abcdefgh"[i]``, namespace
``diag-{letter}-XXXX``, address ``10.231.N.{i + 2}`` and root-namespace veth end
``diagv{letter}XXXX``. The bridge address is in the root namespace, so a server started there (the
analyzer) is reachable from every node at :attr:`Nodes.bridge_ip`. The namespaces have no default
route and the root namespace does not forward, so nothing run "on a node" can reach anything but
the other nodes, the bridge address and its own loopback. Each namespace gets an
``/etc/netns/NS/hosts`` and ``resolv.conf`` (bind-mounted over ``/etc/`` by ``ip netns exec``)
naming every node, so host-name lookups (torchrun calls ``socket.getfqdn()``, c10d looks up its
peers) are answered locally and DNS never leaves the namespace.

A command runs "on node X" under its own UTS namespace with host name ``node-a``, ``node-b``, ...::

    ip netns exec NS unshare --uts sh -c 'hostname NAME && exec "$@"' sh CMD...

Everything is torn down on exit, failure included; namespaces, bridges and ``/etc/netns`` entries
left by crashed earlier runs (older than :data:`STALE_AFTER_S`) are removed best effort first.
Needs root and ``ip netns``; otherwise :func:`node_network` raises :class:`NetnsUnavailable`
(an :class:`~diag.selftest.cases.Unsupported`) with the reason, which the test suite's fixture
(``tests/fakes/netns.py``) turns into a skip. Used by the link fault
(:mod:`diag.selftest.link`) and the two-node integration tests.
"""

from __future__ import annotations

import contextlib
import ipaddress
import os
import re
import secrets
import shutil
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TypeVar

from diag.selftest.cases import Unsupported

_N = TypeVar("_N", bound="Nodes")

#: Prefixes of everything this module creates; the stale sweep only ever touches these.
NS_PREFIX = "diag-"
BRIDGE_PREFIX = "diagbr"
VETH_PREFIX = "diagv"
#: Interface name inside each namespace (namespace-local, so the same on every node).
INNER_IFNAME = "eth0"
#: The /16 the per-run /24 is drawn from.
NET_PREFIX = "10.231"
#: A namespace older than this with our prefix is considered left over from a crashed run.
STALE_AFTER_S = 15 * 60
#: Timeout for each `ip` command.
IP_TIMEOUT_S = 15.0
#: Node i's letter: host name ``node-{letter}``, namespace ``diag-{letter}-XXXX``.
NODE_LETTERS = "abcdefgh"
MIN_NODES = 2
MAX_NODES = len(NODE_LETTERS)

_PROXY_VARS = ("http_proxy", "https_proxy", "all_proxy", "grpc_proxy", "no_proxy")
_NETNS_RUN_DIR = Path("/run/netns")
_NETNS_ETC_DIR = Path("/etc/netns")
_OUR_NS = re.compile(rf"^diag-[{NODE_LETTERS}]-([0-9a-f]{{4}})$")
_OUR_BRIDGE = re.compile(r"^diagbr([0-9a-f]{4})$")


class NetnsUnavailable(Unsupported):
    """The machine cannot host the emulated nodes (not root, no ``ip netns``, ...)."""


def node_hostnames(n: int) -> tuple[str, ...]:
    """The host names of an ``n``-node network, in node order: ``("node-a", "node-b", ...)``
    (:class:`ValueError` outside [:data:`MIN_NODES`, :data:`MAX_NODES`]); creates nothing."""
    if not MIN_NODES <= n <= MAX_NODES:
        raise ValueError(f"{n} nodes: the network holds {MIN_NODES} to {MAX_NODES}")
    return tuple(f"node-{letter}" for letter in NODE_LETTERS[:n])


@dataclass(frozen=True, slots=True)
class Node:
    """One emulated node: a network namespace plus the host name its commands run under."""

    hostname: str  # "node-a", "node-b", ..., as socket.gethostname() sees it on the node
    netns: str  # network namespace name
    ip: str  # address of INNER_IFNAME inside the namespace
    ifname: str  # interface name inside the namespace (for GLOO_SOCKET_IFNAME)
    veth: str  # root-namespace end of the veth pair (attached to the bridge)

    def prefix(self) -> list[str]:
        """Command prefix that runs the following argv on this node."""
        return [
            "ip",
            "netns",
            "exec",
            self.netns,
            "unshare",
            "--uts",
            "sh",
            "-c",
            f'hostname {self.hostname} && exec "$@"',
            "sh",
        ]

    def command(self, argv: Sequence[str]) -> list[str]:
        """``argv`` wrapped to run on this node."""
        return [*self.prefix(), *argv]

    def env(self, base: Mapping[str, str] | None = None) -> dict[str, str]:
        """Environment for a distributed job on this node: gloo/tensorpipe bound to the veth."""
        env = dict(os.environ if base is None else base)
        env["GLOO_SOCKET_IFNAME"] = self.ifname
        env["TP_SOCKET_IFNAME"] = self.ifname
        env.pop("DIAG_HOST", None)  # host names must come from the real (UTS) host name
        # Nothing on a node may go through a proxy (gRPC honours these): peers are all local.
        for key in _PROXY_VARS:
            env.pop(key, None)
            env.pop(key.upper(), None)
        env["no_proxy"] = env["NO_PROXY"] = "*"
        return env


@dataclass(frozen=True, slots=True)
class Nodes:
    """An emulated network: ``nodes[i]`` at 10.x.y.(i + 2), the bridge at 10.x.y.1."""

    nodes: tuple[Node, ...]  # in order: node-a, node-b, ...
    bridge: str  # bridge device in the root namespace
    bridge_ip: str  # its address: reachable from every node
    subnet: str  # e.g. "10.231.17.0/24"

    @property
    def namespaces(self) -> tuple[str, ...]:
        return tuple(node.netns for node in self.nodes)

    @property
    def hostnames(self) -> tuple[str, ...]:
        return tuple(node.hostname for node in self.nodes)

    def node(self, which: str | Node) -> Node:
        """A node by host name ("node-a"), short name ("a"), namespace name or itself."""
        if isinstance(which, Node):
            return which
        for node in self.nodes:
            if which in (node.hostname, node.netns, node.hostname.removeprefix("node-")):
                return node
        raise KeyError(which)

    def prefix(self, which: str | Node) -> list[str]:
        """Command prefix that runs a command on node ``which``."""
        return self.node(which).prefix()

    def command(self, which: str | Node, argv: Sequence[str]) -> list[str]:
        """``argv`` wrapped to run on node ``which``."""
        return self.node(which).command(argv)

    def free_port(self, which: str | Node) -> int:
        """A TCP port free on ``which``'s address right now (asked inside its namespace)."""
        node = self.node(which)
        code = (
            "import socket; s = socket.socket(); "
            f"s.bind(({node.ip!r}, 0)); print(s.getsockname()[1])"
        )
        out = _run(["ip", "netns", "exec", node.netns, sys.executable, "-c", code]).stdout
        return int(out.strip())

    def popen(
        self,
        which: str | Node,
        argv: Sequence[str],
        *,
        env: Mapping[str, str] | None = None,
        **kwargs: object,
    ) -> subprocess.Popen[str]:
        """Start ``argv`` on node ``which`` in its own process group (see :func:`stop`)."""
        node = self.node(which)
        return subprocess.Popen(  # type: ignore[call-overload]
            node.command(argv),
            env=node.env(env),
            text=True,
            start_new_session=True,
            **kwargs,
        )

    def kill_all(self) -> None:
        """SIGKILL every process still inside any node's namespace (all of them started here)."""
        for ns in self.namespaces:
            _kill_netns_pids(ns)


@dataclass(frozen=True, slots=True)
class TwoNodes(Nodes):
    """The two-node network (:func:`two_node_network`): ``a`` (10.x.y.2) and ``b`` (10.x.y.3)."""

    @property
    def a(self) -> Node:
        return self.nodes[0]

    @property
    def b(self) -> Node:
        return self.nodes[1]


def stop(proc: subprocess.Popen[str], timeout: float = 10.0) -> None:
    """Stop a process started with ``start_new_session``: SIGTERM its group, then SIGKILL."""
    if proc.poll() is not None:
        return
    for sig, wait in ((signal.SIGTERM, timeout), (signal.SIGKILL, 5.0)):
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(proc.pid, sig)
        try:
            proc.wait(wait)
            return
        except subprocess.TimeoutExpired:
            continue


# -- set-up and tear-down ----------------------------------------------------------------------


def _run(argv: Sequence[str], check: bool = True) -> subprocess.CompletedProcess[str]:
    proc = subprocess.run(
        list(argv), capture_output=True, text=True, timeout=IP_TIMEOUT_S, check=False
    )
    if check and proc.returncode != 0:
        raise subprocess.CalledProcessError(proc.returncode, argv, proc.stdout, proc.stderr)
    return proc


def _ip(*args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
    return _run(["ip", *args], check=check)


def _list_netns() -> list[str]:
    out = _ip("netns", "list", check=False).stdout
    return [line.split()[0] for line in out.splitlines() if line.strip()]


def _kill_netns_pids(ns: str) -> None:
    out = _ip("netns", "pids", ns, check=False).stdout
    for word in out.split():
        with contextlib.suppress(ValueError, ProcessLookupError, PermissionError):
            os.kill(int(word), signal.SIGKILL)


def _delete_netns(ns: str) -> None:
    _ip("netns", "del", ns, check=False)
    shutil.rmtree(_NETNS_ETC_DIR / ns, ignore_errors=True)


def _list_links(kind: str) -> list[str]:
    out = _ip("-o", "link", "show", "type", kind, check=False).stdout
    names = []
    for line in out.splitlines():
        # "12: diagbr1a2b: <...>" or "13: diagva1a2b@if2: <...>"
        parts = line.split(":", 2)
        if len(parts) >= 2:
            names.append(parts[1].strip().split("@", 1)[0])
    return names


def sweep_stale(max_age_s: float = STALE_AFTER_S) -> None:
    """Best effort: remove what crashed earlier runs of this module left behind.

    A ``diag-[a-h]-XXXX`` namespace goes when it is older than ``max_age_s`` (a live run is far
    younger). A ``diagbrXXXX`` bridge goes when none of its namespaces (``diag-?-XXXX``, same
    suffix) exists any more (set-up creates the namespaces before the bridge, tear-down removes the
    bridge first, so a concurrent run's bridge always has one). Processes are not killed.
    """
    now = time.time()
    with contextlib.suppress(Exception):
        for ns in _list_netns():
            if not _OUR_NS.match(ns):
                continue
            # The nsfs inode's time is the creation time (or later, if the inode was evicted and
            # re-made); our /etc/netns entry is made right after. The older one counts.
            mtimes = []
            for path in (_NETNS_RUN_DIR / ns, _NETNS_ETC_DIR / ns):
                with contextlib.suppress(OSError):
                    mtimes.append(path.stat().st_mtime)
            if mtimes and now - min(mtimes) > max_age_s:
                _delete_netns(ns)
    with contextlib.suppress(Exception):
        suffixes = {m[1] for m in map(_OUR_NS.match, _list_netns()) if m}
        for br in _list_links("bridge"):
            m = _OUR_BRIDGE.match(br)
            if m and m[1] not in suffixes:
                _ip("link", "del", br, check=False)
    with contextlib.suppress(Exception):
        live = set(_list_netns())
        if _NETNS_ETC_DIR.is_dir():
            for entry in _NETNS_ETC_DIR.iterdir():
                if _OUR_NS.match(entry.name) and entry.name not in live:
                    shutil.rmtree(entry, ignore_errors=True)


def _pick_subnet() -> int:
    """A third octet N such that 10.231.N.0/24 overlaps nothing configured in the root namespace."""
    used: list[ipaddress.IPv4Network] = []
    for args in (("-4", "-o", "addr", "show"), ("-4", "route", "show", "table", "all")):
        out = _ip(*args, check=False).stdout
        for m in re.finditer(r"(\d+\.\d+\.\d+\.\d+(?:/\d+)?)", out):
            with contextlib.suppress(ValueError):
                used.append(ipaddress.IPv4Network(m[1], strict=False))
    for _ in range(64):
        octet = 1 + secrets.randbelow(254)
        net = ipaddress.IPv4Network(f"{NET_PREFIX}.{octet}.0/24")
        if not any(net.overlaps(u) for u in used if u.prefixlen > 0):
            return octet
    raise NetnsUnavailable(f"no free /24 in {NET_PREFIX}.0.0/16")


def _check_prerequisites(tools: Sequence[str] = ()) -> None:
    if os.geteuid() != 0:
        raise NetnsUnavailable("needs root (ip netns, veth, bridge)")
    for tool in ("ip", "unshare", "hostname", *tools):
        if shutil.which(tool) is None:
            raise NetnsUnavailable(f"`{tool}` not found on PATH")
    proc = _ip("netns", "list", check=False)
    if proc.returncode != 0:
        raise NetnsUnavailable(f"`ip netns list` failed: {proc.stderr.strip()}")


def unavailable_reason(tools: Sequence[str] = ()) -> str | None:
    """Why :func:`node_network` cannot work here (not root, a tool missing, no ``ip
    netns``), or ``None`` when it should; cheap, creates nothing. ``tools``: more commands the
    caller needs (e.g. ``"tc"``)."""
    try:
        _check_prerequisites(tools)
    except NetnsUnavailable as exc:
        return str(exc)
    except (OSError, subprocess.SubprocessError) as exc:
        return f"`ip netns` unusable: {exc}"
    return None


@contextlib.contextmanager
def node_network(n: int) -> Iterator[Nodes]:
    """Create an ``n``-node network (2 to :data:`MAX_NODES`), yield it, always tear it down.

    Raises :class:`NetnsUnavailable` when the machine cannot host it (the fixture turns that into a
    skip), :class:`ValueError` for a node count out of range; any failure after set-up propagates
    after tear-down.
    """
    with _network(n, Nodes) as nodes:
        yield nodes


@contextlib.contextmanager
def two_node_network() -> Iterator[TwoNodes]:
    """:func:`node_network` of two nodes, as :class:`TwoNodes` (``.a``, ``.b``)."""
    with _network(2, TwoNodes) as nodes:
        yield nodes


@contextlib.contextmanager
def _network(n: int, kind: type[_N]) -> Iterator[_N]:
    """:func:`node_network`'s body, yielding ``kind`` (:class:`Nodes` or :class:`TwoNodes`)."""
    names = node_hostnames(n)
    _check_prerequisites()
    sweep_stale()
    suffix = secrets.token_hex(2)
    net = f"{NET_PREFIX}.{_pick_subnet()}"
    members = tuple(
        Node(name, f"{NS_PREFIX}{letter}-{suffix}", f"{net}.{i + 2}", INNER_IFNAME,
             f"{VETH_PREFIX}{letter}{suffix}")
        for i, (name, letter) in enumerate(zip(names, NODE_LETTERS[:n], strict=True))
    )  # fmt: skip
    bridge = f"{BRIDGE_PREFIX}{suffix}"
    nodes = kind(nodes=members, bridge=bridge, bridge_ip=f"{net}.1", subnet=f"{net}.0/24")
    created: list[str] = []
    try:
        try:
            for node in members:
                proc = _ip("netns", "add", node.netns, check=False)
                if proc.returncode != 0:
                    raise NetnsUnavailable(f"`ip netns add` failed: {proc.stderr.strip()}")
                created.append(node.netns)
            _setup(nodes)
        except subprocess.CalledProcessError as exc:
            cmd = " ".join(exc.cmd) if isinstance(exc.cmd, list) else str(exc.cmd)
            raise NetnsUnavailable(f"`{cmd}` failed: {(exc.stderr or '').strip()}") from exc
        yield nodes
    finally:
        _teardown(nodes, created)


def _setup(nodes: Nodes) -> None:
    # Every address a peer can show up as, IPv4-mapped too (the c10d TCPStore listens dual-stack
    # and looks its clients up by name), so no lookup ever falls through to DNS.
    names = [
        ("127.0.0.1", "localhost"),
        *((node.ip, node.hostname) for node in nodes.nodes),
        (nodes.bridge_ip, "diag-analyzer"),
    ]
    lines = [f"{ip}\t{name}" for ip, name in names]
    lines += [f"::ffff:{ip}\t{name}" for ip, name in names]
    lines.append("::1\tlocalhost ip6-localhost ip6-loopback")
    for node in nodes.nodes:
        etc = _NETNS_ETC_DIR / node.netns
        etc.mkdir(parents=True, exist_ok=True)
        (etc / "hosts").write_text("\n".join(lines) + "\n")
        # Unknown names fail at once on the namespace's own loopback.
        (etc / "resolv.conf").write_text("nameserver 127.0.0.1\noptions timeout:1 attempts:1\n")
    # Bridge after the namespaces (see sweep_stale).
    _ip("link", "add", nodes.bridge, "type", "bridge")
    _ip("addr", "add", f"{nodes.bridge_ip}/24", "dev", nodes.bridge)
    _ip("link", "set", nodes.bridge, "up")
    for node in nodes.nodes:
        peer = ("peer", "name", node.ifname, "netns", node.netns)
        _ip("link", "add", node.veth, "type", "veth", *peer)
        _ip("link", "set", node.veth, "master", nodes.bridge)
        _ip("link", "set", node.veth, "up")
        ns = ("-n", node.netns)
        _ip(*ns, "link", "set", "lo", "up")
        _ip(*ns, "addr", "add", f"{node.ip}/24", "dev", node.ifname)
        _ip(*ns, "link", "set", node.ifname, "up")
    _wait_reachable(nodes)


def _wait_reachable(nodes: Nodes, timeout: float = 10.0) -> None:
    """Wait until every node can open a TCP connection to the bridge address (links are up)."""
    with socket.socket() as srv:
        srv.bind((nodes.bridge_ip, 0))
        srv.listen(len(nodes.nodes))
        port = srv.getsockname()[1]
        code = (
            "import socket, sys, time\n"
            f"deadline = time.monotonic() + {timeout}\n"
            "while True:\n"
            "    try:\n"
            f"        socket.create_connection(({nodes.bridge_ip!r}, {port}), 1).close(); break\n"
            "    except OSError:\n"
            "        if time.monotonic() > deadline: sys.exit(1)\n"
            "        time.sleep(0.05)\n"
        )
        for node in nodes.nodes:
            proc = subprocess.run(
                ["ip", "netns", "exec", node.netns, sys.executable, "-c", code],
                capture_output=True,
                text=True,
                timeout=timeout + 5,
                check=False,
            )
            if proc.returncode != 0:
                raise NetnsUnavailable(
                    f"{node.hostname} cannot reach the bridge {nodes.bridge_ip}: {proc.stderr}"
                )
            with contextlib.suppress(OSError):
                srv.accept()[0].close()


def _teardown(nodes: Nodes, created: Sequence[str]) -> None:
    for ns in created:
        with contextlib.suppress(Exception):
            _kill_netns_pids(ns)
    # Bridge first (see sweep_stale); deleting a namespace deletes its veth pair.
    with contextlib.suppress(Exception):
        _ip("link", "del", nodes.bridge, check=False)
    for node in nodes.nodes:
        with contextlib.suppress(Exception):
            _ip("link", "del", node.veth, check=False)
    for ns in created:
        with contextlib.suppress(Exception):
            _delete_netns(ns)
    for node in nodes.nodes:
        shutil.rmtree(_NETNS_ETC_DIR / node.netns, ignore_errors=True)
