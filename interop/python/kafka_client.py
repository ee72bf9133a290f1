"""One interop client program for two Python Kafka clients.

`--client confluent` drives confluent-kafka (librdkafka), `--client
kafka-python` drives kafka-python. The commands, the record scheme and the
JSON each prints are described in interop/README.md; kelp/tests/kafka_interop.rs
runs them against `kelp serve --kafka` and asserts on the JSON.

Every command is bounded: `--timeout-s` is a hard deadline, after which the
command prints what it has (with "timed_out": true) and exits non-zero.
"""

import argparse
import functools
import json
import os
import struct
import sys
import threading
import time
import zlib

SEQ_BYTES = 8
VALUE_BYTES_DEFAULT = 64
VALUE_BYTES_MAX = 1 << 20
HEADER_KEY = "kelp-key"


# ---------------------------------------------------------------- records


def record_key(seq, keys):
    return b"k%d" % (seq % keys)


@functools.lru_cache(maxsize=4)
def filler_pool(filler_bytes):
    """The byte pattern 0x00 0x01 .. 0xff 0x00 .., long enough that a
    filler of `filler_bytes` can start at any offset 0..255 of it."""
    return bytes(range(256)) * (filler_bytes // 256 + 2)


def record_value(seq, value_bytes=VALUE_BYTES_DEFAULT):
    start = seq % 256
    filler = value_bytes - SEQ_BYTES
    return struct.pack(">Q", seq) + filler_pool(filler)[start : start + filler]


def value_checksum(value):
    return zlib.crc32(value)


class Ledger:
    """What a consumer has read: each record checked against its sequence
    number, duplicates, per-key order and the sum of payload checksums."""

    def __init__(self, expect, keys, seen_file=None, value_bytes=VALUE_BYTES_DEFAULT):
        self.expect = expect
        self.keys = keys
        self.value_bytes = value_bytes
        self.seen = bytearray(expect) if expect else None
        self.consumed = 0
        self.unique = 0
        self.duplicates = 0
        self.corrupt = 0
        self.order_violations = 0
        self.checksum = 0
        self.last_seq_per_key = {}
        self.first_offset = {}
        self.next_offset = {}
        # When the first record arrived (time.monotonic()), for the read rate.
        self.first_record_at = None
        self.seen_out = open(seen_file, "ab") if seen_file else None

    def add(self, partition, offset, key, value, header_value):
        self.consumed += 1
        if partition not in self.first_offset:
            if self.first_record_at is None:
                self.first_record_at = time.monotonic()
            self.first_offset[partition] = offset
            emit({"event": "first", "partition": partition, "offset": offset})
        self.next_offset[partition] = offset + 1
        if value is None or len(value) != self.value_bytes:
            self.corrupt += 1
            return
        (seq,) = struct.unpack_from(">Q", value)
        if (
            value != record_value(seq, self.value_bytes)
            or key != record_key(seq, self.keys)
            or header_value != key
        ):
            self.corrupt += 1
            return
        if self.seen_out is not None:
            self.seen_out.write(struct.pack("<Q", seq))
        if self.seen is not None:
            if seq >= self.expect:
                self.corrupt += 1
                return
            if self.seen[seq]:
                self.duplicates += 1
                return
            self.seen[seq] = 1
        self.unique += 1
        self.checksum += value_checksum(value)
        last = self.last_seq_per_key.get(key, -1)
        if seq <= last:
            self.order_violations += 1
        self.last_seq_per_key[key] = seq

    def summary(self):
        out = {
            "consumed": self.consumed,
            "unique": self.unique,
            "duplicates": self.duplicates,
            "corrupt": self.corrupt,
            "order_violations": self.order_violations,
            "checksum": self.checksum,
            "first_offset": {str(p): o for p, o in sorted(self.first_offset.items())},
            "next_offset": {str(p): o for p, o in sorted(self.next_offset.items())},
        }
        if self.seen is not None:
            out["missing"] = self.expect - sum(self.seen)
        if self.seen_out is not None:
            self.seen_out.close()
        return out


def emit(obj):
    print(json.dumps(obj, sort_keys=True), flush=True)


def header_of(headers):
    for k, v in headers or ():
        if k == HEADER_KEY:
            return v
    return None


class StdinClosed:
    """Set once stdin reaches end of file: the test's signal to stop."""

    def __init__(self, watch):
        self.event = threading.Event()
        if watch:
            threading.Thread(target=self._watch, daemon=True).start()

    def _watch(self):
        # Raw reads: a daemon thread blocked in a buffered read holds its
        # lock and makes interpreter shutdown abort.
        while os.read(0, 65536):
            pass
        self.event.set()

    def is_set(self):
        return self.event.is_set()


# ------------------------------------------------------------ security


def confluent_security(args):
    """librdkafka's settings for `--sasl-mechanism` (none: plaintext)."""
    if not args.sasl_mechanism:
        return {}
    return {
        "security.protocol": "SASL_PLAINTEXT",
        "sasl.mechanism": args.sasl_mechanism,
        "sasl.username": args.user,
        "sasl.password": args.password,
    }


def kp_security(args):
    """kafka-python's settings for `--sasl-mechanism` (none: plaintext)."""
    if not args.sasl_mechanism:
        return {}
    return {
        "security_protocol": "SASL_PLAINTEXT",
        "sasl_mechanism": args.sasl_mechanism,
        "sasl_plain_username": args.user,
        "sasl_plain_password": args.password,
    }


# ------------------------------------------------------------ confluent


def confluent_create_topic(args):
    from confluent_kafka.admin import AdminClient, NewTopic
    from confluent_kafka import KafkaError

    admin = AdminClient({"bootstrap.servers": args.bootstrap, **confluent_security(args)})
    futures = admin.create_topics(
        [NewTopic(args.topic, num_partitions=args.partitions, replication_factor=1)],
        request_timeout=30,
    )
    for fut in futures.values():
        try:
            fut.result(timeout=60)
        except Exception as err:  # noqa: BLE001 -- an existing topic is fine
            kerr = err.args[0] if err.args else None
            if getattr(kerr, "code", lambda: None)() != KafkaError.TOPIC_ALREADY_EXISTS:
                raise
    meta = admin.list_topics(topic=args.topic, timeout=30)
    # Every topic too: librdkafka's Metadata request for all topics (v9+)
    # ends with bytes past the message, which a broker must ignore.
    everything = admin.list_topics(timeout=30)
    if args.topic not in everything.topics:
        raise RuntimeError(f"{args.topic} not among all topics: {sorted(everything.topics)}")
    return len(meta.topics[args.topic].partitions)


# The producer settings besides address, codec, acks and timeout
# (librdkafka defaults for the rest); the Kafka A/B benchmark prints them.
CONFLUENT_PRODUCER_TUNING = {
    "linger.ms": 5,
    "batch.num.messages": 10000,
    "queue.buffering.max.messages": 200000,
}


def producer_acks(acks):
    """`--acks all` (the default): an idempotent producer. `--acks 1`: the
    leader's ack, without idempotence (which needs acks=all)."""
    return {"acks": acks, "enable.idempotence": acks == "all"}


def confluent_produce(args, deadline, stop):
    from confluent_kafka import Producer

    producer = Producer(
        {
            "bootstrap.servers": args.bootstrap,
            **confluent_security(args),
            "client.id": args.client_id,
            "compression.type": args.codec,
            **producer_acks(args.acks),
            **CONFLUENT_PRODUCER_TUNING,
            "message.timeout.ms": int(max(1, deadline - time.monotonic()) * 1000),
        }
    )
    state = {"acked": 0, "failed": 0, "checksum": 0, "error": None}

    def on_delivery(err, msg):
        if err is None:
            state["acked"] += 1
            state["checksum"] += value_checksum(msg.value())
        else:
            state["failed"] += 1
            state["error"] = str(err)

    produced = 0
    for seq, key in paced_records(args, deadline, stop):
        while True:
            try:
                producer.produce(
                    args.topic,
                    value=record_value(seq, args.value_bytes),
                    key=key,
                    headers=[(HEADER_KEY, key)],
                    on_delivery=on_delivery,
                )
                break
            except BufferError:
                producer.poll(0.05)
        produced += 1
        producer.poll(0)
    left = producer.flush(max(0.0, deadline - time.monotonic()))
    return produced, state, left


def confluent_consumer(args):
    from confluent_kafka import Consumer

    return Consumer(
        {
            "bootstrap.servers": args.bootstrap,
            **confluent_security(args),
            "client.id": args.client_id,
            "group.id": args.group,
            "auto.offset.reset": "earliest",
            "enable.auto.commit": False,
            "session.timeout.ms": 10000,
            "heartbeat.interval.ms": 1000,
            "max.poll.interval.ms": 60000,
            **confluent_fetch_tuning(args),
        }
    )


def confluent_fetch_tuning(args):
    """`--fetch-queue-backoff-ms`: how long librdkafka waits before the
    next fetch once its local queue is over its thresholds (librdkafka's
    default, 1000 ms, when not given)."""
    if args.fetch_queue_backoff_ms is None:
        return {}
    return {"fetch.queue.backoff.ms": args.fetch_queue_backoff_ms}


def RETRIABLE_COMMIT_ERRORS(KafkaError):
    return (
        KafkaError._NO_OFFSET,
        KafkaError.REBALANCE_IN_PROGRESS,
        KafkaError.ILLEGAL_GENERATION,
        KafkaError.UNKNOWN_MEMBER_ID,
    )


class GroupReader:
    """A group member's reader: `poll` adds records to a ledger, `commit`
    commits what was read; closing commits once more and leaves the group."""

    def close(self):
        self.commit()
        self.consumer.close()


class ConfluentReader(GroupReader):
    def __init__(self, args, events):
        from confluent_kafka import KafkaException

        self.exc = KafkaException
        self.consumer = confluent_consumer(args)
        self.commit_failures = 0
        self.events = events
        self.consumer.subscribe(
            [args.topic], on_assign=self._on_assign, on_revoke=self._on_revoke
        )

    def _on_assign(self, consumer, partitions):
        self.events("assigned", sorted(p.partition for p in partitions))

    def _on_revoke(self, consumer, partitions):
        self.commit()
        self.events("revoked", sorted(p.partition for p in partitions))

    def poll(self, ledger):
        msgs = self.consumer.consume(num_messages=1000, timeout=0.2)
        for m in msgs:
            if m.error():
                raise self.exc(m.error())
            ledger.add(m.partition(), m.offset(), m.key(), m.value(), header_of(m.headers()))
        return len(msgs)

    def commit(self):
        from confluent_kafka import KafkaError

        try:
            self.consumer.commit(asynchronous=False)
        except self.exc as err:
            # Nothing consumed since the last commit, or a rebalance under
            # way (the partitions' next owner reads from the last commit
            # that made it: at least once), are not errors.
            code = err.args[0].code() if err.args else None
            if code not in RETRIABLE_COMMIT_ERRORS(KafkaError):
                raise
            if code != KafkaError._NO_OFFSET:
                self.commit_failures += 1


def confluent_committed(args):
    from confluent_kafka import TopicPartition

    consumer = confluent_consumer(args)
    parts = [TopicPartition(args.topic, p) for p in range(args.partitions)]
    got = consumer.committed(parts, timeout=30)
    consumer.close()
    return {str(tp.partition): tp.offset for tp in got if tp.offset >= 0}


# ---------------------------------------------------------- kafka-python


def kp_create_topic(args):
    from kafka.admin import KafkaAdminClient, NewTopic
    from kafka.errors import TopicAlreadyExistsError

    admin = KafkaAdminClient(
        bootstrap_servers=args.bootstrap, client_id=args.client_id, **kp_security(args)
    )
    try:
        admin.create_topics(
            [NewTopic(args.topic, num_partitions=args.partitions, replication_factor=1)],
            wait_for_metadata=True,
        )
    except TopicAlreadyExistsError:
        pass
    admin.close()
    from kafka import KafkaConsumer

    probe = KafkaConsumer(bootstrap_servers=args.bootstrap, **kp_security(args))
    parts = probe.partitions_for_topic(args.topic) or set()
    probe.close()
    return len(parts)


def kp_produce(args, deadline, stop):
    from kafka import KafkaProducer

    producer = KafkaProducer(
        bootstrap_servers=args.bootstrap,
        **kp_security(args),
        client_id=args.client_id,
        compression_type=None if args.codec == "none" else args.codec,
        acks="all" if args.acks == "all" else 1,
        enable_idempotence=args.acks == "all",
        linger_ms=5,
        batch_size=256 * 1024,
        max_block_ms=int(max(1, deadline - time.monotonic()) * 1000),
    )
    state = {"acked": 0, "failed": 0, "checksum": 0, "error": None}

    def ok(value):
        def cb(_meta):
            state["acked"] += 1
            state["checksum"] += value_checksum(value)

        return cb

    def bad(err):
        state["failed"] += 1
        state["error"] = repr(err)

    produced = 0
    for seq, key in paced_records(args, deadline, stop):
        value = record_value(seq, args.value_bytes)
        fut = producer.send(args.topic, value=value, key=key, headers=[(HEADER_KEY, key)])
        fut.add_callback(ok(value))
        fut.add_errback(bad)
        produced += 1
    producer.flush(timeout=max(0.0, deadline - time.monotonic()))
    producer.close(timeout=5)
    left = produced - state["acked"] - state["failed"]
    return produced, state, left


def kp_consumer(args, **extra):
    from kafka import KafkaConsumer

    return KafkaConsumer(
        bootstrap_servers=args.bootstrap,
        **kp_security(args),
        client_id=args.client_id,
        group_id=args.group,
        auto_offset_reset="earliest",
        enable_auto_commit=False,
        session_timeout_ms=10000,
        heartbeat_interval_ms=1000,
        max_poll_interval_ms=60000,
        **extra,
    )


class KafkaPythonReader(GroupReader):
    def __init__(self, args, events):
        from kafka import ConsumerRebalanceListener

        reader = self

        class Listener(ConsumerRebalanceListener):
            def on_partitions_revoked(self, revoked):
                # kafka-python 3 runs listeners on its I/O thread, where a
                # blocking commit is refused: offsets are committed every
                # 0.5 s and on close instead (at least once either way).
                events("revoked", sorted(tp.partition for tp in revoked))

            def on_partitions_assigned(self, assigned):
                events("assigned", sorted(tp.partition for tp in assigned))

        self.consumer = kp_consumer(args, max_poll_records=2000)
        self.commit_failures = 0
        self.consumer.subscribe([args.topic], listener=Listener())

    def poll(self, ledger):
        batches = self.consumer.poll(timeout_ms=200)
        n = 0
        for tp, msgs in batches.items():
            for m in msgs:
                ledger.add(tp.partition, m.offset, m.key, m.value, header_of(m.headers))
            n += len(msgs)
        return n

    def commit(self):
        from kafka.errors import CommitFailedError, RebalanceInProgressError

        try:
            self.consumer.commit()
        except (CommitFailedError, RebalanceInProgressError):
            # A rebalance under way: the partitions' next owner reads from
            # the last commit that made it (at least once).
            self.commit_failures += 1


def kp_committed(args):
    from kafka import TopicPartition

    consumer = kp_consumer(args)
    out = {}
    for p in range(args.partitions):
        off = consumer.committed(TopicPartition(args.topic, p))
        if off is not None and off >= 0:
            out[str(p)] = off
    consumer.close()
    return out


# -------------------------------------------------------------- commands


def paced_records(args, deadline, stop):
    """The (sequence, key) of each record to send, at `args.rate` records a
    second, until `args.count` are sent, `stop` is set or `deadline`
    passes."""
    pace = Pacer(args.rate)
    for sent, seq in enumerate(range(args.first_seq, args.first_seq + args.count)):
        if stop.is_set() or time.monotonic() > deadline:
            return
        pace.wait(sent)
        yield seq, record_key(seq, args.keys)


class Pacer:
    """Keeps a producer at `rate` records per second (0: as fast as it can)."""

    def __init__(self, rate):
        self.rate = rate
        self.start = time.monotonic()

    def wait(self, sent):
        if self.rate > 0:
            ahead = sent / self.rate - (time.monotonic() - self.start)
            if ahead > 0:
                time.sleep(ahead)


CLIENTS = {
    "confluent": (confluent_create_topic, confluent_produce, ConfluentReader, confluent_committed),
    "kafka-python": (kp_create_topic, kp_produce, KafkaPythonReader, kp_committed),
}


def cmd_create_topic(args, _deadline):
    create, _, _, _ = CLIENTS[args.client]
    return {"topic": args.topic, "partitions": create(args)}


def cmd_produce(args, deadline):
    _, produce, _, _ = CLIENTS[args.client]
    stop = StdinClosed(args.until_stdin_closes)
    started = time.monotonic()
    produced, state, left = produce(args, deadline, stop.event)
    return {
        "produced": produced,
        "acked": state["acked"],
        "failed": state["failed"],
        "unacked": left,
        "checksum": state["checksum"],
        "last_error": state["error"],
        "seconds": round(time.monotonic() - started, 3),
    }


def cmd_consume(args, deadline):
    """Reads until `--expect` distinct records arrived (then `--linger-s`
    more, to catch duplicates), or until stdin closes (`--until-stdin-closes`),
    or until nothing arrived for `--idle-exit-s` after the first record."""
    _, _, reader_class, _ = CLIENTS[args.client]
    stop = StdinClosed(args.until_stdin_closes)

    idle_since = {"t": None}

    def events(kind, partitions):
        # The idle clock (--idle-exit-s) starts at the first assignment.
        if kind == "assigned" and idle_since["t"] is None:
            idle_since["t"] = time.monotonic()
        emit({"event": kind, "partitions": partitions})

    ledger = Ledger(args.expect, args.keys, args.seen_file, args.value_bytes)
    reader = reader_class(args, events)
    started = time.monotonic()
    last_commit = started
    last_record = None
    done_at = None
    while time.monotonic() < deadline and not stop.is_set():
        now = time.monotonic()
        if reader.poll(ledger):
            last_record = time.monotonic()
        elif last_record is None:
            last_record = idle_since["t"]
        now = time.monotonic()
        if now - last_commit > 0.5:
            reader.commit()
            last_commit = now
        if args.expect and ledger.unique >= args.expect and done_at is None:
            done_at = now
        if done_at is not None and now - done_at >= args.linger_s:
            break
        if args.idle_exit_s and last_record and now - last_record >= args.idle_exit_s:
            break
    timed_out = time.monotonic() >= deadline
    reader.close()
    out = ledger.summary()
    out["commit_failures"] = reader.commit_failures
    if done_at is not None:
        # From the first record to the `--expect`-th distinct one: the read
        # rate, without the group join before it or the linger after it.
        out["read_seconds"] = round(done_at - ledger.first_record_at, 3)
    out.update({"event": "summary", "timed_out": timed_out, "seconds": round(time.monotonic() - started, 3)})
    return out


def cmd_committed(args, _deadline):
    _, _, _, committed = CLIENTS[args.client]
    return {"committed": committed(args)}


def main():
    p = argparse.ArgumentParser(description=__doc__)
    p.add_argument("command", choices=["create-topic", "produce", "consume", "committed"])
    p.add_argument("--client", required=True, choices=sorted(CLIENTS))
    p.add_argument("--bootstrap", required=True)
    p.add_argument("--topic", required=True)
    p.add_argument("--partitions", type=int, default=4)
    p.add_argument("--count", type=int, default=0, help="records to produce")
    p.add_argument("--first-seq", type=int, default=0)
    p.add_argument("--keys", type=int, default=64, help="distinct record keys")
    p.add_argument(
        "--value-bytes",
        type=int,
        default=VALUE_BYTES_DEFAULT,
        help=f"bytes per record value, {SEQ_BYTES} to {VALUE_BYTES_MAX}",
    )
    p.add_argument("--codec", default="none", choices=["none", "gzip", "snappy", "lz4", "zstd"])
    p.add_argument("--acks", default="all", choices=["all", "1"], help="produce acks (1: not idempotent)")
    p.add_argument("--rate", type=float, default=0, help="records/s, 0 = unpaced")
    p.add_argument("--group", default="kelp-interop")
    p.add_argument("--client-id", default="kelp-interop")
    p.add_argument("--expect", type=int, default=0, help="distinct records to read")
    p.add_argument("--linger-s", type=float, default=1.0)
    p.add_argument(
        "--fetch-queue-backoff-ms",
        type=int,
        help="confluent consumer: librdkafka's fetch.queue.backoff.ms (default: librdkafka's)",
    )
    p.add_argument("--idle-exit-s", type=float, default=0)
    p.add_argument("--seen-file", help="append each sequence number read (u64 LE)")
    p.add_argument("--until-stdin-closes", action="store_true")
    p.add_argument("--timeout-s", type=float, required=True)
    p.add_argument("--sasl-mechanism", choices=["PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512"],
                   help="authenticate with SASL (user and password from KELP_USER, KELP_PASSWORD)")
    args = p.parse_args()
    args.user = os.environ.get("KELP_USER", "")
    args.password = os.environ.get("KELP_PASSWORD", "")
    if not SEQ_BYTES <= args.value_bytes <= VALUE_BYTES_MAX:
        p.error(f"--value-bytes must be {SEQ_BYTES} to {VALUE_BYTES_MAX}")
    deadline = time.monotonic() + args.timeout_s
    command = {
        "create-topic": cmd_create_topic,
        "produce": cmd_produce,
        "consume": cmd_consume,
        "committed": cmd_committed,
    }[args.command]
    try:
        out = command(args, deadline)
    except Exception as err:  # noqa: BLE001 -- reported to the test as JSON
        emit({"client": args.client, "error": repr(err), "timed_out": False})
        raise
    timed_out = time.monotonic() >= deadline
    out.setdefault("timed_out", timed_out)
    out["client"] = args.client
    emit(out)
    sys.exit(1 if out["timed_out"] else 0)


if __name__ == "__main__":
    main()
