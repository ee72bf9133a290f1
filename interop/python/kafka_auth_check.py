"""Probes a Kafka port's authentication and authorization with real clients
(confluent-kafka / librdkafka and kafka-python), for kelp/tests/kafka_auth.rs.

Each command tries one thing and prints one JSON line saying what the
client saw; the test asserts on it. Every wait is bounded by --timeout-s.

  produce   produce --count records to --topic, acks=all; the delivery
            errors by name (and, with --stats, librdkafka's largest
            throttle time seen)
  metadata  ask for --topic's metadata; the error, or the partitions
  acls      describe every ACL binding (DescribeAcls); the error, or the
            bindings as [type, name, pattern, principal, host, operation,
            permission]
  raw       without SASL or TLS: ApiVersions, then Metadata v1, on one
            socket; what came back for each

With --tls-ca the clients speak TLS (SSL, or SASL_SSL with SASL).

User and password come from KELP_USER and KELP_PASSWORD.
"""

import argparse
import json
import logging
import os
import socket
import ssl
import struct
import sys
import time


def out(obj):
    print(json.dumps(obj, sort_keys=True), flush=True)


def security_protocol(args):
    return ("SASL_" if args.sasl_mechanism else "") + ("SSL" if args.tls_ca else "PLAINTEXT")


def pem_ca(path):
    """The CA file as PEM (a broker's own certificate is DER): the path of
    a PEM copy beside it, or the file itself when it is PEM."""
    with open(path, "rb") as f:
        data = f.read()
    if data.startswith(b"-----BEGIN"):
        return path
    pem = path + ".pem"
    with open(pem, "w") as f:
        f.write(ssl.DER_cert_to_PEM_cert(data))
    return pem


def confluent_config(args):
    config = {"bootstrap.servers": args.bootstrap, "client.id": "kelp-auth-check",
              "security.protocol": security_protocol(args)}
    if args.tls_ca:
        config["ssl.ca.location"] = pem_ca(args.tls_ca)
    if args.sasl_mechanism:
        config.update({
            "sasl.mechanism": args.sasl_mechanism,
            "sasl.username": os.environ.get("KELP_USER", ""),
            "sasl.password": os.environ.get("KELP_PASSWORD", ""),
        })
    return config


def kp_config(args):
    config = {"bootstrap_servers": args.bootstrap, "client_id": "kelp-auth-check",
              "security_protocol": security_protocol(args)}
    if args.tls_ca:
        config["ssl_cafile"] = pem_ca(args.tls_ca)
    if args.sasl_mechanism:
        config.update({
            "sasl_mechanism": args.sasl_mechanism,
            "sasl_plain_username": os.environ.get("KELP_USER", ""),
            "sasl_plain_password": os.environ.get("KELP_PASSWORD", ""),
        })
    return config


def confluent_produce(args):
    from confluent_kafka import Producer

    state = {"acked": 0, "errors": {}, "throttle_max_ms": 0, "client_errors": []}

    def on_delivery(err, _msg):
        if err is None:
            state["acked"] += 1
        else:
            name = err.name()
            state["errors"][name] = state["errors"].get(name, 0) + 1

    def on_error(err):
        state["client_errors"].append(err.name())

    def on_stats(text):
        stats = json.loads(text)
        for broker in stats.get("brokers", {}).values():
            state["throttle_max_ms"] = max(state["throttle_max_ms"], broker.get("throttle", {}).get("max", 0))

    config = confluent_config(args)
    config.update({
        "acks": "all",
        "message.timeout.ms": int(args.timeout_s * 1000),
        "error_cb": on_error,
        "linger.ms": 5,
    })
    if args.stats:
        config.update({"stats_cb": on_stats, "statistics.interval.ms": 100})
    producer = Producer(config)
    value = b"x" * args.value_bytes
    for i in range(args.count):
        while True:
            try:
                producer.produce(args.topic, value=value, key=str(i % 16).encode(), on_delivery=on_delivery)
                break
            except BufferError:
                producer.poll(0.05)
        producer.poll(0)
    left = producer.flush(args.timeout_s)
    if args.stats:
        # One more stats interval, so the last throttle window is reported.
        deadline = time.monotonic() + 1
        while time.monotonic() < deadline:
            producer.poll(0.1)
    state["left"] = left
    state["client_errors"] = sorted(set(state["client_errors"]))
    out(state)


def kp_produce(args):
    from kafka import KafkaProducer
    from kafka.errors import KafkaError

    state = {"acked": 0, "errors": {}, "client_errors": []}
    try:
        producer = KafkaProducer(acks="all", max_block_ms=int(args.timeout_s * 1000), **kp_config(args))
    except KafkaError as err:
        state["client_errors"].append(type(err).__name__)
        out(state)
        return
    futures = [producer.send(args.topic, value=b"x" * args.value_bytes, key=str(i % 16).encode())
               for i in range(args.count)]
    for fut in futures:
        try:
            fut.get(timeout=args.timeout_s)
            state["acked"] += 1
        except KafkaError as err:
            name = type(err).__name__
            state["errors"][name] = state["errors"].get(name, 0) + 1
    producer.close(timeout=5)
    out(state)


def confluent_metadata(args):
    from confluent_kafka.admin import AdminClient
    from confluent_kafka import KafkaException

    errors = []
    config = confluent_config(args)
    config["error_cb"] = lambda err: errors.append(err.name())
    admin = AdminClient(config)
    try:
        meta = admin.list_topics(topic=args.topic, timeout=args.timeout_s)
    except KafkaException as err:
        out({"error": err.args[0].name(), "client_errors": sorted(set(errors))})
        return
    topic = meta.topics[args.topic]
    out({
        "error": topic.error.name() if topic.error else None,
        "partitions": len(topic.partitions),
        "client_errors": sorted(set(errors)),
    })


class Said(logging.Handler):
    """Keeps what kafka-python logs about authentication: it retries a
    refused connection until its timeout and says why only in its log."""

    def __init__(self):
        super().__init__(logging.INFO)
        self.lines = []

    def emit(self, record):
        text = record.getMessage()
        if "uthenticat" in text:
            self.lines.append(text)


def kp_metadata(args):
    from kafka import KafkaConsumer
    from kafka.errors import KafkaError

    said = Said()
    logging.getLogger("kafka").addHandler(said)
    logging.getLogger("kafka").setLevel(logging.INFO)
    try:
        consumer = KafkaConsumer(request_timeout_ms=int(args.timeout_s * 1000) + 1000,
                                 **kp_config(args))
        parts = consumer.partitions_for_topic(args.topic)
        consumer.close()
    except KafkaError as err:
        out({"error": type(err).__name__, "log": said.lines[:3]})
        return
    out({"error": None, "partitions": len(parts or ()), "log": said.lines[:3]})


def confluent_acls(args):
    from confluent_kafka import KafkaException
    from confluent_kafka.admin import (AclBindingFilter, AclOperation, AclPermissionType, AdminClient,
                                       ResourcePatternType, ResourceType)

    admin = AdminClient(confluent_config(args))
    everything = AclBindingFilter(ResourceType.ANY, None, ResourcePatternType.ANY, None, None,
                                  AclOperation.ANY, AclPermissionType.ANY)
    try:
        found = admin.describe_acls(everything, request_timeout=args.timeout_s).result(args.timeout_s)
    except KafkaException as err:
        out({"error": err.args[0].name()})
        return
    out({"error": None, "acls": sorted(
        [b.restype.name, b.name, b.resource_pattern_type.name, b.principal, b.host, b.operation.name,
         b.permission_type.name] for b in found)})


def kp_acls(args):
    from kafka.admin import (ACLFilter, ACLOperation, ACLPermissionType, ACLResourcePatternType,
                             KafkaAdminClient, ResourcePatternFilter, ResourceType)
    from kafka.errors import KafkaError

    admin = KafkaAdminClient(request_timeout_ms=int(args.timeout_s * 1000), **kp_config(args))
    everything = ACLFilter(principal=None, host=None, operation=ACLOperation.ANY,
                           permission_type=ACLPermissionType.ANY,
                           resource_pattern=ResourcePatternFilter(ResourceType.ANY, None,
                                                                  ACLResourcePatternType.ANY))
    try:
        found, error = admin.describe_acls(everything)
    except KafkaError as err:
        out({"error": type(err).__name__})
        return
    finally:
        admin.close()
    out({"error": None, "acls": sorted(
        [a.resource_pattern.resource_type.name, a.resource_pattern.resource_name,
         a.resource_pattern.pattern_type.name, a.principal, a.host, a.operation.name,
         a.permission_type.name] for a in found)})


def frame(api_key, version, correlation_id, body):
    client_id = b"kelp-auth-check"
    header = struct.pack(">hhih", api_key, version, correlation_id, len(client_id)) + client_id
    data = header + body
    return struct.pack(">i", len(data)) + data


def read_frame(sock):
    prefix = b""
    while len(prefix) < 4:
        chunk = sock.recv(4 - len(prefix))
        if not chunk:
            return None
        prefix += chunk
    (size,) = struct.unpack(">i", prefix)
    data = b""
    while len(data) < size:
        chunk = sock.recv(size - len(data))
        if not chunk:
            return None
        data += chunk
    return data


def raw(args):
    host, port = args.bootstrap.rsplit(":", 1)
    sock = socket.create_connection((host, int(port)), timeout=args.timeout_s)
    result = {}
    # ApiVersions v0: an empty body.
    sock.sendall(frame(18, 0, 1, b""))
    try:
        answer = read_frame(sock)
    except (ConnectionResetError, socket.timeout):
        answer = None
    result["api_versions_error"] = None if answer is None else struct.unpack_from(">h", answer, 4)[0]
    if answer is None:
        result["metadata"] = "not sent"
        out(result)
        return
    # Metadata v1 for topic "orders": an array of one string.
    sock.sendall(frame(3, 1, 2, struct.pack(">ih", 1, 6) + b"orders"))
    try:
        answer = read_frame(sock)
        result["metadata"] = "closed" if answer is None else "answered"
    except (ConnectionResetError, socket.timeout) as err:
        result["metadata"] = "closed" if isinstance(err, ConnectionResetError) else "timed out"
    out(result)


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("command", choices=["produce", "metadata", "acls", "raw"])
    p.add_argument("--client", choices=["confluent", "kafka-python"], default="confluent")
    p.add_argument("--bootstrap", required=True)
    p.add_argument("--topic", default="orders")
    p.add_argument("--count", type=int, default=1)
    p.add_argument("--value-bytes", type=int, default=100)
    p.add_argument("--stats", action="store_true", help="report librdkafka's throttle times")
    p.add_argument("--sasl-mechanism", choices=["PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512"])
    p.add_argument("--tls-ca", help="speak TLS, trusting this CA (DER or PEM)")
    p.add_argument("--timeout-s", type=float, required=True)
    args = p.parse_args()
    if args.command == "raw":
        raw(args)
    elif args.command == "acls":
        (confluent_acls if args.client == "confluent" else kp_acls)(args)
    elif args.command == "produce":
        (confluent_produce if args.client == "confluent" else kp_produce)(args)
    else:
        (confluent_metadata if args.client == "confluent" else kp_metadata)(args)
    return 0


if __name__ == "__main__":
    sys.exit(main())
