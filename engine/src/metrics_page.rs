//! The metrics page: families of samples read at one scrape, encoded in
//! the OpenMetrics text format (which Prometheus scrapes) by the
//! `prometheus-client` crate. What the broker and the control plane
//! publish is listed in docs/operations.md.
//!
//! A family is built afresh at each scrape from the figures the shards
//! and the control plane keep; nothing here is on a hot path.

use prometheus_client::collector::Collector;
use prometheus_client::encoding::{DescriptorEncoder, NoLabelSet};
use prometheus_client::metrics::MetricType;
use prometheus_client::registry::Registry;

/// The media type of the page.
pub const METRICS_CONTENT_TYPE: &str = "application/openmetrics-text; version=1.0.0; charset=utf-8";

/// A histogram read at one moment.
#[derive(Debug, Clone, PartialEq)]
pub struct HistogramSnapshot {
    /// The sum of the observations, in seconds.
    pub sum_seconds: f64,
    /// Observations: the buckets' total.
    pub count: u64,
    /// (upper bound in seconds, observations over the bucket below and at
    /// or under this bound), ascending, the last bound `+Inf`. Not
    /// cumulative: the encoding adds them up.
    pub buckets: Vec<(f64, u64)>,
}

/// One sample's value.
#[derive(Debug, Clone)]
pub enum Value {
    Counter(u64),
    Gauge(i64),
    Histogram(HistogramSnapshot),
}

impl Value {
    /// A gauge of a count or a size (saturating at `i64::MAX`).
    pub fn level(v: u64) -> Value {
        Value::Gauge(i64::try_from(v).unwrap_or(i64::MAX))
    }
}

/// Labels of a sample: names are fixed, values are data.
pub type Labels = Vec<(&'static str, String)>;

/// A metric family: its name (a counter's without `_total`, which the
/// encoding adds), its help text, and its samples, all of the family's
/// type.
#[derive(Debug, Clone)]
pub struct Family {
    name: &'static str,
    help: &'static str,
    kind: MetricType,
    samples: Vec<(Labels, Value)>,
}

impl Family {
    pub fn counter(name: &'static str, help: &'static str) -> Family {
        Family::new(name, help, MetricType::Counter)
    }

    pub fn gauge(name: &'static str, help: &'static str) -> Family {
        Family::new(name, help, MetricType::Gauge)
    }

    pub fn histogram(name: &'static str, help: &'static str) -> Family {
        Family::new(name, help, MetricType::Histogram)
    }

    fn new(name: &'static str, help: &'static str, kind: MetricType) -> Family {
        Family {
            name,
            help,
            kind,
            samples: Vec::new(),
        }
    }

    /// Add a sample; its value must be of the family's type.
    pub fn sample(&mut self, labels: Labels, value: Value) -> &mut Family {
        let fits = matches!(
            (&value, &self.kind),
            (Value::Counter(_), MetricType::Counter)
                | (Value::Gauge(_), MetricType::Gauge)
                | (Value::Histogram(_), MetricType::Histogram)
        );
        assert!(fits, "family {}: a sample of another type", self.name);
        self.samples.push((labels, value));
        self
    }
}

/// The families of one scrape, as `prometheus-client` collects them.
#[derive(Debug)]
struct Scrape(Vec<Family>);

impl Collector for Scrape {
    fn encode(&self, mut encoder: DescriptorEncoder) -> Result<(), std::fmt::Error> {
        for family in &self.0 {
            let mut metric =
                encoder.encode_descriptor(family.name, family.help, None, family.kind)?;
            for (labels, value) in &family.samples {
                if labels.is_empty() {
                    encode_value(&mut metric, value)?;
                } else {
                    encode_value(&mut metric.encode_family(labels)?, value)?;
                }
            }
        }
        Ok(())
    }
}

fn encode_value(
    sample: &mut prometheus_client::encoding::MetricEncoder<'_>,
    value: &Value,
) -> Result<(), std::fmt::Error> {
    match value {
        Value::Counter(v) => sample.encode_counter::<NoLabelSet, _, u64>(v, None),
        Value::Gauge(v) => sample.encode_gauge(v),
        Value::Histogram(h) => {
            sample.encode_histogram::<NoLabelSet>(h.sum_seconds, h.count, &h.buckets, None)
        }
    }
}

/// The page for `families`, ending with `# EOF`.
pub fn render(families: Vec<Family>) -> String {
    let mut registry = Registry::default();
    registry.register_collector(Box::new(Scrape(families)));
    let mut page = String::new();
    // Writing to a String cannot fail; a failure would be the encoder's
    // bug, and a page cut short would be refused by any parser.
    if let Err(e) = prometheus_client::encoding::text::encode(&mut page, &registry) {
        log::error!("metrics page: encoding failed: {e}");
    }
    page
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::shard_metrics::Latency;
    use std::time::Duration;

    #[test]
    fn counters_gauges_and_histograms_are_encoded_with_their_labels() {
        let latency = Latency::default();
        latency.observe(Duration::from_micros(40));
        let mut records = Family::counter("kelp_test_records", "Records.");
        records.sample(vec![("shard", "0".into())], Value::Counter(7));
        let mut level = Family::gauge("kelp_test_level_bytes", "A level.");
        level.sample(vec![], Value::Gauge(-3));
        let mut took = Family::histogram("kelp_test_seconds", "Durations.");
        took.sample(
            vec![("ack", "leader".into())],
            Value::Histogram(latency.snapshot()),
        );
        let page = render(vec![records, level, took]);
        assert!(
            page.contains("# TYPE kelp_test_records counter\n"),
            "{page}"
        );
        assert!(
            page.contains("kelp_test_records_total{shard=\"0\"} 7\n"),
            "{page}"
        );
        assert!(page.contains("kelp_test_level_bytes -3\n"), "{page}");
        // Cumulative on the page: the 40 µs observation is under every
        // bound from 50 µs up.
        assert!(
            page.contains("kelp_test_seconds_bucket{le=\"0.000025\",ack=\"leader\"} 0\n"),
            "{page}"
        );
        assert!(
            page.contains("kelp_test_seconds_bucket{le=\"0.00005\",ack=\"leader\"} 1\n"),
            "{page}"
        );
        assert!(
            page.contains("kelp_test_seconds_bucket{le=\"+Inf\",ack=\"leader\"} 1\n"),
            "{page}"
        );
        assert!(
            page.contains("kelp_test_seconds_count{ack=\"leader\"} 1\n"),
            "{page}"
        );
        assert!(page.ends_with("# EOF\n"), "{page}");
    }

    #[test]
    #[should_panic(expected = "a sample of another type")]
    fn a_sample_of_another_type_is_a_bug() {
        Family::counter("kelp_test", "x").sample(vec![], Value::Gauge(1));
    }
}
