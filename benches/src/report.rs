//! A benchmark's figures: the human summary, the JSON document and what
//! the plot draws. MB and GB are 10^6 and 10^9 payload (record value)
//! bytes; latencies are microseconds from HDR histograms.

use std::time::Duration;

use hdrhistogram::Histogram;
use serde_json::{json, Value};

use crate::host_limits::Limit;

/// One progress sample.
#[derive(Debug, Clone, Copy)]
pub struct Sample {
    /// Seconds since the phase started.
    pub t_s: f64,
    /// Payload bytes done by then.
    pub bytes: u64,
    pub broker_rss_bytes: Option<u64>,
}

/// The host limits of one run.
#[derive(Debug)]
pub struct Baselines {
    pub raw_tcp: Limit,
    pub raw_quinn: Limit,
    pub file_write: Limit,
    pub file_write_fdatasync: Limit,
    /// The limit this scenario's figure is compared with.
    pub primary: &'static str,
}

impl Baselines {
    fn all(&self) -> [(&'static str, &Limit); 4] {
        [
            ("raw_tcp", &self.raw_tcp),
            ("raw_quinn", &self.raw_quinn),
            ("file_write", &self.file_write),
            ("file_write_fdatasync", &self.file_write_fdatasync),
        ]
    }

    fn primary(&self) -> &Limit {
        self.all()
            .into_iter()
            .find(|(name, _)| *name == self.primary)
            .map_or(&self.raw_tcp, |(_, limit)| limit)
    }
}

/// Everything one run measured.
pub struct Report {
    pub scenario: &'static str,
    pub transport: &'static str,
    pub ack: &'static str,
    pub consume_from: Option<&'static str>,
    /// `--by-ref`: how values went by reference, if they did.
    pub by_ref: Option<&'static str>,
    pub record_bytes: u32,
    pub batch_records: u32,
    pub producers: u32,
    pub consumers: u32,
    pub segments: u32,
    pub shards: usize,
    pub in_flight: u32,
    pub rate: Option<f64>,
    pub records: u64,
    pub payload_bytes: u64,
    pub elapsed: Duration,
    pub latency: Histogram<u64>,
    pub latency_kind: &'static str,
    pub broker_cpu: Option<Duration>,
    pub broker_peak_rss_bytes: Option<u64>,
    pub load_cpu: Duration,
    pub samples: Vec<Sample>,
    pub baselines: Option<Baselines>,
}

const MEGABYTE: f64 = 1e6;
const GIGABYTE: f64 = 1e9;
const MEBIBYTE: f64 = (1u64 << 20) as f64;

impl Report {
    pub fn throughput_mb_s(&self) -> f64 {
        self.payload_bytes as f64 / MEGABYTE / self.elapsed.as_secs_f64()
    }

    pub fn records_per_s(&self) -> f64 {
        self.records as f64 / self.elapsed.as_secs_f64()
    }

    fn per_gb(&self, cpu: Duration) -> f64 {
        cpu.as_secs_f64() / (self.payload_bytes as f64 / GIGABYTE)
    }

    pub fn broker_cpu_s_per_gb(&self) -> Option<f64> {
        self.broker_cpu.map(|c| self.per_gb(c))
    }

    pub fn broker_peak_rss_mb(&self) -> Option<f64> {
        self.broker_peak_rss_bytes.map(|b| b as f64 / MEBIBYTE)
    }

    /// p50, p90, p99, p99.9 and max, microseconds.
    pub fn latency_us(&self) -> [(&'static str, u64); 5] {
        let h = &self.latency;
        [
            ("p50", h.value_at_quantile(0.5)),
            ("p90", h.value_at_quantile(0.9)),
            ("p99", h.value_at_quantile(0.99)),
            ("p999", h.value_at_quantile(0.999)),
            ("max", h.max()),
        ]
    }

    /// Throughput between consecutive samples, (seconds, MB/s).
    pub fn throughput_over_time(&self) -> Vec<(f64, f64)> {
        self.samples
            .windows(2)
            .filter(|w| w[1].t_s > w[0].t_s)
            .map(|w| {
                let mb = w[1].bytes.saturating_sub(w[0].bytes) as f64 / MEGABYTE;
                (w[1].t_s, mb / (w[1].t_s - w[0].t_s))
            })
            .collect()
    }

    /// The broker's resident memory at each sample, (seconds, MiB).
    pub fn broker_rss_over_time(&self) -> Vec<(f64, f64)> {
        self.samples
            .iter()
            .filter_map(|s| s.broker_rss_bytes.map(|b| (s.t_s, b as f64 / MEBIBYTE)))
            .collect()
    }

    pub fn print(&self) {
        let from = self
            .consume_from
            .map(|f| format!(" from {f}"))
            .unwrap_or_default()
            + &self
                .by_ref
                .map(|p| format!(" by reference ({p})"))
                .unwrap_or_default();
        println!(
            "{}{from} over {}: {} records of {} B in batches of {}, ack={}, {} segment(s) on {} shard(s), {:.2} s",
            self.scenario,
            self.transport,
            self.records,
            self.record_bytes,
            self.batch_records,
            self.ack,
            self.segments,
            self.shards,
            self.elapsed.as_secs_f64(),
        );
        println!(
            "  throughput   {:.1} MB/s, {:.0} records/s",
            self.throughput_mb_s(),
            self.records_per_s()
        );
        let lat: Vec<String> = self
            .latency_us()
            .iter()
            .map(|(name, us)| format!("{name}={}", format_us(*us)))
            .collect();
        if self.latency.is_empty() {
            println!("  latency      {}", self.latency_kind);
        } else {
            println!("  latency      {} ({})", lat.join(" "), self.latency_kind);
        }
        match (self.broker_cpu_s_per_gb(), self.broker_peak_rss_mb()) {
            (Some(cpu), Some(rss)) => {
                println!("  broker       {cpu:.2} CPU s/GB, peak RSS {rss:.1} MiB")
            }
            _ => println!("  broker       not measured (--broker: not our process)"),
        }
        println!(
            "  load         {:.2} CPU s/GB (the load generator's thread)",
            self.per_gb(self.load_cpu)
        );
        if let Some(b) = &self.baselines {
            let kelp = self.throughput_mb_s();
            for (name, limit) in b.all() {
                let mark = if name == b.primary { "  <- limit" } else { "" };
                println!(
                    "  {name:<21} {:>8.1} MB/s   kelp at {:.2} of it{mark}",
                    limit.mb_per_s(),
                    kelp / limit.mb_per_s()
                );
            }
        }
    }

    pub fn json(&self) -> Value {
        let latency: serde_json::Map<String, Value> = self
            .latency_us()
            .iter()
            .map(|(name, us)| (name.to_string(), json!(us)))
            .collect();
        let mut doc = json!({
            "scenario": self.scenario,
            "transport": self.transport,
            "ack": self.ack,
            "consume_from": self.consume_from,
            "by_ref": self.by_ref,
            "record_bytes": self.record_bytes,
            "batch_records": self.batch_records,
            "producers": self.producers,
            "consumers": self.consumers,
            "segments": self.segments,
            "shards": self.shards,
            "in_flight": self.in_flight,
            "rate_records_per_s": self.rate,
            "records": self.records,
            "payload_bytes": self.payload_bytes,
            "elapsed_s": self.elapsed.as_secs_f64(),
            "throughput_mb_s": self.throughput_mb_s(),
            "records_per_s": self.records_per_s(),
            "latency_us": latency,
            "latency_samples": self.latency.len(),
            "latency_kind": self.latency_kind,
            "broker_cpu_s_per_gb": self.broker_cpu_s_per_gb(),
            "broker_peak_rss_mb": self.broker_peak_rss_mb(),
            "load_cpu_s_per_gb": self.per_gb(self.load_cpu),
            "units": "MB = 10^6 payload (record value) bytes; latency in microseconds; RSS in MiB",
            "throughput_over_time_mb_s": self.throughput_over_time(),
            "broker_rss_over_time_mb": self.broker_rss_over_time(),
        });
        if let (Some(b), Some(map)) = (&self.baselines, doc.as_object_mut()) {
            let primary = b.primary();
            map.insert("baseline".into(), json!(b.primary));
            map.insert("baseline_mb_s".into(), json!(primary.mb_per_s()));
            map.insert(
                "ratio_to_baseline".into(),
                json!(self.throughput_mb_s() / primary.mb_per_s()),
            );
            let all: serde_json::Map<String, Value> = b
                .all()
                .iter()
                .map(|(name, limit)| {
                    (
                        name.to_string(),
                        json!({
                            "mb_s": limit.mb_per_s(),
                            "payload_bytes": limit.payload_bytes,
                            "ratio": self.throughput_mb_s() / limit.mb_per_s(),
                        }),
                    )
                })
                .collect();
            map.insert("baselines".into(), Value::Object(all));
        }
        doc
    }
}

fn format_us(us: u64) -> String {
    if us >= 10_000 {
        format!("{:.1}ms", us as f64 / 1000.0)
    } else {
        format!("{us}us")
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;
    use crate::load::new_histogram;

    fn report(baselines: Option<Baselines>) -> Report {
        let mut latency = new_histogram();
        for us in 1..=1000u64 {
            latency.record(us).unwrap();
        }
        Report {
            scenario: "produce",
            transport: "tcp",
            ack: "leader",
            consume_from: None,
            by_ref: None,
            record_bytes: 1000,
            batch_records: 1000,
            producers: 1,
            consumers: 1,
            segments: 1,
            shards: 1,
            in_flight: 32,
            rate: None,
            records: 2_000_000,
            payload_bytes: 2_000_000_000,
            elapsed: Duration::from_secs(4),
            latency,
            latency_kind: "publish to ack, per batch",
            broker_cpu: Some(Duration::from_secs(1)),
            broker_peak_rss_bytes: Some(16 << 20),
            load_cpu: Duration::from_millis(500),
            samples: vec![
                Sample {
                    t_s: 0.0,
                    bytes: 0,
                    broker_rss_bytes: Some(8 << 20),
                },
                Sample {
                    t_s: 2.0,
                    bytes: 1_000_000_000,
                    broker_rss_bytes: Some(16 << 20),
                },
                Sample {
                    t_s: 4.0,
                    bytes: 2_000_000_000,
                    broker_rss_bytes: None,
                },
            ],
            baselines,
        }
    }

    #[test]
    fn figures_follow_from_the_measurements() {
        let r = report(None);
        assert_eq!(r.throughput_mb_s(), 500.0);
        assert_eq!(r.records_per_s(), 500_000.0);
        assert_eq!(r.broker_cpu_s_per_gb(), Some(0.5));
        assert_eq!(r.broker_peak_rss_mb(), Some(16.0));
        assert_eq!(r.throughput_over_time(), vec![(2.0, 500.0), (4.0, 500.0)]);
        assert_eq!(r.broker_rss_over_time(), vec![(0.0, 8.0), (2.0, 16.0)]);
        let [p50, p90, p99, p999, max] = r.latency_us();
        assert!(r.latency.equivalent(p50.1, 500) && r.latency.equivalent(p90.1, 900));
        assert!(r.latency.equivalent(p99.1, 990) && r.latency.equivalent(p999.1, 999));
        assert!(r.latency.equivalent(max.1, 1000));
    }

    #[test]
    fn json_has_the_issue_keys_and_baseline_ratios() {
        let limit = |mb: u64| Limit {
            payload_bytes: mb * 1_000_000,
            elapsed: Duration::from_secs(1),
        };
        let doc = report(Some(Baselines {
            raw_tcp: limit(2000),
            raw_quinn: limit(400),
            file_write: limit(1500),
            file_write_fdatasync: limit(500),
            primary: "raw_tcp",
        }))
        .json();
        for key in [
            "scenario",
            "transport",
            "records",
            "throughput_mb_s",
            "records_per_s",
            "latency_us",
            "broker_cpu_s_per_gb",
            "broker_peak_rss_mb",
            "baseline_mb_s",
            "ratio_to_baseline",
        ] {
            assert!(doc.get(key).is_some(), "{key} missing");
        }
        for p in ["p50", "p90", "p99", "p999", "max"] {
            assert!(doc["latency_us"][p].as_u64().unwrap() > 0);
        }
        assert_eq!(doc["baseline"], "raw_tcp");
        assert_eq!(doc["baseline_mb_s"].as_f64(), Some(2000.0));
        assert_eq!(doc["ratio_to_baseline"].as_f64(), Some(0.25));
        assert_eq!(doc["baselines"]["raw_quinn"]["ratio"].as_f64(), Some(1.25));
        assert!(report(None).json().get("baseline_mb_s").is_none());
    }
}
