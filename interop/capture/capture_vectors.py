"""Captures golden test vectors for kelp's Kafka codec from real clients.

For each client (confluent-kafka / librdkafka, kafka-python, kafkajs) this
starts a fresh `kelp serve --kafka` on loopback, puts a recording TCP proxy
in front of its Kafka gateway, and runs the client's sessions through the
proxy: create a topic, produce (idempotent with compression, then acks=1
without), consume with a group (join, sync, heartbeat, offset fetch and
commit, leave), read the committed offsets, and an admin session
(admin_session.py / admin_session.js: metadata, describe configs, list
offsets, list and describe groups, create and delete a topic, describe the
cluster, elect leaders, list and alter partition reassignments, delete the
group). Last, a SASL session against a second `kelp serve --kafka --auth`
(one admin user): the client authenticates (confluent-kafka with
SCRAM-SHA-256, kafka-python with SCRAM-SHA-512, kafkajs with PLAIN) and
creates the topic; the Python clients then describe the ACLs
(interop/python/kafka_auth_check.py).

The proxy records every request frame a client sends and every response
frame the gateway returns. Of those it keeps one exchange per (client, API,
version), the first in capture order whose request mentions "golden" (the
topic and group names), else the first; the request and its response are
written to `OUT/<client>/<api>-v<version>.request.bin` and
`.response.bin`, each the frame without its 4-byte size prefix. A
`manifest.txt` per client says which client version, which sessions, and
every (API, version) the client sent, kept or not.

Clients learn broker addresses from Metadata and FindCoordinator
responses, where the gateway names its own port. The proxy rewrites that
port (the 4 bytes after the host "127.0.0.1") to its own before the client
reads the response, so the client keeps talking through it; the stored
response is the gateway's, unrewritten. Nothing else is changed.

Usage (from the repository root, after `cargo build --release -p kelp` and
`bash scripts/setup.sh`):

    interop/.venv/bin/python interop/capture/capture_vectors.py \\
        --kelp target/release/kelp --out kafka/tests/vectors
"""

import argparse
import asyncio
import datetime
import os
import shutil
import socket
import struct
import subprocess
import sys
import tempfile
import threading
import time

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
PYTHON_CLIENT = os.path.join(REPO, "interop", "python", "kafka_client.py")
NODE_CLIENT = os.path.join(REPO, "interop", "node", "kafka_client.js")
PYTHON_ADMIN = os.path.join(REPO, "interop", "capture", "admin_session.py")
NODE_ADMIN = os.path.join(REPO, "interop", "capture", "admin_session.js")
PYTHON_AUTH_CHECK = os.path.join(REPO, "interop", "python", "kafka_auth_check.py")

HOST = "127.0.0.1"
TOPIC = "golden"
PARTITIONS = 3
GROUP = "golden-group"
CLIENT_ID = "kelp-capture"
# A few records keep the vectors small. Their values are the interop
# programs' default 64 bytes (kafkajs' program has no other size), which
# compress: kafka-python sends a batch uncompressed when compression would
# not make it smaller.
RECORDS = 6
KEYS = 3
SESSION_TIMEOUT_S = 60
FRAME_BYTES_MAX = 1 << 20

# The API names used in the file names, by api key.
API_NAMES = {
    0: "produce",
    1: "fetch",
    2: "list-offsets",
    3: "metadata",
    8: "offset-commit",
    9: "offset-fetch",
    10: "find-coordinator",
    11: "join-group",
    12: "heartbeat",
    13: "leave-group",
    14: "sync-group",
    15: "describe-groups",
    16: "list-groups",
    17: "sasl-handshake",
    18: "api-versions",
    19: "create-topics",
    20: "delete-topics",
    22: "init-producer-id",
    29: "describe-acls",
    32: "describe-configs",
    36: "sasl-authenticate",
    42: "delete-groups",
    43: "elect-leaders",
    45: "alter-partition-reassignments",
    46: "list-partition-reassignments",
    47: "offset-delete",
    60: "describe-cluster",
}
METADATA, FIND_COORDINATOR = 3, 10

# The SASL session's user (an admin in its broker's auth file) and, per
# client, the mechanism it authenticates with.
SASL_USER, SASL_PASSWORD = "golden-user", "golden-password"
SASL_MECHANISMS = {"confluent": "SCRAM-SHA-256", "kafka-python": "SCRAM-SHA-512", "kafkajs": "PLAIN"}

# Per client: the codec of its idempotent producer (the produce vector kept
# is from that session, so the test decompresses a real client's batch),
# and the versions of the packages to put in the manifest.
CLIENTS = {
    "confluent": {"codec": "zstd"},
    "kafka-python": {"codec": "lz4"},
    "kafkajs": {"codec": "gzip"},
}


class Frame:
    def __init__(self, conn, seq, direction, data, api_key, version, correlation_id):
        self.conn = conn
        self.seq = seq
        self.direction = direction
        self.data = data
        self.api_key = api_key
        self.version = version
        self.correlation_id = correlation_id


class RecordingProxy:
    """Listens on HOST:port, forwards each connection to the gateway, and
    records each frame in both directions (see the module doc)."""

    def __init__(self, gateway_port):
        self.gateway_port = gateway_port
        self.frames = []
        self.session = None
        self.open_connections = 0
        self.errors = []
        self._next_conn = 0
        self._next_seq = 0
        self.port = None
        self._loop = asyncio.new_event_loop()
        self._ready = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()
        self._ready.wait()

    def _run(self):
        asyncio.set_event_loop(self._loop)
        server = self._loop.run_until_complete(
            asyncio.start_server(self._handle, HOST, 0)
        )
        self.port = server.sockets[0].getsockname()[1]
        self._ready.set()
        self._loop.run_forever()

    def _record(self, conn, direction, data, api_key, version, correlation_id):
        self.frames.append(
            Frame(conn, self._next_seq, direction, data, api_key, version, correlation_id)
        )
        self._next_seq += 1

    def _rewrite_port(self, data):
        host = HOST.encode()
        ours = host + struct.pack(">i", self.gateway_port)
        return data.replace(ours, host + struct.pack(">i", self.port))

    async def _handle(self, client_r, client_w):
        conn = (self.session, self._next_conn)
        self._next_conn += 1
        self.open_connections += 1
        pending = {}
        try:
            gateway_r, gateway_w = await asyncio.open_connection(HOST, self.gateway_port)
        except OSError as err:
            self.errors.append(f"{conn}: connect to the gateway: {err}")
            client_w.close()
            self.open_connections -= 1
            return

        async def requests():
            while True:
                data = await read_frame(client_r)
                if data is None:
                    break
                api_key, version, correlation_id = struct.unpack_from(">hhi", data)
                pending[correlation_id] = (api_key, version)
                self._record(conn, "request", data, api_key, version, correlation_id)
                gateway_w.write(struct.pack(">i", len(data)) + data)
                await gateway_w.drain()
            gateway_w.write_eof()

        async def responses():
            while True:
                data = await read_frame(gateway_r)
                if data is None:
                    break
                (correlation_id,) = struct.unpack_from(">i", data)
                api_key, version = pending.pop(correlation_id, (None, None))
                if api_key is None:
                    self.errors.append(f"{conn}: response to unknown correlation id {correlation_id}")
                self._record(conn, "response", data, api_key, version, correlation_id)
                out = data
                if api_key in (METADATA, FIND_COORDINATOR):
                    out = self._rewrite_port(data)
                client_w.write(struct.pack(">i", len(out)) + out)
                await client_w.drain()
            client_w.close()

        try:
            await asyncio.gather(requests(), responses())
        except (OSError, asyncio.IncompleteReadError, ValueError) as err:
            # A client that closes abruptly ends its connection here; what it
            # sent before is recorded.
            if not isinstance(err, (ConnectionResetError, BrokenPipeError)):
                self.errors.append(f"{conn}: {err!r}")
        finally:
            gateway_w.close()
            client_w.close()
            self.open_connections -= 1

    def wait_idle(self, timeout_s):
        deadline = time.monotonic() + timeout_s
        while self.open_connections and time.monotonic() < deadline:
            time.sleep(0.05)
        if self.open_connections:
            raise SystemExit(f"connections still open through the proxy after {timeout_s} s")

    def stop(self):
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(5)


async def read_frame(reader):
    try:
        prefix = await reader.readexactly(4)
    except asyncio.IncompleteReadError as err:
        if err.partial:
            raise
        return None
    (size,) = struct.unpack(">i", prefix)
    if not 0 <= size <= FRAME_BYTES_MAX:
        raise ValueError(f"frame size {size}")
    return await reader.readexactly(size)


def free_port():
    with socket.socket() as s:
        s.bind((HOST, 0))
        return s.getsockname()[1]


class Kelp:
    """`kelp serve --kafka` on free loopback ports, with a fresh data dir."""

    def __init__(self, binary, log_path, extra=()):
        self.data_dir = tempfile.mkdtemp(prefix="kelp-capture-")
        self.port = free_port()
        self.kafka_port = free_port()
        self.log = open(log_path, "wb")
        self.process = subprocess.Popen(
            [
                binary, "serve", "--shards", "1", "--unpinned",
                "--data-dir", self.data_dir,
                "--listen", f"{HOST}:{self.port}",
                "--kafka", f"{HOST}:{self.kafka_port}",
                *extra,
            ],
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=self.log,
        )
        deadline = time.monotonic() + 60
        while True:
            if self.process.poll() is not None:
                raise SystemExit(f"kelp serve exited with {self.process.returncode}; see {log_path}")
            try:
                socket.create_connection((HOST, self.kafka_port), timeout=1).close()
                break
            except OSError:
                if time.monotonic() > deadline:
                    raise SystemExit(f"the Kafka gateway did not listen; see {log_path}")
                time.sleep(0.1)
        # Answered; it was ours only if ours still runs (a failed bind exits).
        time.sleep(0.2)
        if self.process.poll() is not None:
            raise SystemExit(f"kelp serve exited with {self.process.returncode}; see {log_path}")

    def stop(self):
        self.process.terminate()
        try:
            self.process.wait(10)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()
        self.log.close()
        shutil.rmtree(self.data_dir, ignore_errors=True)


def sessions(client, bootstrap, python, node):
    """The commands run for `client`, each (name, argv)."""
    codec = CLIENTS[client]["codec"]
    common = ["--bootstrap", bootstrap, "--topic", TOPIC, "--timeout-s", str(SESSION_TIMEOUT_S),
              "--partitions", str(PARTITIONS), "--client-id", CLIENT_ID]
    records = ["--count", str(RECORDS), "--keys", str(KEYS)]
    if client == "kafkajs":
        run = [node, NODE_CLIENT]
        admin = [node, NODE_ADMIN]
    else:
        run = [python, PYTHON_CLIENT]
        admin = [python, PYTHON_ADMIN, "--client", client]
        common = ["--client", client] + common
    out = [
        ("create-topic", run + ["create-topic"] + common),
        (f"produce idempotent {codec}", run + ["produce", "--codec", codec] + records + common),
    ]
    if client != "kafkajs":
        # kafka_client.js always produces idempotently.
        out.append(("produce acks=1 none", run + ["produce", "--acks", "1", "--first-seq", str(RECORDS)]
                    + records + common))
    expect = RECORDS if client == "kafkajs" else 2 * RECORDS
    consume = ["consume", "--group", GROUP, "--expect", str(expect), "--keys", str(KEYS),
               "--linger-s", "2.5"]
    out.append(("consume", run + consume + common))
    out.append(("committed", run + ["committed", "--group", GROUP] + common))
    admin_args = ["--bootstrap", bootstrap, "--topic", TOPIC, "--group", GROUP,
                  "--client-id", CLIENT_ID, "--timeout-s", str(SESSION_TIMEOUT_S)]
    out.append(("admin", admin + admin_args))
    return out


def client_version(client, python, node):
    if client == "kafkajs":
        code = "console.log('kafkajs ' + require('kafkajs/package.json').version)"
        return subprocess.check_output([node, "-e", code], text=True, env=node_env()).strip()
    if client == "confluent":
        code = ("import confluent_kafka as c, importlib.metadata as m; "
                "print('confluent-kafka', m.version('confluent-kafka'), 'librdkafka', c.libversion()[0])")
    else:
        code = "import kafka; print('kafka-python', kafka.__version__)"
    return subprocess.check_output([python, "-c", code], text=True).strip()


def node_env():
    env = dict(os.environ)
    modules = os.path.join(REPO, "interop", "node", "node_modules")
    env["NODE_PATH"] = modules + os.pathsep + env.get("NODE_PATH", "")
    return env


def sasl_sessions(client, bootstrap, python, node):
    """The sessions run against a broker with an auth file, each after
    authenticating with the client's SASL mechanism: create the topic, and
    (Python clients) describe the ACLs."""
    common = ["--bootstrap", bootstrap, "--topic", TOPIC, "--timeout-s", str(SESSION_TIMEOUT_S),
              "--partitions", str(PARTITIONS), "--client-id", CLIENT_ID,
              "--sasl-mechanism", SASL_MECHANISMS[client]]
    if client == "kafkajs":
        run = [node, NODE_CLIENT]
    else:
        run = [python, PYTHON_CLIENT]
        common = ["--client", client] + common
    out = [(f"sasl {SASL_MECHANISMS[client]} create-topic", run + ["create-topic"] + common)]
    if client != "kafkajs":
        out.append((f"sasl {SASL_MECHANISMS[client]} describe-acls",
                    [python, PYTHON_AUTH_CHECK, "acls", "--client", client, "--bootstrap", bootstrap,
                     "--sasl-mechanism", SASL_MECHANISMS[client], "--timeout-s", str(SESSION_TIMEOUT_S)]))
    return out


def run_session(name, argv, log, env=None):
    log.write(f"$ {' '.join(argv)}\n".encode())
    log.flush()
    started = time.monotonic()
    done = subprocess.run(argv, stdin=subprocess.DEVNULL, stdout=log, stderr=log,
                          env={**node_env(), **(env or {})}, timeout=SESSION_TIMEOUT_S + 30)
    if done.returncode != 0:
        raise SystemExit(f"session {name!r} exited with {done.returncode}; see {log.name}")
    return time.monotonic() - started


def select(frames):
    """One exchange per (API, version): the first request mentioning TOPIC
    (which the group name contains too, and the client id does not), else
    the first; with its response."""
    chosen = {}
    for f in frames:
        if f.direction != "request" or f.api_key not in API_NAMES:
            continue
        key = (f.api_key, f.version)
        have = chosen.get(key)
        if have is None or (TOPIC.encode() not in have.data and TOPIC.encode() in f.data):
            chosen[key] = f
    out = {}
    for key, request in chosen.items():
        response = next(
            (f for f in frames if f.direction == "response" and f.conn == request.conn
             and f.correlation_id == request.correlation_id and f.seq > request.seq),
            None,
        )
        out[key] = (request, response)
    return out


def record(args, kelp_log, kelp_args, session_list, log_path, env, first_seq, ran):
    """Start a kelp with `kelp_args`, run `session_list(bootstrap)` through a
    recording proxy in front of its gateway, stop both; the frames recorded,
    numbered from `first_seq`. Each session's (name, seconds) goes to `ran`."""
    kelp = Kelp(args.kelp, kelp_log, kelp_args)
    proxy = RecordingProxy(kelp.kafka_port)
    proxy._next_seq = first_seq
    try:
        with open(log_path, "wb") as log:
            for name, argv in session_list(f"{HOST}:{proxy.port}"):
                proxy.session = name
                seconds = run_session(name, argv, log, env)
                proxy.wait_idle(30)
                ran.append((name, seconds))
    finally:
        proxy.stop()
        kelp.stop()
    if proxy.errors:
        raise SystemExit(f"{kelp_log}: proxy errors: {proxy.errors}")
    return proxy.frames


def capture_client(client, args, out_dir, work_dir):
    ran = []
    frames = record(args, os.path.join(work_dir, f"{client}-kelp.log"), [],
                    lambda bootstrap: sessions(client, bootstrap, args.python, args.node),
                    os.path.join(work_dir, f"{client}-sessions.log"), None, 0, ran)
    # Then the SASL sessions, against a broker that requires it; their
    # frames come after the others, so they add only what those did not send.
    auth_file = os.path.join(work_dir, f"{client}-auth.toml")
    write(auth_file, (f'[[user]]\nname = "{SASL_USER}"\npassword = "{SASL_PASSWORD}"\n'
                      'role = "admin"\n').encode())
    frames = frames + record(
        args, os.path.join(work_dir, f"{client}-kelp-sasl.log"), ["--auth", auth_file],
        lambda bootstrap: sasl_sessions(client, bootstrap, args.python, args.node),
        os.path.join(work_dir, f"{client}-sasl-session.log"),
        {"KELP_USER": SASL_USER, "KELP_PASSWORD": SASL_PASSWORD}, len(frames), ran)
    if args.all_frames:
        write_all(frames, os.path.join(args.all_frames, client))
    chosen = select(frames)
    client_dir = os.path.join(out_dir, client)
    shutil.rmtree(client_dir, ignore_errors=True)
    os.makedirs(client_dir)
    kept = []
    for (api_key, version), (request, response) in sorted(chosen.items()):
        base = f"{API_NAMES[api_key]}-v{version}"
        write(os.path.join(client_dir, f"{base}.request.bin"), request.data)
        line = f"{base}: request from session {request.conn[0]!r}, correlation id {request.correlation_id}"
        if response is not None:
            write(os.path.join(client_dir, f"{base}.response.bin"), response.data)
        else:
            line += " (no response: the connection closed first)"
        kept.append(line)
    write_manifest(client, args, client_dir, ran, frames, kept)


def write_all(frames, directory):
    """Every frame recorded, `<seq>-<api>-v<version>.<direction>.bin`, for
    checking the codec against more than the exchanges kept."""
    shutil.rmtree(directory, ignore_errors=True)
    os.makedirs(directory)
    for f in frames:
        api = API_NAMES.get(f.api_key, f"key{f.api_key}")
        write(os.path.join(directory, f"{f.seq:05}-{api}-v{f.version}.{f.direction}.bin"), f.data)


def write(path, data):
    with open(path, "wb") as f:
        f.write(data)


def write_manifest(client, args, client_dir, ran, frames, kept):
    seen = {}
    for f in frames:
        if f.direction == "request":
            seen.setdefault((f.api_key, f.version), set()).add(f.conn[0])
    lines = [
        f"client: {client_version(client, args.python, args.node)}",
        f"captured: {datetime.date.today().isoformat()}, by interop/capture/capture_vectors.py",
        f"kelp: {git_describe()}",
        "",
        "sessions, in order (interop/python/kafka_client.py, interop/node/kafka_client.js,",
        "interop/capture/admin_session.*; topic golden, 3 partitions, group golden-group,",
        "client id kelp-capture):",
    ]
    lines += [f"  {name} ({seconds:.1f} s)" for name, seconds in ran]
    lines += ["", "requests sent, by api key and version (sessions that sent them):"]
    for (api_key, version), names in sorted(seen.items()):
        api = API_NAMES.get(api_key, "not supported by kelp")
        lines.append(f"  {api_key:>2} v{version} {api}: {', '.join(sorted(names))}")
    lines += ["", "kept (one exchange per api and version):"]
    lines += [f"  {line}" for line in kept]
    lines += [
        "",
        "Metadata and FindCoordinator responses are stored as the gateway sent",
        "them; the client read them with the port after host 127.0.0.1 replaced",
        "by the proxy's.",
        "",
    ]
    write(os.path.join(client_dir, "manifest.txt"), "\n".join(lines).encode())


def git_describe():
    try:
        return subprocess.check_output(
            ["git", "-C", REPO, "describe", "--always", "--dirty"], text=True
        ).strip()
    except (OSError, subprocess.CalledProcessError):
        return "unknown"


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--kelp", required=True, help="the kelp binary (target/release/kelp)")
    p.add_argument("--out", default=os.path.join(REPO, "kafka", "tests", "vectors"))
    p.add_argument("--client", action="append", choices=sorted(CLIENTS),
                   help="capture only these clients (default: all)")
    p.add_argument("--python", default=sys.executable,
                   help="the Python with confluent-kafka and kafka-python (default: this one)")
    p.add_argument("--node", default="node")
    p.add_argument("--work-dir", help="where the kelp and session logs go (default: a temp dir)")
    p.add_argument("--all-frames", metavar="DIR",
                   help="also write every frame recorded to DIR/<client>/ (not only those kept)")
    args = p.parse_args()
    args.kelp = os.path.abspath(args.kelp)
    work_dir = args.work_dir or tempfile.mkdtemp(prefix="kelp-capture-logs-")
    os.makedirs(work_dir, exist_ok=True)
    for client in args.client or sorted(CLIENTS):
        print(f"capturing {client} (logs in {work_dir})", flush=True)
        capture_client(client, args, args.out, work_dir)
    print(f"vectors written to {args.out}")


if __name__ == "__main__":
    main()
