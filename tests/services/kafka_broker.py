"""A real single-node Apache Kafka broker (KRaft) for tests and benchmarks, without Docker.

The broker jars come from Maven Central: ``tests/services/kafka/pom.xml`` pins
``org.apache.kafka:kafka_2.13`` plus the log4j2 SLF4J 1.x binding, and
``mvn dependency:copy-dependencies`` copies its runtime closure into
``~/.cache/workloadmap/kafka-<version>/libs`` once (Maven's own downloads stay in
``~/.m2``). Needs Java 17+ (``java`` on PATH or ``$JAVA_HOME/bin/java``) and, for the
first fetch only, ``mvn``. Only the standard library is used.

Usage::

    from tests.services.kafka_broker import KafkaBroker

    with KafkaBroker() as broker:          # format + start + wait until ready
        use(broker.bootstrap_servers)      # "127.0.0.1:<port>"
        broker.kill()                      # SIGKILL, for crash tests
        broker.restart()                   # same ports, same log dir

Command line (from the repository root)::

    python -m tests.services.kafka_broker fetch   # prefetch the jars (e.g. in `make`)
    python -m tests.services.kafka_broker run     # start one, print its address, Ctrl-C stops

The broker listens on 127.0.0.1 only, on two free ports picked at start (client and
controller). Everything it writes (``server.properties``, data in ``data/``, its log in
``server.log``, the JVM's own stdout/stderr in ``stdout.log``) lives in a fresh temp dir
that ``close()`` / leaving the ``with`` block deletes. Nothing is printed unless it fails;
errors carry the tail of the broker's logs. If the Python process dies without stopping
the broker (SIGKILL, ``timeout``, a crashed test run), a small watchdog process kills
the JVM and deletes the temp dir, so no broker is left behind.

"Ready" means the broker answered a Kafka Metadata request (sent over a plain socket,
no client library needed) with its own cluster id and listing itself, i.e. it is
registered and unfenced.
"""

from __future__ import annotations

import base64
import hashlib
import os
import re
import shutil
import signal
import socket
import struct
import subprocess
import sys
import tempfile
import time
import uuid
import xml.etree.ElementTree as ET
from pathlib import Path

from tests.services.processes import ServerProcess, free_ports, log_tails, make_workdir, remove_workdir, tail

HERE = Path(__file__).resolve().parent / "kafka"
POM = HERE / "pom.xml"
LOG4J_CONFIG = HERE / "log4j2.properties"
CACHE_ROOT = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "workloadmap"

READY_TIMEOUT = 60.0  # seconds from JVM start to "answers Metadata listing itself"
STOP_TIMEOUT = 30.0  # seconds after SIGTERM before SIGKILL
NODE_ID = 1
_MARKER = ".complete"  # written last into libs/: pom hash + jar names


class KafkaBrokerError(RuntimeError):
    """The jars could not be fetched, or the broker did not start / stop."""


def kafka_version() -> str:
    """The Kafka version pinned in pom.xml (the one source of truth)."""
    ns = {"m": "http://maven.apache.org/POM/4.0.0"}
    node = ET.parse(POM).getroot().find("m:properties/m:kafka.version", ns)
    if node is None or not (node.text or "").strip():
        raise KafkaBrokerError(f"no <kafka.version> property in {POM}")
    return node.text.strip()


# --------------------------------------------------------------------------- jars


def _java() -> str:
    home = os.environ.get("JAVA_HOME")
    if home and (Path(home) / "bin" / "java").is_file():
        return str(Path(home) / "bin" / "java")
    java = shutil.which("java")
    if not java:
        raise KafkaBrokerError(
            "java not found (need Java 17+ on PATH or in $JAVA_HOME; "
            "Debian: apt-get install openjdk-17-jre-headless)"
        )
    return java


def _check_java(java: str) -> None:
    out = subprocess.run([java, "-version"], capture_output=True, text=True).stderr
    m = re.search(r'version "(\d+)(?:\.(\d+))?', out)
    major = int(m.group(1)) if m else 0
    if major == 1 and m and m.group(2):  # "1.8.0_x" style
        major = int(m.group(2))
    if major < 17:
        raise KafkaBrokerError(f"Kafka {kafka_version()} needs Java 17+, {java} is: {out.strip()}")


def _marker_text(libs: list[str]) -> str:
    pom_hash = hashlib.sha256(POM.read_bytes()).hexdigest()
    return "\n".join([f"pom-sha256 {pom_hash}", *sorted(libs)]) + "\n"


def _libs_complete(libs_dir: Path) -> bool:
    marker = libs_dir / _MARKER
    if not marker.is_file():
        return False
    lines = marker.read_text().splitlines()
    if not lines or lines[0] != _marker_text([]).splitlines()[0]:
        return False  # pom.xml changed since this folder was filled
    return all((libs_dir / name).is_file() for name in lines[1:])


def ensure_jars() -> Path:
    """Return the folder holding every broker jar, fetching it with Maven if needed.

    The folder is ``~/.cache/workloadmap/kafka-<version>/libs``. Maven runs only when it
    is missing or incomplete (no marker, a jar gone, or pom.xml edited); it fills a
    sibling temp folder that is renamed into place, so an interrupted or concurrent
    fetch never leaves a half-filled ``libs``.
    """
    libs_dir = CACHE_ROOT / f"kafka-{kafka_version()}" / "libs"
    if _libs_complete(libs_dir):
        return libs_dir
    mvn = shutil.which("mvn")
    if not mvn:
        raise KafkaBrokerError(
            f"{libs_dir} is not filled yet and mvn is not on PATH "
            "(Debian: apt-get install maven; Maven Central must be reachable once)"
        )
    libs_dir.parent.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(prefix="libs-", dir=libs_dir.parent))
    try:
        cmd = [
            mvn, "-q", "-B", "-f", str(POM), "dependency:copy-dependencies",
            "-DincludeScope=runtime", f"-DoutputDirectory={staging}",
        ]  # fmt: skip
        res = subprocess.run(cmd, capture_output=True, text=True)
        jars = sorted(p.name for p in staging.glob("*.jar"))
        if res.returncode != 0 or not any(n.startswith("kafka_2.13-") for n in jars):
            raise KafkaBrokerError(
                f"fetching Kafka jars failed (exit {res.returncode}): {' '.join(cmd)}\n"
                + tail(res.stdout + res.stderr, 40)
            )
        (staging / _MARKER).write_text(_marker_text(jars))
        if libs_dir.exists():  # incomplete or stale: replace it
            shutil.rmtree(libs_dir, ignore_errors=True)
        try:
            staging.rename(libs_dir)
        except OSError:  # another process won the race
            if not _libs_complete(libs_dir):
                raise
    finally:
        shutil.rmtree(staging, ignore_errors=True)
    return libs_dir


# --------------------------------------------------------------------------- broker


def _random_cluster_id() -> str:
    """A Kafka Uuid string: 16 random bytes, base64url without padding (22 chars).

    It may start with "-": pass it as ``--cluster-id=<id>``, never as a separate argument.
    """
    return base64.urlsafe_b64encode(uuid.uuid4().bytes).decode().rstrip("=")


def _kafka_string(s: str) -> bytes:
    b = s.encode()
    return struct.pack(">h", len(b)) + b


def metadata(host: str, port: int, timeout: float = 2.0) -> tuple[str | None, list[tuple]]:
    """Send one Metadata v4 request (no topics); return (cluster_id, [(node_id, host, port)]).

    Raises OSError / ValueError / struct.error if no well-formed answer comes back.
    Request: header v1 (api_key 3, version 4, correlation id, client id) + body
    (topics = empty array, allow_auto_topic_creation = false).
    Response v4: correlation id, throttle_time_ms, brokers[node_id, host, port, rack?],
    cluster_id?, controller_id, topics[] (the nullable strings have length -1 for null).
    """
    body = struct.pack(">hhi", 3, 4, 7) + _kafka_string("workloadmap-probe")
    body += struct.pack(">ib", 0, 0)
    with socket.create_connection((host, port), timeout=timeout) as s:
        s.settimeout(timeout)
        s.sendall(struct.pack(">i", len(body)) + body)
        (size,) = struct.unpack(">i", _recv_exactly(s, 4))
        data = _recv_exactly(s, size)
    corr, _throttle, count = struct.unpack_from(">iii", data, 0)
    if corr != 7:
        raise ValueError(f"unexpected correlation id {corr}")
    off, brokers = 12, []
    for _ in range(count):
        (node_id,) = struct.unpack_from(">i", data, off)
        bhost, off = _read_string(data, off + 4)
        (bport,) = struct.unpack_from(">i", data, off)
        _rack, off = _read_string(data, off + 4)
        brokers.append((node_id, bhost, bport))
    cluster_id, _ = _read_string(data, off)
    return cluster_id, brokers


def _read_string(data: bytes, off: int) -> tuple[str | None, int]:
    (n,) = struct.unpack_from(">h", data, off)
    if n < 0:
        return None, off + 2
    return data[off + 2 : off + 2 + n].decode(), off + 2 + n


def _recv_exactly(s: socket.socket, n: int) -> bytes:
    buf = b""
    while len(buf) < n:
        chunk = s.recv(n - len(buf))
        if not chunk:
            raise ConnectionError("connection closed by broker")
        buf += chunk
    return buf


class KafkaBroker:
    """One combined broker+controller (KRaft) JVM on 127.0.0.1, in a fresh temp dir.

    ``start()`` (or entering the ``with`` block) fetches the jars if needed, picks two
    free ports, writes ``server.properties``, formats the log dir and starts the JVM,
    returning once the broker is ready. ``stop()`` shuts it down (SIGTERM, then SIGKILL
    after ``STOP_TIMEOUT``), ``kill()`` SIGKILLs it (an unclean crash), ``restart()``
    starts it again on the same ports and log dir, so topics, data and committed
    offsets survive. ``close()`` (leaving the ``with`` block) stops it and deletes the
    temp dir.
    """

    def __init__(self, *, heap: str = "512m", ready_timeout: float = READY_TIMEOUT,
                 extra_properties: dict[str, str] | None = None) -> None:  # fmt: skip
        self.heap = heap
        self.ready_timeout = ready_timeout
        self.extra_properties = dict(extra_properties or {})
        self.version = kafka_version()
        self.cluster_id = _random_cluster_id()
        self.port: int | None = None
        self.controller_port: int | None = None
        self.workdir: Path | None = None
        self._proc: ServerProcess | None = None
        self._formatted = False

    # -- public API ---------------------------------------------------------------

    @property
    def bootstrap_servers(self) -> str:
        if self.port is None:
            raise KafkaBrokerError("broker not started")
        return f"127.0.0.1:{self.port}"

    @property
    def running(self) -> bool:
        return self._proc is not None and self._proc.running

    def start(self) -> KafkaBroker:
        """Start the broker (first call: also set up dir, ports, format) and wait for it."""
        if self.running:
            return self
        java = _java()
        if self.workdir is None:
            _check_java(java)
            libs = ensure_jars()
            self.workdir = make_workdir("workloadmap-kafka-")
            # Rarely another process grabs a picked port before the JVM binds it:
            # on the first start only, retry with fresh ports.
            for attempt in range(3):
                self.port, self.controller_port = free_ports(2)
                self._write_properties()
                if not self._formatted:
                    self._format(java, libs)
                try:
                    self._launch(java, libs)
                    return self
                except KafkaBrokerError as e:
                    if attempt == 2 or "Address already in use" not in str(e):
                        raise
            raise AssertionError("unreachable")
        self._launch(java, ensure_jars())
        return self

    def stop(self, timeout: float = STOP_TIMEOUT) -> None:
        """Controlled shutdown: SIGTERM, wait up to ``timeout`` s, then SIGKILL."""
        if self._proc is not None:
            self._proc.stop(timeout)
            self._proc = None

    def kill(self) -> None:
        """SIGKILL the JVM (no clean shutdown), for crash tests; ``restart()`` recovers."""
        if self._proc is not None:
            self._proc.kill()
            self._proc = None

    def restart(self) -> KafkaBroker:
        """Stop (if running) and start again on the same ports and log dir."""
        if self.workdir is None:
            return self.start()
        self.stop()
        return self.start()

    def close(self) -> None:
        """Stop the broker and delete its temp dir (data and logs)."""
        self.stop()
        if self.workdir is not None:
            remove_workdir(self.workdir)
            self.workdir = None

    def log_tail(self, lines: int = 40) -> str:
        """The last lines of the broker's log and of the JVM's own stdout/stderr."""
        if self.workdir is None:
            return ""
        tails = log_tails(self.workdir, ("server.log", "stdout.log"), lines)
        return tails or f"(no broker output in {self.workdir})"

    def __enter__(self) -> KafkaBroker:
        try:
            return self.start()
        except BaseException:
            self.close()
            raise

    def __exit__(self, *exc) -> None:
        self.close()

    def __repr__(self) -> str:
        state = "running" if self.running else "stopped"
        return f"<KafkaBroker {self.version} {state} port={self.port} dir={self.workdir}>"

    # -- internals ----------------------------------------------------------------

    def _write_properties(self) -> None:
        assert self.workdir is not None
        props = {
            "process.roles": "broker,controller",
            "node.id": str(NODE_ID),
            "controller.quorum.voters": f"{NODE_ID}@127.0.0.1:{self.controller_port}",
            "listeners": (
                f"PLAINTEXT://127.0.0.1:{self.port},CONTROLLER://127.0.0.1:{self.controller_port}"
            ),
            "advertised.listeners": f"PLAINTEXT://127.0.0.1:{self.port}",
            "controller.listener.names": "CONTROLLER",
            "inter.broker.listener.name": "PLAINTEXT",
            "listener.security.protocol.map": "PLAINTEXT:PLAINTEXT,CONTROLLER:PLAINTEXT",
            "log.dirs": str(self.workdir / "data"),
            "offsets.topic.replication.factor": "1",
            "transaction.state.log.replication.factor": "1",
            "transaction.state.log.min.isr": "1",
            # share groups (KIP-932) exist in every Kafka 4.x
            "share.coordinator.state.topic.replication.factor": "1",
            "share.coordinator.state.topic.min.isr": "1",
            "group.initial.rebalance.delay.ms": "0",
            # After kill() the restarted broker cannot register until the controller
            # fences its previous incarnation (session timeout, 9 s by default): a
            # shorter session makes crash-restart tests ~6 s faster.
            "broker.heartbeat.interval.ms": "500",
            "broker.session.timeout.ms": "3000",
            "auto.create.topics.enable": "false",
            "num.partitions": "3",
            **self.extra_properties,
        }
        text = "".join(f"{k}={v}\n" for k, v in props.items())
        (self.workdir / "server.properties").write_text(text)

    def _java_cmd(self, java: str, libs: Path, *args: str, quick: bool = False) -> list[str]:
        """The JVM command line; ``quick``: C1 JIT only, ~0.5 s faster for short-lived
        tools (not for the broker itself, whose throughput benchmarks measure).

        The parallel collector, not the JVM's default G1: on the 2-core machines the
        broker shares with the pipeline, G1's concurrent work doubled the broker's CPU per
        event (pipeline bench, 2026-12-03, three runs each: 0.24-0.29 ms with G1 against
        0.11-0.13 with the parallel collector, 0.11-0.14 with the serial one)."""
        assert self.workdir is not None
        return [
            java, f"-Xmx{self.heap}", "-XX:+UseParallelGC", "-Djava.awt.headless=true",
            *(["-XX:TieredStopAtLevel=1"] if quick else []),
            f"-Dkafka.logs.dir={self.workdir}",
            f"-Dlog4j2.configurationFile={LOG4J_CONFIG}",
            "-cp", f"{libs}{os.sep}*", *args,
        ]  # fmt: skip

    def _format(self, java: str, libs: Path) -> None:
        assert self.workdir is not None
        props = str(self.workdir / "server.properties")
        cmd = self._java_cmd(java, libs, "kafka.tools.StorageTool", "format",
                             f"--cluster-id={self.cluster_id}", "-c", props, "--ignore-formatted",
                             quick=True)  # fmt: skip
        res = subprocess.run(cmd, capture_output=True, text=True, stdin=subprocess.DEVNULL)
        if res.returncode != 0:
            raise KafkaBrokerError(
                f"formatting the Kafka log dir failed (exit {res.returncode}): {' '.join(cmd)}\n"
                + tail(res.stdout + res.stderr, 40)
            )
        self._formatted = True

    def _launch(self, java: str, libs: Path) -> None:
        assert self.workdir is not None
        cmd = self._java_cmd(java, libs, "kafka.Kafka", str(self.workdir / "server.properties"))
        # -Dkafka.logs.dir names the workdir: the watchdog recognizes the JVM by it
        self._proc = ServerProcess("kafka", cmd, self.workdir / "stdout.log", self.workdir)
        try:
            self._wait_ready()
        except BaseException:
            self.kill()
            raise

    def _wait_ready(self) -> None:
        assert self._proc is not None and self.port is not None
        deadline = time.monotonic() + self.ready_timeout
        last_error: Exception | None = None
        while True:
            code = self._proc.proc.poll()
            if code is not None:
                raise KafkaBrokerError(
                    f"Kafka {self.version} broker exited with code {code} while starting "
                    f"(port {self.port}, controller port {self.controller_port})\n"
                    + self.log_tail()
                )
            try:
                cluster_id, brokers = metadata("127.0.0.1", self.port)
                if cluster_id != self.cluster_id:  # another process took our port
                    last_error = ValueError(f"port {self.port} answers for cluster {cluster_id}")
                elif (NODE_ID, "127.0.0.1", self.port) in brokers:
                    return
                else:
                    last_error = ValueError(f"broker not yet listed in Metadata: {brokers}")
            except (OSError, ValueError, struct.error) as e:
                last_error = e
            if time.monotonic() > deadline:
                raise KafkaBrokerError(
                    f"Kafka {self.version} broker not ready after {self.ready_timeout:.0f} s "
                    f"on {self.bootstrap_servers} (last probe: {last_error!r})\n" + self.log_tail()
                )
            time.sleep(0.2)


# --------------------------------------------------------------------------- CLI


def main(argv: list[str] | None = None) -> int:
    import argparse

    parser = argparse.ArgumentParser(
        prog="python -m tests.services.kafka_broker",
        description="Real single-node Kafka (KRaft) broker from Maven Central jars.",
    )
    sub = parser.add_subparsers(dest="command", required=True)
    sub.add_parser("fetch", help="download the broker jars into the cache (no output)")
    sub.add_parser("run", help="start a broker, print its bootstrap address, Ctrl-C stops")
    args = parser.parse_args(argv)
    try:
        if args.command == "fetch":
            ensure_jars()
            return 0
        # Ctrl-C (even if a parent shell ignored SIGINT) and `kill` both stop the broker.
        signal.signal(signal.SIGINT, signal.default_int_handler)
        signal.signal(signal.SIGTERM, signal.default_int_handler)
        with KafkaBroker() as broker:
            print(broker.bootstrap_servers, flush=True)
            print(f"(Kafka {broker.version}, files in {broker.workdir}; Ctrl-C stops)",
                  file=sys.stderr, flush=True)  # fmt: skip
            try:
                while broker.running:
                    time.sleep(0.5)
            except KeyboardInterrupt:
                return 0
            print("broker exited\n" + broker.log_tail(), file=sys.stderr)
            return 1
    except KafkaBrokerError as e:
        print(f"error: {e}", file=sys.stderr)
        return 1


if __name__ == "__main__":
    sys.exit(main())
