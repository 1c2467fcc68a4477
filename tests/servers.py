"""Real throw-away servers for the Redis and PostgreSQL stores (a pytest plugin).

Load it with ``pytest_plugins = ["tests.servers"]`` (in the root ``tests/conftest.py``, or in a
test module). Session fixtures start one ``redis-server``, a 3-node Redis Cluster and one
PostgreSQL cluster (``initdb`` + ``pg_ctl``) on free loopback ports in temp directories and
stop them at the end; function fixtures give a test its own server to kill and restart.

A missing binary skips the test with an install hint, except when ``CI`` is set: then it fails.
PostgreSQL refuses to run as root, so as root its commands run as the ``postgres`` user
(``runuser -u postgres --``) in a temp directory owned by that user.
"""

from __future__ import annotations

import contextlib
import glob
import os
import random
import shutil
import signal
import socket
import subprocess
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

__all__ = ["PostgresServer", "RedisCluster", "RedisServer", "free_port"]

REDIS_HINT = "install it with `apt-get install redis-server` (or run .ci/services.sh)"
POSTGRES_HINT = (
    "install it with `apt-get install postgresql` (or run .ci/services.sh); "
    "initdb and pg_ctl are looked up on PATH, in /usr/local/bin and /usr/lib/postgresql/*/bin"
)
START_TIMEOUT = 30.0


def _missing(what: str, hint: str) -> None:
    """Skip (or, when ``CI`` is set, fail) because ``what`` is not installed."""
    message = f"{what} not found: {hint}"
    if os.environ.get("CI"):
        pytest.fail(f"{message} (CI is set, so server tests must run)", pytrace=False)
    pytest.skip(message)


def _which(name: str, extra_dirs: tuple[str, ...] = ()) -> str | None:
    found = shutil.which(name)
    if found:
        return found
    for pattern in extra_dirs:
        for directory in sorted(glob.glob(pattern), reverse=True):
            candidate = Path(directory) / name
            if candidate.is_file() and os.access(candidate, os.X_OK):
                return str(candidate)
    return None


def free_port(*, bus_offset: int | None = None) -> int:
    """A loopback TCP port free right now (and ``port + bus_offset`` too, for Cluster's bus).

    Under pytest-xdist each worker draws from its own block of ports (below the ephemeral
    range), so two workers starting servers at once never pick the same port.
    """
    for port in _candidates():
        if bus_offset is not None and port + bus_offset > 65535:
            continue
        if _bindable(port) and (bus_offset is None or _bindable(port + bus_offset)):
            return port
    raise RuntimeError("no free loopback port found")


_WORKER_BLOCK = 2000  # ports per xdist worker, from 10000; a Cluster's bus is +10000


def _candidates() -> Iterator[int]:
    worker = os.environ.get("PYTEST_XDIST_WORKER", "")
    if worker.startswith("gw") and worker[2:].isdigit():
        base = 10000 + (int(worker[2:]) % 5) * _WORKER_BLOCK
        start = random.randrange(_WORKER_BLOCK)
        for offset in range(_WORKER_BLOCK):
            yield base + (start + offset) % _WORKER_BLOCK
        return
    for _ in range(200):
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            port: int = s.getsockname()[1]
        yield port


def _bindable(port: int) -> bool:
    with socket.socket() as s:
        try:
            s.bind(("127.0.0.1", port))
        except OSError:
            return False
    return True


def _wait(check: object, what: str, log: Path | None = None) -> None:
    deadline = time.monotonic() + START_TIMEOUT
    while time.monotonic() < deadline:
        if check():  # type: ignore[operator]
            return
        time.sleep(0.05)
    tail = log.read_text(errors="replace")[-2000:] if log and log.exists() else ""
    raise RuntimeError(f"{what} did not become ready in {START_TIMEOUT}s\n{tail}")


# --------------------------------------------------------------------------- Redis


class RedisServer:
    """One ``redis-server`` on 127.0.0.1 with its data in ``workdir``.

    AOF is on. ``appendfsync="always"`` (the default) fsyncs before each reply, so a
    ``kill -9`` of the server loses no acknowledged write (the fault tests rely on it). With
    ``"everysec"`` Redis may postpone the AOF write while a background fsync is slow and reply
    meanwhile, so a kill under disk load can lose the last second of acknowledged writes;
    the shared session server uses it (nothing kills it, and it is faster).
    """

    def __init__(
        self,
        workdir: Path,
        *,
        port: int | None = None,
        password: str | None = None,
        cluster: bool = False,
        appendfsync: str = "always",
    ) -> None:
        binary = _which("redis-server", ("/usr/bin",))
        cli = _which("redis-cli", ("/usr/bin",))
        if binary is None or cli is None:
            _missing("redis-server/redis-cli", REDIS_HINT)
        self.binary = str(binary)
        self.cli = str(cli)
        self.workdir = workdir
        self.cluster = cluster
        self.appendfsync = appendfsync
        self.port = port if port is not None else free_port(bus_offset=10000 if cluster else None)
        self.password = password
        self.process: subprocess.Popen[bytes] | None = None
        workdir.mkdir(parents=True, exist_ok=True)

    @property
    def url(self) -> str:
        auth = f":{self.password}@" if self.password else ""
        return f"redis://{auth}127.0.0.1:{self.port}/0"

    def cli_args(self) -> list[str]:
        args = [self.cli, "-h", "127.0.0.1", "-p", str(self.port)]
        if self.password:
            args += ["-a", self.password, "--no-auth-warning"]
        return args

    def cli_run(self, *command: str) -> str:
        done = subprocess.run(
            [*self.cli_args(), *command], capture_output=True, text=True, timeout=30, check=False
        )
        return done.stdout.strip()

    def start(self) -> None:
        args = [
            self.binary,
            "--port", str(self.port),
            "--bind", "127.0.0.1",
            "--dir", str(self.workdir),
            "--logfile", str(self.workdir / "redis.log"),
            "--daemonize", "no",
            "--save", "",
            "--appendonly", "yes",
            "--appendfsync", self.appendfsync,
        ]  # fmt: skip
        if self.password:
            args += ["--requirepass", self.password]
        if self.cluster:
            args += [
                "--cluster-enabled", "yes",
                "--cluster-config-file", str(self.workdir / "nodes.conf"),
                "--cluster-node-timeout", "5000",
            ]  # fmt: skip
        self.process = subprocess.Popen(
            args, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
        )
        _wait(self._ready, f"redis-server on port {self.port}", self.workdir / "redis.log")

    def _ready(self) -> bool:
        if self.process is not None and self.process.poll() is not None:
            raise RuntimeError(
                f"redis-server exited with {self.process.returncode}: "
                + (self.workdir / "redis.log").read_text(errors="replace")[-2000:]
            )
        return self.cli_run("ping") == "PONG"

    def kill(self) -> None:
        """``kill -9`` the server (a crash) and wait until it is gone."""
        if self.process is not None:
            self.process.send_signal(signal.SIGKILL)
            self.process.wait(timeout=30)
            self.process = None

    def stop(self) -> None:
        if self.process is not None:
            self.process.terminate()
            try:
                self.process.wait(timeout=30)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait(timeout=30)
            self.process = None


class RedisCluster:
    """A 3-primary Redis Cluster on loopback (no replicas), slots spread by ``redis-cli``."""

    def __init__(self, workdir: Path, nodes: int = 3, *, appendfsync: str = "always") -> None:
        self.nodes = [
            RedisServer(workdir / f"node{n}", cluster=True, appendfsync=appendfsync)
            for n in range(nodes)
        ]

    @property
    def url(self) -> str:
        """The first node's URL; the client discovers the others."""
        return self.nodes[0].url

    def start(self) -> None:
        for node in self.nodes:
            node.start()
        first = self.nodes[0]
        done = subprocess.run(
            [
                first.cli,
                "--cluster",
                "create",
                *(f"127.0.0.1:{node.port}" for node in self.nodes),
                "--cluster-replicas",
                "0",
                "--cluster-yes",
            ],
            capture_output=True,
            text=True,
            timeout=60,
            check=False,
        )
        if done.returncode != 0:
            raise RuntimeError(f"redis-cli --cluster create failed:\n{done.stdout}\n{done.stderr}")
        for node in self.nodes:
            _wait(
                lambda node=node: "cluster_state:ok" in node.cli_run("cluster", "info"),
                f"Redis Cluster node {node.port}",
            )

    def stop(self) -> None:
        for node in self.nodes:
            node.stop()


# --------------------------------------------------------------------------- PostgreSQL

_PG_DIRS = ("/usr/local/bin", "/usr/lib/postgresql/*/bin")


class PostgresServer:
    """A throw-away PostgreSQL cluster: ``initdb`` into a temp dir, ``pg_ctl`` to run it.

    ``fsync=off`` for speed: a killed *server process* still loses nothing committed (the
    WAL is in the OS page cache), only a machine crash would. As root, every command runs as
    the ``postgres`` user, which owns the temp dir.
    """

    def __init__(self, *, password: str | None = None, port: int | None = None) -> None:
        initdb = _which("initdb", _PG_DIRS)
        pg_ctl = _which("pg_ctl", _PG_DIRS)
        if initdb is None or pg_ctl is None:
            _missing("PostgreSQL server binaries (initdb, pg_ctl)", POSTGRES_HINT)
        self.initdb = str(initdb)
        self.pg_ctl = str(pg_ctl)
        self.as_user: list[str] = []
        self.root = Path(tempfile.mkdtemp(prefix="chatlayers-pg-"))
        if os.geteuid() == 0:
            runuser = _which("runuser", ("/usr/sbin", "/sbin"))
            try:
                import pwd

                owner = pwd.getpwnam("postgres")
            except KeyError:
                owner = None
            if runuser is None or owner is None:
                shutil.rmtree(self.root, ignore_errors=True)
                _missing(
                    "a 'postgres' user and runuser (PostgreSQL refuses to run as root)",
                    POSTGRES_HINT,
                )
            assert owner is not None
            os.chown(self.root, owner.pw_uid, owner.pw_gid)
            self.as_user = [str(runuser), "-u", "postgres", "--"]
        self.data = self.root / "data"
        self.log = self.root / "postgres.log"
        self.port = port if port is not None else free_port()
        self.password = password
        self.user = "postgres"
        self._initialized = False

    @property
    def dsn(self) -> str:
        auth = f"{self.user}:{self.password}@" if self.password else f"{self.user}@"
        return f"postgresql://{auth}127.0.0.1:{self.port}/postgres"

    def _run(self, *args: str) -> subprocess.CompletedProcess[str]:
        done = subprocess.run(
            [*self.as_user, *args],
            capture_output=True,
            text=True,
            timeout=120,
            check=False,
            cwd=self.root,
        )
        if done.returncode != 0:
            tail = self.log.read_text(errors="replace")[-2000:] if self.log.exists() else ""
            raise RuntimeError(f"{args[0]} failed:\n{done.stdout}\n{done.stderr}\n{tail}")
        return done

    def init(self) -> None:
        args = [
            self.initdb,
            "-D",
            str(self.data),
            "-U",
            self.user,
            "-E",
            "UTF8",
            "--no-locale",
            "--no-sync",
        ]
        if self.password:
            pwfile = self.root / "pwfile"
            pwfile.write_text(self.password + "\n")
            if self.as_user:
                shutil.chown(pwfile, "postgres")
            args += ["--auth-local=trust", "--auth-host=scram-sha-256", f"--pwfile={pwfile}"]
        else:
            args += ["--auth=trust"]
        self._run(*args)
        self._initialized = True

    def start(self) -> None:
        if not self._initialized:
            self.init()
        options = " ".join(
            [
                f"-c port={self.port}",
                "-c listen_addresses=127.0.0.1",
                f"-c unix_socket_directories={self.root}",
                "-c fsync=off",
                "-c full_page_writes=off",
                "-c max_connections=300",
                "-c shared_buffers=32MB",
            ]
        )
        self._run(
            self.pg_ctl,
            "-D",
            str(self.data),
            "-l",
            str(self.log),
            "-w",
            "-t",
            "60",
            "-o",
            options,
            "start",
        )

    def kill(self) -> None:
        """Stop abruptly (``-m immediate``: no checkpoint, crash recovery at the next start)."""
        self._run(self.pg_ctl, "-D", str(self.data), "-m", "immediate", "-w", "stop")

    def stop(self) -> None:
        with contextlib.suppress(RuntimeError):
            self._run(self.pg_ctl, "-D", str(self.data), "-m", "fast", "-w", "stop")

    def cleanup(self) -> None:
        self.stop()
        shutil.rmtree(self.root, ignore_errors=True)


# --------------------------------------------------------------------------- fixtures


@pytest.fixture(scope="session")
def redis_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RedisServer]:
    """One ``redis-server`` for the whole run (stores isolate themselves by key prefix)."""
    server = RedisServer(tmp_path_factory.mktemp("redis"), appendfsync="everysec")
    server.start()
    try:
        yield server
    finally:
        server.stop()


@pytest.fixture(scope="session")
def redis_url(redis_server: RedisServer) -> str:
    return redis_server.url


@pytest.fixture(scope="session")
def redis_cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RedisCluster]:
    """A 3-node Redis Cluster for the whole run."""
    cluster = RedisCluster(tmp_path_factory.mktemp("redis-cluster"), appendfsync="everysec")
    try:
        cluster.start()
        yield cluster
    finally:
        cluster.stop()


@pytest.fixture(scope="session")
def redis_cluster_url(redis_cluster: RedisCluster) -> str:
    """The URL of one node; pass ``cluster=True`` (or add ``?cluster=true``) to the store."""
    return redis_cluster.url


@pytest.fixture
def redis_server_factory(tmp_path: Path) -> Iterator[type[RedisServer]]:
    """Own servers for one test (to kill and restart); all stopped at its end."""
    started: list[RedisServer] = []

    class _Owned(RedisServer):
        def start(self) -> None:
            started.append(self)
            super().start()

    try:
        yield _Owned
    finally:
        for server in started:
            server.stop()


@pytest.fixture(scope="session")
def postgres_server() -> Iterator[PostgresServer]:
    """One PostgreSQL cluster for the whole run (stores isolate themselves by schema)."""
    server = PostgresServer()
    try:
        server.start()
        yield server
    finally:
        server.cleanup()


@pytest.fixture(scope="session")
def postgres_dsn(postgres_server: PostgresServer) -> str:
    return postgres_server.dsn


@pytest.fixture
def postgres_server_factory() -> Iterator[type[PostgresServer]]:
    """Own PostgreSQL clusters for one test (to kill and restart); removed at its end."""
    made: list[PostgresServer] = []

    class _Owned(PostgresServer):
        def __init__(self, *, password: str | None = None, port: int | None = None) -> None:
            super().__init__(password=password, port=port)
            made.append(self)

    try:
        yield _Owned
    finally:
        for server in made:
            server.cleanup()
