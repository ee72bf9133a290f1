//! What a broker's admin listener serves: its metrics page, built at each
//! scrape from every shard's [`ShardMetrics`] and its segments' figures,
//! and its readiness.

use std::sync::atomic::{AtomicU8, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::admin_http::AdminPages;
use crate::control_plane::ShardCommand;
use crate::metrics_page::{render, Family, Labels, Value};
use crate::shard::SegmentLoadFigures;
use crate::shard_metrics::{
    ack_label, Connections, Latency, Refusal, ShardMetrics, Transport, ACK_MODES,
};

/// How long a scrape waits for the shards' segment figures, all shards
/// together; a shard that does not answer in time is left out of the
/// segment families (its own counters are still read).
const SEGMENT_FIGURES_WAIT: Duration = Duration::from_secs(2);

/// Where a broker is in its life, for `/ready`.
#[derive(Debug, Default)]
pub(crate) struct BrokerReadiness(AtomicU8);

const STARTING: u8 = 0;
const SERVING: u8 = 1;
const STOPPING: u8 = 2;

impl BrokerReadiness {
    pub(crate) fn serving(&self) {
        self.0.store(SERVING, Ordering::Release);
    }

    pub(crate) fn stopping(&self) {
        self.0.store(STOPPING, Ordering::Release);
    }

    fn check(&self) -> Result<(), String> {
        match self.0.load(Ordering::Acquire) {
            SERVING => Ok(()),
            STARTING => Err("starting: registering, recovering buffers, opening shards".into()),
            _ => Err("stopping".into()),
        }
    }
}

/// A broker's pages.
#[derive(Debug)]
pub(crate) struct BrokerPages {
    pub(crate) shards: Vec<Arc<ShardMetrics>>,
    /// Each shard's command channel, to ask for its segments' figures.
    pub(crate) commands: Vec<flume::Sender<ShardCommand>>,
    pub(crate) readiness: Arc<BrokerReadiness>,
    /// The Kafka port's connections, when it runs.
    pub(crate) kafka: Option<Arc<Connections>>,
}

impl AdminPages for BrokerPages {
    fn metrics_page(&self) -> String {
        let mut families = shard_families(&self.shards);
        if let Some(kafka) = &self.kafka {
            families.extend(kafka_families(kafka));
        }
        families.extend(segment_families(&self.segment_figures()));
        render(families)
    }

    fn readiness(&self) -> Result<(), String> {
        self.readiness.check()
    }
}

impl BrokerPages {
    /// Every shard's open segments, asked of all shards at once and
    /// waited for within [`SEGMENT_FIGURES_WAIT`].
    fn segment_figures(&self) -> Vec<(usize, Vec<SegmentLoadFigures>)> {
        let deadline = Instant::now() + SEGMENT_FIGURES_WAIT;
        let asked: Vec<_> = self
            .commands
            .iter()
            .enumerate()
            .filter_map(|(shard, commands)| {
                let (reply, answer) = flume::bounded(1);
                let command = ShardCommand::ReportLoad {
                    sealed: false,
                    reply,
                };
                commands
                    .send_deadline(command, deadline)
                    .ok()
                    .map(|()| (shard, answer))
            })
            .collect();
        asked
            .into_iter()
            .filter_map(|(shard, answer)| {
                answer
                    .recv_deadline(deadline)
                    .ok()
                    .map(|figures| (shard, figures))
            })
            .collect()
    }
}

fn shard_label(shard: usize) -> (&'static str, String) {
    ("shard", shard.to_string())
}

/// One sample per shard of `value`.
fn per_shard(
    mut family: Family,
    shards: &[Arc<ShardMetrics>],
    value: impl Fn(&ShardMetrics) -> Value,
) -> Family {
    for (i, m) in shards.iter().enumerate() {
        family.sample(vec![shard_label(i)], value(m));
    }
    family
}

/// One sample per shard and transport of `value`.
fn per_transport(
    mut family: Family,
    shards: &[Arc<ShardMetrics>],
    value: impl Fn(&crate::shard_metrics::Traffic) -> Value,
) -> Family {
    for (i, m) in shards.iter().enumerate() {
        for t in Transport::ALL {
            let labels: Labels = vec![shard_label(i), ("transport", t.label().into())];
            family.sample(labels, value(m.traffic(t)));
        }
    }
    family
}

fn histogram(latency: &Latency) -> Value {
    Value::Histogram(latency.snapshot())
}

fn shard_families(shards: &[Arc<ShardMetrics>]) -> Vec<Family> {
    let mut families = vec![
        per_transport(
            Family::counter(
                "kelp_records_in",
                "Records appended, by shard and transport.",
            ),
            shards,
            |t| Value::Counter(t.records_in.get()),
        ),
        per_transport(
            Family::counter(
                "kelp_bytes_in",
                "Bytes of the batches appended, by shard and transport.",
            ),
            shards,
            |t| Value::Counter(t.bytes_in.get()),
        ),
        per_transport(
            Family::counter(
                "kelp_records_out",
                "Offsets fetches moved their readers past, by shard and transport.",
            ),
            shards,
            |t| Value::Counter(t.records_out.get()),
        ),
        per_transport(
            Family::counter(
                "kelp_bytes_out",
                "Bytes of the batches fetches answered with, by shard and transport.",
            ),
            shards,
            |t| Value::Counter(t.bytes_out.get()),
        ),
    ];
    let mut connections = Family::gauge(
        "kelp_connections",
        "Client connections open on a shard, by transport (TCP and QUIC; the Kafka port's are \
         not a shard's).",
    );
    let mut refused = Family::counter(
        "kelp_connections_refused",
        "Connections turned away at their start, by shard, transport and reason.",
    );
    for (i, m) in shards.iter().enumerate() {
        for t in [Transport::Tcp, Transport::Quic] {
            let traffic = m.traffic(t);
            connections.sample(
                vec![shard_label(i), ("transport", t.label().into())],
                Value::level(traffic.connections.open.get()),
            );
            for why in Refusal::ALL {
                refused.sample(
                    vec![
                        shard_label(i),
                        ("transport", t.label().into()),
                        ("reason", why.label().into()),
                    ],
                    Value::Counter(traffic.connections.refused(why).get()),
                );
            }
        }
    }
    families.push(connections);
    families.push(refused);
    let mut denied = Family::counter(
        "kelp_requests_denied",
        "Requests refused for who sent them (--auth), by shard and reason: unauthenticated (the \
         connection had not logged in), authentication_failed (a login step failed), forbidden \
         (the user may not do it).",
    );
    for (i, m) in shards.iter().enumerate() {
        for why in auth::DenialReason::ALL {
            denied.sample(
                vec![shard_label(i), ("reason", why.label().into())],
                Value::Counter(m.denied(why).get()),
            );
        }
    }
    families.push(denied);
    let mut produce = Family::histogram(
        "kelp_produce_seconds",
        "From a produce request's arrival to its ack, by shard and ack mode (none: to its \
         append).",
    );
    for (i, m) in shards.iter().enumerate() {
        for ack in ACK_MODES {
            produce.sample(
                vec![shard_label(i), ("ack", ack_label(ack).into())],
                histogram(m.produce(ack)),
            );
        }
    }
    families.push(produce);
    families.extend([
        per_shard(
            Family::counter(
                "kelp_produce_errors",
                "Produce requests answered with an error.",
            ),
            shards,
            |m| Value::Counter(m.produce_errors.get()),
        ),
        per_shard(
            Family::counter(
                "kelp_produce_throttled",
                "Produce requests held back by their user's byte-rate quota (produce_bytes_per_s).",
            ),
            shards,
            |m| Value::Counter(m.throttled.get()),
        ),
        per_shard(
            Family::counter(
                "kelp_produce_throttled_ms",
                "Milliseconds produce requests were held back by their user's byte-rate quota.",
            ),
            shards,
            |m| Value::Counter(m.throttled_ms.get()),
        ),
        per_shard(
            Family::counter(
                "kelp_produce_resends_found",
                "Idempotent producers' resends answered with the offsets their batch already had, and not stored again.",
            ),
            shards,
            |m| Value::Counter(m.resends_found.get()),
        ),
        per_shard(
            Family::counter(
                "kelp_replica_records",
                "Records copied as a follower from the owners of segments this shard follows.",
            ),
            shards,
            |m| Value::Counter(m.replica_records.get()),
        ),
        per_shard(
            Family::histogram(
                "kelp_fetch_seconds",
                "From a fetch request's arrival to its answer, a long poll's wait included.",
            ),
            shards,
            |m| histogram(&m.fetch),
        ),
        per_shard(
            Family::counter("kelp_flushes", "Chunks stored in the filer."),
            shards,
            |m| Value::Counter(m.flushes.get()),
        ),
        per_shard(
            Family::counter(
                "kelp_flushed_bytes",
                "Bytes of the chunks stored in the filer.",
            ),
            shards,
            |m| Value::Counter(m.flushed_bytes.get()),
        ),
        per_shard(
            Family::histogram(
                "kelp_flush_seconds",
                "Time to store one chunk in the filer.",
            ),
            shards,
            |m| histogram(&m.flush),
        ),
        per_shard(
            Family::counter(
                "kelp_flush_errors",
                "Attempts to store a chunk that failed (each is retried).",
            ),
            shards,
            |m| Value::Counter(m.flush_errors.get()),
        ),
        per_shard(
            Family::counter(
                "kelp_fenced_records",
                "Records this broker held past the seal point of a segment the control plane \
                 sealed while the broker was away (declared dead), dropped: never stored.",
            ),
            shards,
            |m| Value::Counter(m.fenced_records.get()),
        ),
    ]);
    let mut lanes = Family::histogram(
        "kelp_filer_request_seconds",
        "Time a filer call waited for and ran on the shard's lane (upload: chunks, markers; \
         read: ranges, listings).",
    );
    for (i, m) in shards.iter().enumerate() {
        lanes.sample(
            vec![shard_label(i), ("lane", "upload".into())],
            histogram(&m.filer_upload),
        );
        lanes.sample(
            vec![shard_label(i), ("lane", "read".into())],
            histogram(&m.filer_read),
        );
    }
    families.push(lanes);
    families.extend([
        per_shard(
            Family::gauge(
                "kelp_unflushed_bytes",
                "Bytes appended and not yet in the filer (active and sealed buffers).",
            ),
            shards,
            |m| Value::level(m.unflushed_bytes.get()),
        ),
        per_shard(
            Family::gauge(
                "kelp_receive_bytes",
                "Bytes of frames held against the shard's receive budget.",
            ),
            shards,
            |m| Value::level(m.receive_bytes.get()),
        ),
        per_shard(
            Family::gauge(
                "kelp_receive_bytes_max",
                "The shard's receive budget (--receive-bytes-max).",
            ),
            shards,
            |m| Value::level(m.receive_bytes_max.get()),
        ),
    ]);
    families
}

fn kafka_families(connections: &Connections) -> Vec<Family> {
    let mut open = Family::gauge(
        "kelp_kafka_connections",
        "Client connections open on the Kafka port.",
    );
    open.sample(Vec::new(), Value::level(connections.open.get()));
    let mut refused = Family::counter(
        "kelp_kafka_connections_refused",
        "Connections the Kafka port turned away at their start, by reason.",
    );
    for why in [Refusal::ConnectionLimit, Refusal::AddressLimit] {
        refused.sample(
            vec![("reason", why.label().into())],
            Value::Counter(connections.refused(why).get()),
        );
    }
    let mut denied = Family::counter(
        "kelp_kafka_requests_denied",
        "Kafka requests refused by authentication or authorization, by reason.",
    );
    for why in auth::DenialReason::ALL {
        denied.sample(
            vec![("reason", why.label().into())],
            Value::Counter(connections.denied(why).get()),
        );
    }
    let mut throttled = Family::counter(
        "kelp_kafka_produce_throttled",
        "Kafka produce requests held to their user's byte-rate quota.",
    );
    throttled.sample(Vec::new(), Value::Counter(connections.throttled.get()));
    let mut throttled_ms = Family::counter(
        "kelp_kafka_produce_throttled_ms",
        "Milliseconds of throttle time the Kafka port gave produce requests.",
    );
    throttled_ms.sample(Vec::new(), Value::Counter(connections.throttled_ms.get()));
    vec![open, refused, denied, throttled, throttled_ms]
}

fn segment_families(figures: &[(usize, Vec<SegmentLoadFigures>)]) -> Vec<Family> {
    let mut records = Family::counter(
        "kelp_segment_appended_records",
        "Records appended to an open segment since this broker opened it.",
    );
    let mut bytes = Family::counter(
        "kelp_segment_appended_bytes",
        "Bytes appended to an open segment since this broker opened it.",
    );
    let mut next = Family::gauge(
        "kelp_segment_next_offset",
        "The offset an open segment gives its next record.",
    );
    let mut lost = Family::gauge(
        "kelp_segment_lost_records",
        "Offsets of a segment whose records recovery could not read back (its lost ranges).",
    );
    for (shard, segments) in figures {
        for s in segments {
            let labels: Labels = vec![
                ("topic", s.topic.clone()),
                ("segment", s.segment.to_string()),
                shard_label(*shard),
            ];
            records.sample(labels.clone(), Value::Counter(s.appended_records));
            bytes.sample(labels.clone(), Value::Counter(s.appended_bytes));
            next.sample(labels.clone(), Value::level(s.next_offset));
            lost.sample(labels, Value::level(s.lost_records));
        }
    }
    vec![records, bytes, next, lost]
}
