"""The Kafka A/B benchmark: kelp's Kafka gateway against Tansu.

Runs the same librdkafka load (`rdkafka-load`, the Rust program in
benches/kafka_ab/rdkafka-load: one producer, then one consumer assigned
every partition from the beginning, each record checked) against `kelp
serve --kafka` and against Tansu with memory storage, alternating kelp,
Tansu, kelp, Tansu, ... Each run starts its broker fresh, creates the
topic, produces `--records` records, reads every one of them back, then
stops the broker. Everything is on 127.0.0.1 and every step has a hard
deadline.

Prints MB/s (10^6 bytes of record values per second) and records/s for
produce and consume per run, the median per system and the kelp/Tansu
ratio of the medians; `--json FILE` writes the same figures.

Exits non-zero, saying why, when a broker cannot be started or stopped,
when a client fails or times out, or when a run loses, duplicates, reorders
or corrupts a record (every record is counted back and checked).

`benches/kafka_ab/run` installs Tansu, builds kelp and rdkafka-load and
starts this program; see benches/kafka_ab/README.md.
"""

import argparse
import datetime
import json
import os
import platform
import random
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]

SYSTEMS = ("kelp", "tansu")
MEGABYTE = 1e6
GIGABYTE = 1e9
MEBIBYTE = 1 << 20
CLOCK_TICKS_PER_S = os.sysconf("SC_CLK_TCK")

# How long a broker may take to listen, and to exit after SIGTERM.
BROKER_START_S_MAX = 60
BROKER_STOP_S_MAX = 60
# Topic creation (CreateTopics + Metadata) may take this long.
CREATE_TOPIC_S_MAX = 60
# A client gets its own deadline (--run-timeout-s); past it plus this
# grace its process is killed.
CLIENT_KILL_GRACE_S = 30
# Broker ports are picked below Linux's ephemeral range.
PORT_FIRST = 20_000
PORT_SPAN = 12_000
PORT_ATTEMPTS_MAX = 200
TOPIC = "kafka-ab"


class BenchError(Exception):
    """A failure that ends the benchmark with a message and exit status 1."""


# ------------------------------------------------------------- host facts


def loadavg():
    with open("/proc/loadavg") as f:
        return [float(x) for x in f.read().split()[:3]]


def uptime_line():
    out = subprocess.run(["uptime"], capture_output=True, text=True, check=False)
    return out.stdout.strip()


def cpu_ticks(pid):
    """User + system CPU ticks of every thread of `pid` so far."""
    with open(f"/proc/{pid}/stat") as f:
        stat = f.read()
    # Fields after the command name, which may hold spaces: state is
    # field 3, utime 14, stime 15.
    fields = stat[stat.rindex(")") + 2 :].split()
    return int(fields[11]) + int(fields[12])


def peak_rss_bytes(pid):
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) * 1024
    raise BenchError(f"no VmHWM in /proc/{pid}/status")


def free_ports(count):
    """`count` consecutive loopback ports free for TCP and UDP now."""
    rng = random.Random()
    for _ in range(PORT_ATTEMPTS_MAX):
        first = PORT_FIRST + rng.randrange(PORT_SPAN - count)
        held = []
        try:
            for port in range(first, first + count):
                for kind in (socket.SOCK_STREAM, socket.SOCK_DGRAM):
                    s = socket.socket(socket.AF_INET, kind)
                    held.append(s)
                    s.bind(("127.0.0.1", port))
            return first
        except OSError:
            continue
        finally:
            for s in held:
                s.close()
    raise BenchError(f"found no {count} free consecutive ports in {PORT_ATTEMPTS_MAX} attempts")


def listening(port):
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=0.5):
            return True
    except OSError:
        return False


# ---------------------------------------------------------------- brokers


class Broker:
    """One broker child process with its log file; stopped by SIGTERM."""

    def __init__(self, system, command, ports, log_path, data_dir=None):
        self.system = system
        self.ports = ports
        self.kafka_port = ports[-1]
        self.log_path = log_path
        self.data_dir = data_dir
        self.log = open(log_path, "wb")
        env = dict(os.environ)
        env.setdefault("RUST_LOG", "warn")
        self.proc = subprocess.Popen(
            command, stdin=subprocess.DEVNULL, stdout=self.log, stderr=subprocess.STDOUT, env=env
        )
        self.command = command

    @property
    def bootstrap(self):
        return f"127.0.0.1:{self.kafka_port}"

    def log_tail(self, lines=20):
        try:
            text = Path(self.log_path).read_text(errors="replace").splitlines()
        except OSError:
            return "(no log)"
        return "\n".join("    " + line for line in text[-lines:]) or "    (empty log)"

    def wait_listening(self):
        deadline = time.monotonic() + BROKER_START_S_MAX
        while True:
            status = self.proc.poll()
            if status is not None:
                raise BenchError(
                    f"{self.system} exited with status {status} while starting "
                    f"({' '.join(self.command)}); its log:\n{self.log_tail()}"
                )
            if all(listening(p) for p in self.ports):
                return
            if time.monotonic() > deadline:
                self.kill()
                raise BenchError(
                    f"{self.system} did not listen on {self.ports} within "
                    f"{BROKER_START_S_MAX} s; its log:\n{self.log_tail()}"
                )
            time.sleep(0.05)

    def cpu_ticks(self):
        return cpu_ticks(self.proc.pid)

    def peak_rss_bytes(self):
        return peak_rss_bytes(self.proc.pid)

    def stop(self):
        """SIGTERM, then wait; returns the exit status."""
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
        try:
            status = self.proc.wait(timeout=BROKER_STOP_S_MAX)
        except subprocess.TimeoutExpired:
            self.kill()
            raise BenchError(
                f"{self.system} did not exit within {BROKER_STOP_S_MAX} s of SIGTERM "
                f"(killed); its log:\n{self.log_tail()}"
            ) from None
        finally:
            self.log.close()
        return status

    def kill(self):
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()


def start_kelp(args, workdir):
    # Shard i listens on port + i (TCP and UDP); the gateway on the next.
    first = free_ports(args.kelp_shards + 1)
    shard_ports = list(range(first, first + args.kelp_shards))
    kafka_port = first + args.kelp_shards
    data_dir = Path(tempfile.mkdtemp(prefix="kelp-data-", dir=workdir))
    command = [
        str(args.kelp),
        "serve",
        "--shards",
        str(args.kelp_shards),
        "--listen",
        f"127.0.0.1:{shard_ports[0]}",
        "--data-dir",
        str(data_dir),
        "--kafka",
        f"127.0.0.1:{kafka_port}",
        *args.kelp_arg,
    ]
    return Broker("kelp", command, shard_ports + [kafka_port], workdir / "kelp.log", data_dir)


def start_tansu(args, workdir):
    port = free_ports(1)
    url = f"tcp://127.0.0.1:{port}"
    command = [
        str(args.tansu),
        "broker",
        "--listener-url",
        url,
        "--advertised-listener-url",
        url,
        "--storage-engine",
        "memory://tansu/",
    ]
    return Broker("tansu", command, [port], workdir / "tansu.log")


STARTERS = {"kelp": start_kelp, "tansu": start_tansu}


def check_stop_status(system, status, broker):
    # kelp flushes and exits 0 on SIGTERM; Tansu may also just die of it.
    allowed = {0} if system == "kelp" else {0, -signal.SIGTERM}
    if status not in allowed:
        raise BenchError(
            f"{system} exited with status {status} after SIGTERM; its log:\n{broker.log_tail()}"
        )


# ---------------------------------------------------------------- clients


def run_client(args, mode, bootstrap, extra, timeout_s, log_path, settings=()):
    """Runs one rdkafka-load mode; returns (summary, CPU seconds of the
    whole client process from wait4)."""
    argv = [
        str(args.load),
        "--bootstrap",
        bootstrap,
        "--topic",
        TOPIC,
        "--partitions",
        str(args.partitions),
        "--timeout-s",
        str(timeout_s),
        *(f"--set={s}" for s in settings),
        mode,
        *extra,
    ]
    with open(log_path, "ab") as stderr:
        proc = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=stderr)
        lines = []
        reader = threading.Thread(target=lambda: lines.extend(proc.stdout), daemon=True)
        reader.start()
        deadline = time.monotonic() + timeout_s + CLIENT_KILL_GRACE_S
        while True:
            pid, status, usage = os.wait4(proc.pid, os.WNOHANG)
            if pid:
                proc.returncode = os.waitstatus_to_exitcode(status)
                break
            if time.monotonic() > deadline:
                proc.kill()
                proc.wait()
                raise BenchError(
                    f"`rdkafka-load {mode}` outlived its {timeout_s} s deadline by "
                    f"{CLIENT_KILL_GRACE_S} s and was killed"
                )
            time.sleep(0.02)
        reader.join(timeout=10)
    summary = None
    for line in lines:
        try:
            summary = json.loads(line)
        except ValueError:
            continue
    if proc.returncode != 0 or summary is None or "error" in summary:
        raise BenchError(
            f"`rdkafka-load {mode}` failed (exit status {proc.returncode}): "
            f"{summary if summary is not None else 'no output'}; stderr in {log_path}"
        )
    return summary, usage.ru_utime + usage.ru_stime


# ------------------------------------------------------------------- runs


def phase_figures(args, seconds, broker_ticks, client_cpu_s):
    payload_bytes = args.records * args.value_bytes
    gb = payload_bytes / GIGABYTE
    return {
        "records": args.records,
        "seconds": seconds,
        "throughput_mb_s": payload_bytes / MEGABYTE / seconds,
        "records_per_s": args.records / seconds,
        "broker_cpu_s_per_gb": broker_ticks / CLOCK_TICKS_PER_S / gb,
        "client_cpu_s_per_gb": client_cpu_s / gb,
        # Cores busy on average over the timed interval (the client's whole
        # process, its start included): which side is saturated on this
        # 2-core host.
        "broker_cores": broker_ticks / CLOCK_TICKS_PER_S / seconds,
        "client_cores": client_cpu_s / seconds,
    }


def one_run(args, system, round_no, workdir):
    run_dir = workdir / f"{round_no}-{system}"
    run_dir.mkdir()
    client_log = run_dir / "clients.log"
    load_before = loadavg()
    broker = STARTERS[system](args, run_dir)
    try:
        broker.wait_listening()
        run_client(args, "create-topic", broker.bootstrap, [], CREATE_TOPIC_S_MAX, client_log)
        records = ["--records", str(args.records), "--value-bytes", str(args.value_bytes)]

        def phase(command, extra, client_set):
            """One client run: its summary, its CPU seconds, the broker's
            CPU ticks over it, and the load average as it began."""
            ticks = broker.cpu_ticks()
            load = loadavg()
            summary, cpu = run_client(
                args, command, broker.bootstrap, extra, args.run_timeout_s, client_log, client_set
            )
            return summary, cpu, broker.cpu_ticks() - ticks, load

        produced, produce_cpu, produce_ticks, load_produce = phase(
            "produce", [*records, "--acks", args.acks], args.producer_set
        )
        if produced["acked"] != args.records:
            raise BenchError(f"{system} round {round_no}: not every record was acknowledged: {produced}")
        # rdkafka-load checks every record (value, key, partition,
        # duplicates) and the partitions' end offsets, and fails otherwise.
        consumed, consume_cpu, consume_ticks, load_consume = phase("consume", records, args.consumer_set)
        if consumed["unique"] != args.records:
            raise BenchError(f"{system} round {round_no}: not every record was read back: {consumed}")
        rss = broker.peak_rss_bytes()
    except BaseException:
        broker.kill()
        raise
    status = broker.stop()
    check_stop_status(system, status, broker)
    if broker.data_dir is not None and not args.keep_data:
        shutil.rmtree(broker.data_dir)
    return {
        "system": system,
        "round": round_no,
        "loadavg_before": load_before,
        "loadavg_produce": load_produce,
        "loadavg_consume": load_consume,
        "loadavg_after": loadavg(),
        "produce": phase_figures(args, produced["seconds"], produce_ticks, produce_cpu),
        "consume": phase_figures(args, consumed["seconds"], consume_ticks, consume_cpu),
        "consume_total_seconds": consumed["total_seconds"],
        "librdkafka": produced["librdkafka"],
        "broker_peak_rss_mb": rss / MEBIBYTE,
    }


# ----------------------------------------------------------------- report


def print_run(run):
    p, c = run["produce"], run["consume"]
    print(
        f"round {run['round']} {run['system']:<5}  "
        f"produce {p['throughput_mb_s']:7.1f} MB/s {p['records_per_s']:9.0f} rec/s "
        f"(CPU s/GB broker {p['broker_cpu_s_per_gb']:.2f}, client {p['client_cpu_s_per_gb']:.2f}; "
        f"cores {p['broker_cores']:.2f}, {p['client_cores']:.2f})  "
        f"consume {c['throughput_mb_s']:7.1f} MB/s {c['records_per_s']:9.0f} rec/s "
        f"(CPU s/GB broker {c['broker_cpu_s_per_gb']:.2f}, client {c['client_cpu_s_per_gb']:.2f}; "
        f"cores {c['broker_cores']:.2f}, {c['client_cores']:.2f})  "
        f"peak RSS {run['broker_peak_rss_mb']:.0f} MiB  "
        f"load {run['loadavg_produce'][0]:.2f} / {run['loadavg_consume'][0]:.2f}",
        flush=True,
    )


def summarize(runs):
    """Median (min, max) per system and phase, and kelp/Tansu ratios: of
    throughput, and of broker CPU per GB (Tansu's over kelp's, so above 1
    means kelp spends less CPU per byte)."""
    out = {}
    for system in SYSTEMS:
        mine = [r for r in runs if r["system"] == system]
        if not mine:
            continue
        out[system] = {}
        for phase in ("produce", "consume"):
            figures = {}
            for key in (
                "throughput_mb_s",
                "records_per_s",
                "broker_cpu_s_per_gb",
                "client_cpu_s_per_gb",
                "broker_cores",
                "client_cores",
            ):
                values = [r[phase][key] for r in mine]
                figures[key] = {"median": statistics.median(values), "min": min(values), "max": max(values)}
            out[system][phase] = figures
        out[system]["broker_peak_rss_mb"] = max(r["broker_peak_rss_mb"] for r in mine)
    ratios = {}
    if "kelp" in out and "tansu" in out:
        for phase in ("produce", "consume"):
            kelp, tansu = out["kelp"][phase], out["tansu"][phase]
            ratios[phase] = kelp["throughput_mb_s"]["median"] / tansu["throughput_mb_s"]["median"]
            ratios[f"{phase}_broker_cpu_per_gb_tansu_over_kelp"] = (
                tansu["broker_cpu_s_per_gb"]["median"] / kelp["broker_cpu_s_per_gb"]["median"]
            )
    return out, ratios


def print_summary(medians, ratios):
    print()
    print("median (min-max) per system:")
    for system, figures in medians.items():
        for phase in ("produce", "consume"):
            f = figures[phase]
            mb, rec = f["throughput_mb_s"], f["records_per_s"]
            print(
                f"  {system:<5} {phase:<7} {mb['median']:7.1f} MB/s ({mb['min']:.1f}-{mb['max']:.1f})  "
                f"{rec['median']:9.0f} records/s  "
                f"CPU s/GB broker {f['broker_cpu_s_per_gb']['median']:.2f}, "
                f"client {f['client_cpu_s_per_gb']['median']:.2f}  "
                f"cores broker {f['broker_cores']['median']:.2f}, client {f['client_cores']['median']:.2f}"
            )
    for phase in ("produce", "consume"):
        if phase in ratios:
            print(
                f"  kelp/Tansu {phase:<7} {ratios[phase]:.2f} of Tansu's MB/s (target >= 2); "
                f"Tansu spends {ratios[phase + '_broker_cpu_per_gb_tansu_over_kelp']:.2f}x kelp's broker CPU per GB"
            )


def versions(args):
    def first_line(argv):
        out = subprocess.run(argv, capture_output=True, text=True, check=False)
        return (out.stdout.strip() or out.stderr.strip()).splitlines()[0] if (out.stdout or out.stderr) else ""

    # The checkout the kelp binary was built in (it may be another
    # worktree than this script's), "-dirty" when its tracked files differ.
    checkout = str(args.kelp.resolve().parent)
    commit = subprocess.run(
        ["git", "-C", checkout, "rev-parse", "--short", "HEAD"], capture_output=True, text=True, check=False
    )
    dirty = subprocess.run(
        ["git", "-C", checkout, "status", "--porcelain", "--untracked-files=no"],
        capture_output=True,
        text=True,
        check=False,
    )
    return {
        "kelp": first_line([str(args.kelp), "--version"]),
        "kelp_commit": commit.stdout.strip() + ("-dirty" if dirty.stdout.strip() else ""),
        "tansu": first_line([str(args.tansu), "--version"]),
        "rdkafka_load": first_line([str(args.load), "--version"]),
        "python": platform.python_version(),
    }


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--kelp", type=Path, required=True, help="the kelp binary")
    p.add_argument("--tansu", type=Path, required=True, help="the tansu binary")
    p.add_argument("--load", type=Path, required=True, help="the rdkafka-load binary")
    p.add_argument("--records", type=int, default=1_000_000)
    p.add_argument("--value-bytes", type=int, default=1000)
    p.add_argument("--partitions", type=int, default=4)
    p.add_argument(
        "--acks",
        default="all",
        choices=["all", "1"],
        help="all: idempotent, kelp answers once in the filer (fsync'd); 1: kelp answers once in the shard's buffer",
    )
    p.add_argument(
        "--rounds",
        type=int,
        default=2,
        help="runs per system, alternating (2 or more for an A/B/A/B; 1 is a quick check)",
    )
    p.add_argument(
        "--producer-set",
        action="append",
        default=[],
        metavar="NAME=VALUE",
        help="a librdkafka setting for the producer (repeatable; overrides rdkafka-load's)",
    )
    p.add_argument(
        "--consumer-set",
        action="append",
        default=[],
        metavar="NAME=VALUE",
        help="a librdkafka setting for the consumer (repeatable), e.g. fetch.queue.backoff.ms=10",
    )
    p.add_argument("--kelp-shards", type=int, default=2)
    p.add_argument(
        "--kelp-arg",
        action="append",
        default=[],
        metavar="ARG",
        help="one more argument for `kelp serve` (repeatable), e.g. --kelp-arg=--drop-flushed-pages",
    )
    p.add_argument("--run-timeout-s", type=int, default=300, help="deadline of each produce and consume")
    p.add_argument("--systems", default="kelp,tansu", help="which systems, in alternation order")
    p.add_argument("--json", type=Path, help="also write the figures here")
    p.add_argument("--keep-data", action="store_true", help="keep kelp's data directories")
    p.add_argument("--workdir", type=Path, help="logs and data here (default: a new temp dir)")
    args = p.parse_args()
    systems = [s for s in args.systems.split(",") if s]
    if not systems or any(s not in SYSTEMS for s in systems) or len(set(systems)) != len(systems):
        p.error(f"--systems takes distinct names from {SYSTEMS}")
    if args.rounds < 1 or args.records < 1:
        p.error("--rounds and --records must be positive")
    for name in ("kelp", "tansu", "load"):
        path = getattr(args, name)
        if (name == "load" or name in systems) and not (path.is_file() and os.access(path, os.X_OK)):
            p.error(f"--{name} {path} is not an executable file")

    workdir = args.workdir or Path(tempfile.mkdtemp(prefix="kafka-ab-"))
    workdir.mkdir(parents=True, exist_ok=True)
    started = datetime.datetime.now(datetime.timezone.utc)
    uptime_before = uptime_line()
    vers = versions(args)
    settings = {
        "records": args.records,
        "value_bytes": args.value_bytes,
        "partitions": args.partitions,
        "key": "k<seq % 64>, partition seq % partitions, no headers",
        "producer": {
            "client": "rdkafka-load (librdkafka), one producer",
            "settings": "linger.ms 5, batch.num.messages 10000, batch.size 1000000, "
            "queue.buffering.max.messages 200000, queue.buffering.max.kbytes 1048576",
            "acks": args.acks,
            "enable.idempotence": args.acks == "all",
            "extra": args.producer_set,
        },
        "consumer": {
            "client": "rdkafka-load (librdkafka), one consumer, every partition assigned from the beginning, no group",
            "settings": "librdkafka fetch defaults, but fetch.queue.backoff.ms 10",
            "extra": args.consumer_set,
        },
        "kelp_shards": args.kelp_shards,
        "kelp_args": args.kelp_arg,
        "tansu_storage": "memory://tansu/",
        "rounds": args.rounds,
    }
    print(f"Kafka A/B, {started:%Y-%m-%d %H:%M:%S} UTC: {', '.join(systems)} alternating, {args.rounds} round(s)")
    print(f"  versions  {vers}")
    print(f"  load      {args.records} records of {args.value_bytes} B, {args.partitions} partitions")
    print(f"  producer  {settings['producer']}")
    print(f"  consumer  {settings['consumer']}")
    print(f"  host      {uptime_before}")
    print(f"  logs      {workdir}", flush=True)

    runs = []
    for round_no in range(1, args.rounds + 1):
        for system in systems:
            run = one_run(args, system, round_no, workdir)
            runs.append(run)
            print_run(run)
    uptime_after = uptime_line()
    medians, ratios = summarize(runs)
    print_summary(medians, ratios)
    print(f"  host      {uptime_after}")
    if args.json:
        doc = {
            "benchmark": "kafka_ab",
            "started_utc": started.isoformat(timespec="seconds"),
            "uptime_before": uptime_before,
            "uptime_after": uptime_after,
            "versions": vers,
            "settings": settings,
            "runs": runs,
            "median": medians,
            "ratio_kelp_to_tansu": ratios,
        }
        args.json.write_text(json.dumps(doc, indent=2, sort_keys=True) + "\n")
        print(f"  json      {args.json}")


if __name__ == "__main__":
    try:
        main()
    except BenchError as err:
        print(f"kafka_ab: FAILED: {err}", file=sys.stderr)
        sys.exit(1)
    except KeyboardInterrupt:
        print("kafka_ab: interrupted", file=sys.stderr)
        sys.exit(130)
