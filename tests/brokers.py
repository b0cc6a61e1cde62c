"""Broker processes that tests start on free loopback ports and stop by pid."""

from __future__ import annotations

import asyncio
import contextlib
import os
import random
import signal
import socket
import subprocess
import time
import uuid
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

# The server binaries these tests start: set them to run the same tests against another
# version (.ci/matrix does, with nats-server 2.15 and valkey-server 8 from .ci/servers.txt).
NATS_SERVER = os.environ.get("M_TEST_NATS_SERVER", "/usr/sbin/nats-server")
REDIS_SERVER = os.environ.get("M_TEST_REDIS_SERVER", "redis-server")


def _bindable(port: int) -> bool:
    with socket.socket() as s:
        try:
            s.bind(("127.0.0.1", port))
        except OSError:
            return False
        return True


# Servers listen below the kernel's ephemeral range (32768 and up on Linux): a port
# taken from it can be handed to some process's outgoing connection before the server
# binds it, and the server then never comes up.
_SERVER_PORTS = (20000, 32000)


# Every port handed out by this process: servers picked before any of them starts (a
# cluster's nodes, their bus ports) would otherwise be free to pick twice.
_HANDED_OUT: set[int] = set()


def free_port() -> int:
    """A free port for a test server, outside the range outgoing connections use."""
    for _ in range(500):
        port = random.randrange(*_SERVER_PORTS)
        if port not in _HANDED_OUT and _bindable(port):
            _HANDED_OUT.add(port)
            return port
    raise RuntimeError("no free port for a test server")


def free_cluster_port() -> int:
    """A free port whose Redis Cluster bus port (port + 10000) is free too. Ports are
    below 20000 and bus ports from 20000 on, so no node listens on another's bus port;
    both are outside the range outgoing connections use."""
    for _ in range(500):
        port = random.randrange(_SERVER_PORTS[0] - 10000, _SERVER_PORTS[0])
        pair = {port, port + 10000}
        if not pair & _HANDED_OUT and _bindable(port) and _bindable(port + 10000):
            _HANDED_OUT.update(pair)
            return port
    raise RuntimeError("no free port pair for a Redis Cluster node")


def port_open(port: int) -> bool:
    with socket.socket() as s:
        s.settimeout(0.2)
        return s.connect_ex(("127.0.0.1", port)) == 0


def wait_port(
    port: int,
    timeout: float = 15.0,
    proc: subprocess.Popen[bytes] | None = None,
    log: Path | None = None,
) -> None:
    """Wait until ``port`` accepts connections; fail at once, with the end of ``log``,
    when ``proc`` exits first."""
    deadline = time.monotonic() + timeout
    while not port_open(port):
        if proc is not None and proc.poll() is not None:
            tail = log.read_text(errors="replace")[-2000:] if log is not None else ""
            raise RuntimeError(f"the server for port {port} exited ({proc.returncode}):\n{tail}")
        if time.monotonic() > deadline:
            raise TimeoutError(f"nothing listens on 127.0.0.1:{port} after {timeout:g}s")
        time.sleep(0.05)


class ServerProcess:
    """A broker process started by a test; stopped by pid, never by name."""

    proc: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        raise NotImplementedError

    def start(self) -> None:
        raise NotImplementedError

    def restart(self, outage: float = 2.0) -> tuple[float, float]:
        """Stop the server (SIGTERM), stay down for ``outage`` seconds, start it again.
        Returns when it was down and when it was started again."""
        self.stop()
        down = time.time()
        time.sleep(outage)
        up = time.time()
        self.start()
        return down, up

    def pause(self, seconds: float) -> tuple[float, float]:
        """Freeze the server (SIGSTOP) for ``seconds``: its sockets stay open and nothing
        it is sent is handled until SIGCONT. Returns when it was stopped and continued."""
        stopped = self.freeze()
        time.sleep(seconds)
        return stopped, self.thaw()

    def freeze(self) -> float:
        """SIGSTOP the server; return when."""
        self._signal(signal.SIGSTOP)
        return time.time()

    def thaw(self) -> float:
        """SIGCONT the server; return when."""
        self._signal(signal.SIGCONT)
        return time.time()

    def _signal(self, sig: int) -> None:
        assert self.proc is not None
        self.proc.send_signal(sig)

    def stop(self, sig: int = signal.SIGTERM) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(sig)
            try:
                self.proc.wait(15)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(5)
        self.proc = None


class NatsServer(ServerProcess):
    """One nats-server with JetStream, optionally part of a cluster."""

    def __init__(
        self,
        workdir: Path,
        name: str = "n1",
        *,
        cluster: str | None = None,
        cluster_port: int | None = None,
        routes: list[int] | None = None,
    ) -> None:
        self.name = name
        self.port = free_port()
        self.store = workdir / f"{name}-store"
        self.log = workdir / f"{name}.log"
        self.cluster = cluster
        self.cluster_port = cluster_port
        self.routes = routes or []
        self.proc: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        return f"nats://127.0.0.1:{self.port}"

    def start(self) -> None:
        args = [NATS_SERVER, "-a", "127.0.0.1", "-p", str(self.port), "-js"]
        args += ["-sd", str(self.store), "-n", self.name]
        if self.cluster is not None:
            args += ["--cluster_name", self.cluster]
            args += ["--cluster", f"nats://127.0.0.1:{self.cluster_port}"]
            args += ["--routes", ",".join(f"nats://127.0.0.1:{p}" for p in self.routes)]
        with self.log.open("ab") as log:
            self.proc = subprocess.Popen(args, stdout=log, stderr=subprocess.STDOUT)
        wait_port(self.port, proc=self.proc, log=self.log)


def nats_cluster(workdir: Path, size: int = 3) -> list[NatsServer]:
    cluster_ports = [free_port() for _ in range(size)]
    return [
        NatsServer(
            workdir,
            f"n{i + 1}",
            cluster="fmtest",
            cluster_port=cluster_ports[i],
            routes=[p for j, p in enumerate(cluster_ports) if j != i],
        )
        for i in range(size)
    ]


class RedisServer(ServerProcess):
    """One redis-server (optionally a cluster node) with its own directory."""

    def __init__(self, workdir: Path, *, cluster: bool = False, persist: bool = False) -> None:
        self.port = free_cluster_port() if cluster else free_port()
        self.dir = workdir / f"redis-{self.port}"
        self.dir.mkdir(parents=True)
        self.cluster = cluster
        self.persist = persist
        self.extra: tuple[str, ...] = ()
        self.proc: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        return f"redis://127.0.0.1:{self.port}/0"

    def start(self, *extra: str) -> None:
        extra = extra or self.extra
        self.extra = extra
        args = [REDIS_SERVER, "--bind", "127.0.0.1", "--port", str(self.port)]
        args += ["--dir", str(self.dir), "--save", ""]
        args += (
            ["--appendonly", "yes", "--appendfsync", "always"]
            if self.persist
            else ["--appendonly", "no"]
        )
        if self.cluster:
            args += ["--cluster-enabled", "yes", "--cluster-config-file", "nodes.conf"]
        args += list(extra)
        with (self.dir / "server.log").open("ab") as log:
            self.proc = subprocess.Popen(args, stdout=log, stderr=subprocess.STDOUT)
        wait_port(self.port, proc=self.proc, log=self.dir / "server.log")


class RedisSentinel(ServerProcess):
    """One redis-server in sentinel mode, watching ``master`` at ``primary_port``."""

    def __init__(self, workdir: Path, master: str, primary_port: int, quorum: int) -> None:
        self.port = free_port()
        self.dir = workdir / f"sentinel-{self.port}"
        self.dir.mkdir(parents=True)
        self.conf = self.dir / "sentinel.conf"  # sentinels rewrite it: their own copy
        self.conf.write_text(
            f"bind 127.0.0.1\nport {self.port}\ndir {self.dir}\n"
            f"sentinel monitor {master} 127.0.0.1 {primary_port} {quorum}\n"
            # 1 s left a new primary's PINGs unanswered on a loaded machine now and then:
            # a second, spurious failover right after the first.
            f"sentinel down-after-milliseconds {master} 2500\n"
            f"sentinel failover-timeout {master} 10000\n"
            f"sentinel parallel-syncs {master} 2\n"
        )
        self.proc: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        return f"127.0.0.1:{self.port}"

    def start(self) -> None:
        with (self.dir / "sentinel.log").open("ab") as log:
            self.proc = subprocess.Popen(
                [REDIS_SERVER, str(self.conf), "--sentinel"], stdout=log, stderr=subprocess.STDOUT
            )
        wait_port(self.port, proc=self.proc, log=self.dir / "sentinel.log")


class SentinelSet:
    """A primary, ``replicas`` replicas and ``sentinels`` sentinels watching them."""

    def __init__(
        self, workdir: Path, master: str = "fm", replicas: int = 2, sentinels: int = 3
    ) -> None:
        self.master = master
        self.primary = RedisServer(workdir)
        self.replicas = [RedisServer(workdir) for _ in range(replicas)]
        self.sentinels = [
            RedisSentinel(workdir, master, self.primary.port, sentinels // 2 + 1)
            for _ in range(sentinels)
        ]

    @property
    def servers(self) -> list[ServerProcess]:
        return [self.primary, *self.replicas, *self.sentinels]

    def url(self, scheme: str = "redis+sentinel") -> str:
        hosts = ",".join(s.url for s in self.sentinels)
        return f"{scheme}://{hosts}/{self.master}/0"

    def start(self) -> None:
        fast = ("--repl-diskless-sync-delay", "0")  # a replica (re)syncs at once
        self.primary.start(*fast)
        for replica in self.replicas:
            replica.start(*fast, "--replicaof", "127.0.0.1", str(self.primary.port))
        for sentinel in self.sentinels:
            sentinel.start()
        self.wait_for(lambda role: role == ["master", self.primary.port])

    def primary_port(self) -> int | None:
        """The primary's port, once every sentinel names the same one (two sentinels can
        each run a failover of their own, one after the other)."""
        named = set()
        for sentinel in self.sentinels:
            out = redis_cli(sentinel.port, "sentinel", "get-master-addr-by-name", self.master)
            words = out.split()
            named.add(int(words[1]) if len(words) == 2 else None)
        return named.pop() if len(named) == 1 else None

    def wait_for(
        self,
        ok: Callable[[list[object]], bool],
        timeout: float = 30.0,
        replicas: int | None = None,
        steady: float = 0.0,
    ) -> float:
        """Until ``replicas`` replicas (default all) are in sync with, and acknowledge
        writes of, the primary every sentinel names, no other server still running says
        it is a primary, and ``ok`` holds for ``["master", port]``; all of it without a
        break for ``steady`` seconds (a second failover may follow the first). Returns
        when (time.time()) that began."""
        deadline = time.monotonic() + timeout
        want = len(self.replicas) if replicas is None else replicas
        since: tuple[int, float, float] | None = None  # primary, when settled (mono, wall)
        while True:
            port = self.primary_port()
            if port is not None and ok(["master", port]) and self._settled(port, want):
                if since is None or since[0] != port:
                    since = (port, time.monotonic(), time.time())
                if time.monotonic() - since[1] >= steady:
                    return since[2]
            else:
                since = None
            if time.monotonic() > deadline:
                raise TimeoutError(f"sentinel set not settled (primary {port})")
            time.sleep(0.2)

    def _settled(self, port: int, want: int) -> bool:
        """The server on ``port`` is the only primary running, and ``want`` replicas are
        in sync with it and acknowledge its writes (WAIT)."""
        for server in (self.primary, *self.replicas):
            running = server.proc is not None and server.proc.poll() is None
            if (
                running
                and server.port != port
                and "role:master" in redis_cli(server.port, "info", "replication")
            ):
                return False
        info = redis_cli(port, "info", "replication")
        acked = redis_cli(port, "wait", str(want), "500").strip()
        return info.count("state=online") >= want and acked.isdigit() and int(acked) >= want

    def stop(self) -> None:
        for server in self.servers:
            server.stop(signal.SIGKILL)


def redis_cli(port: int, *args: str) -> str:
    """What ``redis-cli -p port args...`` prints."""
    return subprocess.run(
        ["redis-cli", "-p", str(port), *args], capture_output=True, text=True, timeout=10
    ).stdout


def redis_cluster(
    workdir: Path, masters: int = 3, replicas: int = 0, *extra: str
) -> list[RedisServer]:
    """Start ``masters`` cluster nodes with ``replicas`` each and join them with
    ``redis-cli --cluster create``; ``extra`` goes to every node's command line."""
    nodes = [RedisServer(workdir, cluster=True) for _ in range(masters * (1 + replicas))]
    try:
        for node in nodes:
            node.start(*extra)
        failed = _create_cluster(nodes, replicas)
        if failed:
            raise RuntimeError(f"no redis cluster on ports {[n.port for n in nodes]}: {failed}")
    except BaseException:
        for node in nodes:
            node.stop(signal.SIGKILL)
        raise
    return nodes


def _create_cluster(nodes: list[RedisServer], replicas: int) -> str:
    """Join ``nodes`` into a cluster: "" once it is ok, else what went wrong."""
    addresses = [f"127.0.0.1:{n.port}" for n in nodes]
    options = ["--cluster-replicas", str(replicas), "--cluster-yes"]
    created = subprocess.run(
        ["redis-cli", "--cluster", "create", *addresses, *options],
        capture_output=True,
        text=True,
        timeout=60,
    )
    if created.returncode != 0:
        return f"redis-cli exited {created.returncode}:\n{created.stdout}{created.stderr}"
    deadline = time.monotonic() + 30
    while True:
        info = redis_cli(nodes[0].port, "cluster", "info")
        if "cluster_state:ok" in info:
            return ""
        if time.monotonic() > deadline:
            return f"cluster not ok 30 s after its create:\n{info}"
        time.sleep(0.2)


RABBITMQ_SERVER = "/usr/lib/rabbitmq/bin/rabbitmq-server"
RABBITMQ_CTL = "/usr/lib/rabbitmq/bin/rabbitmqctl"  # not the wrapper: it switches user and HOME


def self_signed_certificate(directory: Path) -> tuple[Path, Path, Path]:
    """A CA and a server certificate for 127.0.0.1 signed by it: (ca, cert, key)."""
    ca, ca_key = directory / "ca.pem", directory / "ca.key"
    cert, key, csr = directory / "server.pem", directory / "server.key", directory / "server.csr"
    ext = directory / "san.ext"
    ext.write_text("subjectAltName = IP:127.0.0.1\n")
    commands: list[list[object]] = [
        ["req", "-x509", "-newkey", "rsa:2048", "-nodes", "-keyout", ca_key, "-out", ca],
        ["req", "-newkey", "rsa:2048", "-nodes", "-keyout", key, "-out", csr],
        ["x509", "-req", "-in", csr, "-CA", ca, "-CAkey", ca_key, "-CAcreateserial"],
    ]
    commands[0] += ["-days", "2", "-subj", "/CN=framework-m test CA"]
    commands[1] += ["-subj", "/CN=127.0.0.1"]
    commands[2] += ["-out", cert, "-days", "2", "-extfile", ext]
    for args in commands:
        subprocess.run(["openssl", *map(str, args)], check=True, capture_output=True, timeout=60)
    return ca, cert, key


class RabbitServer(ServerProcess):
    """A RabbitMQ node of its own (name, ports, data, cookie) with the management API and
    framework-m's dedup plugin, which build.sh installed into the broker's plugins folder."""

    def __init__(
        self,
        workdir: Path,
        *,
        tls: bool = False,
        cookie: str | None = None,
        plugins: tuple[str, ...] = ("framework_m_dedup_exchange", "rabbitmq_management"),
    ) -> None:
        self.port, self.management_port, self.dist_port = free_port(), free_port(), free_port()
        self.dir = workdir / f"rabbit-{self.port}"
        self.dir.mkdir(parents=True)
        if cookie is not None:  # nodes of one cluster share it
            cookie_file = self.dir / ".erlang.cookie"
            cookie_file.write_text(cookie)
            cookie_file.chmod(0o400)
        conf = (
            f"listeners.tcp.default = 127.0.0.1:{self.port}\n"
            f"management.tcp.ip = 127.0.0.1\nmanagement.tcp.port = {self.management_port}\n"
        )
        self.tls_port: int | None = None
        if tls:
            self.tls_port = free_port()
            ca, cert, key = self_signed_certificate(self.dir)
            conf += (
                f"listeners.ssl.default = 127.0.0.1:{self.tls_port}\n"
                f"ssl_options.cacertfile = {ca}\nssl_options.certfile = {cert}\n"
                f"ssl_options.keyfile = {key}\nssl_options.verify = verify_none\n"
                "ssl_options.fail_if_no_peer_cert = false\n"
            )
        (self.dir / "rabbitmq.conf").write_text(conf)
        # The README's advice for nodes that restart: a bucket's dead-lettered message
        # that found the jobs queue not up yet is sent again after 5 s, not 180 s.
        (self.dir / "advanced.config").write_text(
            "[{rabbit, [{dead_letter_worker_publisher_confirm_timeout, 5000}]}].\n"
        )
        self.plugins = plugins
        (self.dir / "enabled_plugins").write_text(f"[{','.join(plugins)}].\n")
        self.env = {
            **os.environ,
            "HOME": str(self.dir),  # its own Erlang cookie
            "RABBITMQ_NODENAME": self.node,
            "RABBITMQ_DIST_PORT": str(self.dist_port),
            "RABBITMQ_CONFIG_FILE": str(self.dir / "rabbitmq"),
            "RABBITMQ_ADVANCED_CONFIG_FILE": str(self.dir / "advanced.config"),
            "RABBITMQ_ENABLED_PLUGINS_FILE": str(self.dir / "enabled_plugins"),
            "RABBITMQ_MNESIA_BASE": str(self.dir / "mnesia"),
            "RABBITMQ_LOG_BASE": str(self.dir / "log"),
            "RABBITMQ_PID_FILE": str(self.dir / "pid"),
        }
        self.proc: subprocess.Popen[bytes] | None = None

    @property
    def node(self) -> str:
        return f"fmtest-{self.port}@localhost"

    @property
    def url(self) -> str:
        return f"amqp://guest:guest@127.0.0.1:{self.port}/"

    def ctl(self, *args: str) -> str:
        """Run ``rabbitmqctl`` against this node; return what it printed."""
        return subprocess.run(
            [RABBITMQ_CTL, "-n", self.node, *args],
            env=self.env,
            check=True,
            capture_output=True,
            text=True,
            timeout=120,
        ).stdout

    def join(self, other: RabbitServer) -> None:
        """Make this running node a member of ``other``'s cluster."""
        self.ctl("stop_app")
        self.ctl("join_cluster", other.node)
        self.ctl("start_app")
        wait_port(self.port, timeout=60)

    @property
    def management_url(self) -> str:
        return f"http://127.0.0.1:{self.management_port}"

    def start(self) -> None:
        with (self.dir / "server.log").open("ab") as log:
            # A group of its own: the script runs the Erlang VM as a child.
            self.proc = subprocess.Popen(
                [RABBITMQ_SERVER],
                stdout=log,
                stderr=subprocess.STDOUT,
                env=self.env,
                start_new_session=True,
            )
        wait_port(self.port, timeout=90)
        if "rabbitmq_management" in self.plugins:
            wait_port(self.management_port, timeout=30)
        if self.tls_port is not None:
            wait_port(self.tls_port, timeout=30)

    def _signal(self, sig: int) -> None:
        assert self.proc is not None
        os.killpg(self.proc.pid, sig)  # the script and the Erlang VM it runs

    def stop(self, sig: int = signal.SIGTERM) -> None:
        if self.proc is None:
            return
        with contextlib.suppress(ProcessLookupError):
            os.killpg(self.proc.pid, sig)
        try:
            self.proc.wait(60)
        except subprocess.TimeoutExpired:
            os.killpg(self.proc.pid, signal.SIGKILL)
            self.proc.wait(10)
        # The VM may outlive the script by a moment; wait until its port closes.
        deadline = time.monotonic() + 30
        while port_open(self.port) and time.monotonic() < deadline:
            time.sleep(0.1)
        with contextlib.suppress(ProcessLookupError):
            os.killpg(self.proc.pid, signal.SIGKILL)
        self.proc = None


@contextlib.contextmanager
def rabbit_cluster(workdir: Path, size: int = 3) -> Iterator[list[RabbitServer]]:
    """``size`` RabbitMQ nodes with framework-m's plugin, started side by side and joined
    into one cluster; every node SIGKILLed on exit (a stopped VM too)."""
    cookie = uuid.uuid4().hex
    nodes = [
        RabbitServer(workdir, cookie=cookie, plugins=("framework_m_dedup_exchange",))
        for _ in range(size)
    ]
    try:
        with ThreadPoolExecutor(size) as pool:
            list(pool.map(lambda node: node.start(), nodes))
        for node in nodes[1:]:
            node.join(nodes[0])
        yield nodes
    finally:
        for node in nodes:
            node.stop(signal.SIGKILL)


@contextlib.contextmanager
def synced_namespace(server: str) -> Iterator[str]:
    """The URL of a fresh namespace on ``server`` with its schema synced (as ``m
    sync-schema`` would before a deploy), dropped after the block."""
    from framework_m_core import connect
    from framework_m_core.testing import namespace

    ns = namespace(server)

    async def sync() -> None:
        async with connect(ns.url(), sync_schema=True):
            pass

    try:
        asyncio.run(sync())
        yield ns.url()
    finally:
        asyncio.run(ns.drop())
