"""The admin session capture_vectors.py runs for the Python clients: the
admin requests the interop program does not send. `--client confluent`
uses confluent-kafka's AdminClient (librdkafka), `--client kafka-python`
kafka-python's KafkaAdminClient. Each step must succeed; the program prints
one JSON line per step and exits non-zero on the first failure.

Steps, on a topic and group the earlier sessions made: Metadata for the
topic, DescribeConfigs of the topic, ListOffsets (earliest and latest) of
its partitions, ListGroups, DescribeGroups of the group, OffsetFetch of the
group, CreateTopics and DeleteTopics of `<topic>-doomed`, DescribeCluster,
ElectLeaders (preferred) of the topic's partitions, (kafka-python)
ListPartitionReassignments and AlterPartitionReassignments (partition 0
onto broker 0, partition 1 onto broker 1, partition 2's move cancelled),
(kafka-python) OffsetDelete of the group's offset of partition 0, then
DeleteGroups of the group (its members are gone by then).

kelp's tests (kelp/tests/kafka_admin.rs) run it against a gateway and check
each step's result; capture_vectors.py records its requests.
"""

import argparse
import json
import time


def plain(value):
    """`value` with every dict key a string, for JSON."""
    if isinstance(value, dict):
        return {str(k): plain(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [plain(v) for v in value]
    return value


def emit(step, result):
    print(json.dumps({"step": step, "result": plain(result)}, sort_keys=True, default=str), flush=True)


def confluent(args):
    from confluent_kafka import ConsumerGroupTopicPartitions, ElectionType, TopicPartition
    from confluent_kafka.admin import AdminClient, ConfigResource, NewTopic, OffsetSpec

    admin = AdminClient({"bootstrap.servers": args.bootstrap, "client.id": args.client_id})
    timeout = args.timeout_s

    meta = admin.list_topics(topic=args.topic, timeout=timeout)
    partitions = sorted(meta.topics[args.topic].partitions)
    emit("metadata", partitions)

    resource = ConfigResource(ConfigResource.Type.TOPIC, args.topic)
    configs = admin.describe_configs([resource], request_timeout=timeout)[resource].result(timeout)
    emit("describe-configs", sorted(configs))

    for name, spec in (("earliest", OffsetSpec.earliest()), ("latest", OffsetSpec.latest())):
        wanted = {TopicPartition(args.topic, p): spec for p in partitions}
        got = admin.list_offsets(wanted, request_timeout=timeout)
        emit(f"list-offsets {name}", {tp.partition: f.result(timeout).offset for tp, f in got.items()})

    groups = admin.list_consumer_groups(request_timeout=timeout).result(timeout)
    emit("list-groups", sorted(g.group_id for g in groups.valid))

    described = admin.describe_consumer_groups([args.group], request_timeout=timeout)
    emit("describe-groups", str(described[args.group].result(timeout).state))

    request = [ConsumerGroupTopicPartitions(args.group, [TopicPartition(args.topic, p) for p in partitions])]
    offsets = admin.list_consumer_group_offsets(request, request_timeout=timeout)[args.group].result(timeout)
    emit("offset-fetch", {tp.partition: tp.offset for tp in offsets.topic_partitions})

    doomed = f"{args.topic}-doomed"
    created = admin.create_topics([NewTopic(doomed, num_partitions=1, replication_factor=1)],
                                  request_timeout=timeout)
    created[doomed].result(timeout)
    emit("create-topics", doomed)
    deleted = admin.delete_topics([doomed], request_timeout=timeout)
    deleted[doomed].result(timeout)
    emit("delete-topics", doomed)

    cluster = admin.describe_cluster(request_timeout=timeout).result(timeout)
    emit("describe-cluster", {"id": cluster.cluster_id, "brokers": len(cluster.nodes)})
    # confluent-kafka 2.16's elect_leaders fails on any keyword argument
    # (a SystemError from its C argument parsing), so no request_timeout.
    elected = admin.elect_leaders(ElectionType.PREFERRED,
                                  [TopicPartition(args.topic, p) for p in partitions]).result(timeout)
    emit("elect-leaders", {tp.partition: e.name() if e else None for tp, e in elected.items()})
    gone = admin.delete_consumer_groups([args.group], request_timeout=timeout)
    gone[args.group].result(timeout)
    emit("delete-groups", args.group)


def kafka_python(args):
    from kafka import TopicPartition
    from kafka import errors as Errors
    from kafka.admin import ConfigResource, ConfigResourceType, KafkaAdminClient, NewTopic, OffsetSpec

    admin = KafkaAdminClient(bootstrap_servers=args.bootstrap, client_id=args.client_id,
                             request_timeout_ms=int(args.timeout_s * 1000))

    topics = admin.describe_topics([args.topic])
    partitions = sorted(p["partition_index"] for p in topics[0]["partitions"])
    emit("metadata", partitions)

    configs = admin.describe_configs([ConfigResource(ConfigResourceType.TOPIC, args.topic)],
                                     config_filter="all")
    emit("describe-configs", configs)

    for name, spec in (("earliest", OffsetSpec.EARLIEST), ("latest", OffsetSpec.LATEST)):
        got = admin.list_partition_offsets({TopicPartition(args.topic, p): spec for p in partitions})
        emit(f"list-offsets {name}", {tp.partition: o.offset for tp, o in got.items()})

    emit("list-groups", admin.list_groups())
    emit("describe-groups", admin.describe_groups([args.group]))
    emit("offset-fetch", admin.list_group_offsets({args.group: None}))

    doomed = f"{args.topic}-doomed"
    admin.create_topics([NewTopic(doomed, num_partitions=1, replication_factor=1)])
    emit("create-topics", doomed)
    admin.delete_topics([doomed])
    emit("delete-topics", doomed)
    emit("describe-cluster", admin.describe_cluster())
    elected = admin.elect_leaders(0, {args.topic: partitions})
    emit("elect-leaders", {p.partition_id: Errors.for_code(p.error_code).__name__
                           for t in elected.replica_election_results for p in t.partition_result})
    emit("list-reassignments", admin.list_partition_reassignments())
    altered = admin.alter_partition_reassignments({
        TopicPartition(args.topic, partitions[0]): [0],
        TopicPartition(args.topic, partitions[1]): [1],
        TopicPartition(args.topic, partitions[2]): None,
    })
    emit("alter-reassignments", {tp.partition: e.__name__ if e else None for tp, e in altered.items()})
    # One partition's: a group left with no offset at all is gone, and
    # DeleteGroups would find nothing.
    emit("offset-delete", admin.delete_group_offsets(
        args.group, [TopicPartition(args.topic, partitions[0])]))
    emit("delete-groups", admin.delete_groups([args.group]))
    admin.close()


def main():
    p = argparse.ArgumentParser(description=__doc__)
    p.add_argument("--client", required=True, choices=["confluent", "kafka-python"])
    p.add_argument("--bootstrap", required=True)
    p.add_argument("--topic", required=True)
    p.add_argument("--group", required=True)
    p.add_argument("--client-id", default="kelp-capture")
    p.add_argument("--timeout-s", type=float, default=60)
    args = p.parse_args()
    started = time.monotonic()
    {"confluent": confluent, "kafka-python": kafka_python}[args.client](args)
    emit("done", round(time.monotonic() - started, 3))


if __name__ == "__main__":
    main()
