//! A benchmark run's figures: the human summary, the JSON document and what
//! the plot draws.
//!
//! One unit system for everything a human reads: MB and GB are 10^6 and
//! 10^9 bytes (payload, i.e. record value, bytes for throughput; resident
//! memory for RSS), throughput is MB/s, and every latency is printed in
//! milliseconds with three decimals (microsecond resolution), whatever its
//! size. The JSON keeps latencies as integer microseconds (`latency_us`),
//! as the HDR histograms hold them.

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
    /// The broker's CPU time (user + system) since it started.
    pub broker_cpu: Option<Duration>,
}

/// The host limits of one run.
#[derive(Debug)]
pub struct Baselines {
    pub raw_tcp: Limit,
    pub raw_quinn: Limit,
    pub file_write: Limit,
    pub file_write_fdatasync: Limit,
    /// The S3 store's own PUT throughput (`--filer s3://...`).
    pub s3_put: Option<Limit>,
    /// The limit this scenario's figure is compared with.
    pub primary: &'static str,
}

impl Baselines {
    pub fn all(&self) -> Vec<(&'static str, &Limit)> {
        let mut all = vec![
            ("raw_tcp", &self.raw_tcp),
            ("raw_quinn", &self.raw_quinn),
            ("file_write", &self.file_write),
            ("file_write_fdatasync", &self.file_write_fdatasync),
        ];
        if let Some(s3) = &self.s3_put {
            all.push(("s3_put", s3));
        }
        all
    }

    pub fn primary(&self) -> &Limit {
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
pub const MICROSECONDS_PER_MS: f64 = 1000.0;
/// Every latency a human reads: milliseconds, to the microsecond.
pub const LATENCY_UNIT: &str = "ms";
const LATENCY_MS_DECIMALS: usize = 3;

/// A baseline's name as a human reads it.
pub fn limit_label(name: &str) -> &str {
    match name {
        "raw_tcp" => "raw TCP",
        "raw_quinn" => "raw quinn",
        "file_write" => "disk write",
        "file_write_fdatasync" => "disk write + fdatasync",
        "s3_put" => "S3 PUT",
        other => other,
    }
}

/// `us` microseconds in the report's one latency unit: `7155` -> `7.155ms`.
pub fn format_latency(us: u64) -> String {
    format!(
        "{:.LATENCY_MS_DECIMALS$}{LATENCY_UNIT}",
        us as f64 / MICROSECONDS_PER_MS
    )
}

/// The text name of a latency percentile (JSON's `p999` reads `p99.9`).
fn percentile_name(key: &str) -> &str {
    match key {
        "p999" => "p99.9",
        other => other,
    }
}

/// One figure of a run as `--repeat`'s summary table lists it.
pub struct Figure {
    pub label: String,
    /// `None` when this run could not measure it (the broker's CPU and
    /// memory with `--broker`).
    pub value: Option<f64>,
    pub decimals: usize,
    /// The figure the scenario is judged by (the primary baseline).
    pub primary: bool,
}

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
        self.broker_peak_rss_bytes.map(|b| b as f64 / MEGABYTE)
    }

    pub fn load_cpu_s_per_gb(&self) -> f64 {
        self.per_gb(self.load_cpu)
    }

    /// kelp's throughput over the primary baseline's, from the same run.
    pub fn ratio_to_baseline(&self) -> Option<f64> {
        self.baselines
            .as_ref()
            .map(|b| self.throughput_mb_s() / b.primary().mb_per_s())
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

    /// The broker's resident memory at each sample, (seconds, MB).
    pub fn broker_rss_over_time(&self) -> Vec<(f64, f64)> {
        self.samples
            .iter()
            .filter_map(|s| s.broker_rss_bytes.map(|b| (s.t_s, b as f64 / MEGABYTE)))
            .collect()
    }

    /// The broker's CPU between consecutive samples, (seconds, cores: CPU
    /// seconds per second). `/proc` counts in 10 ms ticks, so at 100 ms
    /// samples each point is a multiple of 0.1 core.
    pub fn broker_cpu_over_time(&self) -> Vec<(f64, f64)> {
        self.samples
            .windows(2)
            .filter(|w| w[1].t_s > w[0].t_s)
            .filter_map(|w| {
                let cpu = w[1].broker_cpu?.saturating_sub(w[0].broker_cpu?);
                Some((w[1].t_s, cpu.as_secs_f64() / (w[1].t_s - w[0].t_s)))
            })
            .collect()
    }

    /// What ran: `produce over tcp: 20000 records of 1000 B in batches
    /// of 200, ack=leader, 1 segment(s) on 1 shard(s)`.
    pub fn describe(&self) -> String {
        let from = self
            .consume_from
            .map(|f| format!(" from {f}"))
            .unwrap_or_default()
            + &self
                .by_ref
                .map(|p| format!(" by reference ({p})"))
                .unwrap_or_default();
        format!(
            "{}{from} over {}: {} records of {} B in batches of {}, ack={}, {} segment(s) on {} shard(s)",
            self.scenario,
            self.transport,
            self.records,
            self.record_bytes,
            self.batch_records,
            self.ack,
            self.segments,
            self.shards,
        )
    }

    /// `p50=0.512ms p90=...`, every percentile in the one latency unit.
    fn latency_text(&self, keys: &[&str]) -> String {
        self.latency_us()
            .iter()
            .filter(|(name, _)| keys.contains(name))
            .map(|(name, us)| format!("{}={}", percentile_name(name), format_latency(*us)))
            .collect::<Vec<_>>()
            .join(" ")
    }

    /// One line for run `index` of `runs` (`--repeat`).
    pub fn run_line(&self, index: u32, runs: u32) -> String {
        let mut line = format!(
            "run {index}/{runs}: {:.1} MB/s, {:.0} records/s, {:.2} s",
            self.throughput_mb_s(),
            self.records_per_s(),
            self.elapsed.as_secs_f64()
        );
        if !self.latency.is_empty() {
            line += &format!(", {}", self.latency_text(&["p50", "p99", "p999"]));
        }
        if let (Some(cpu), Some(rss)) = (self.broker_cpu_s_per_gb(), self.broker_peak_rss_mb()) {
            line += &format!(", broker {cpu:.2} CPU s/GB, peak RSS {rss:.1} MB");
        }
        if let (Some(b), Some(ratio)) = (&self.baselines, self.ratio_to_baseline()) {
            line += &format!(
                ", {} {:.1} MB/s, kelp at {ratio:.2} of it",
                b.primary,
                b.primary().mb_per_s()
            );
        }
        line
    }

    /// Every figure `--repeat` summarises, in the text units.
    pub fn figures(&self) -> Vec<Figure> {
        let figure = |label: String, value: Option<f64>, decimals: usize| Figure {
            label,
            value,
            decimals,
            primary: false,
        };
        let mut figures = vec![
            figure("throughput MB/s".into(), Some(self.throughput_mb_s()), 1),
            figure("records/s".into(), Some(self.records_per_s()), 0),
        ];
        if !self.latency.is_empty() {
            figures.extend(self.latency_us().iter().map(|(name, us)| {
                figure(
                    format!("latency {} {LATENCY_UNIT}", percentile_name(name)),
                    Some(*us as f64 / MICROSECONDS_PER_MS),
                    LATENCY_MS_DECIMALS,
                )
            }));
        }
        figures.extend([
            figure("broker CPU s/GB".into(), self.broker_cpu_s_per_gb(), 2),
            figure("broker peak RSS MB".into(), self.broker_peak_rss_mb(), 1),
            figure("load CPU s/GB".into(), Some(self.load_cpu_s_per_gb()), 2),
        ]);
        if let Some(b) = &self.baselines {
            for (name, limit) in b.all() {
                let primary = name == b.primary;
                figures.push(Figure {
                    primary,
                    ..figure(format!("{name} MB/s"), Some(limit.mb_per_s()), 1)
                });
                figures.push(Figure {
                    primary,
                    ..figure(
                        format!("kelp / {name}"),
                        Some(self.throughput_mb_s() / limit.mb_per_s()),
                        2,
                    )
                });
            }
        }
        figures
    }

    pub fn print(&self) {
        println!("{}, {:.2} s", self.describe(), self.elapsed.as_secs_f64());
        println!(
            "  throughput   {:.1} MB/s, {:.0} records/s",
            self.throughput_mb_s(),
            self.records_per_s()
        );
        if self.latency.is_empty() {
            println!("  latency      {}", self.latency_kind);
        } else {
            println!(
                "  latency      {} ({})",
                self.latency_text(&["p50", "p90", "p99", "p999", "max"]),
                self.latency_kind
            );
        }
        match (self.broker_cpu_s_per_gb(), self.broker_peak_rss_mb()) {
            (Some(cpu), Some(rss)) => {
                println!("  broker       {cpu:.2} CPU s/GB, peak RSS {rss:.1} MB")
            }
            _ => println!("  broker       not measured (--broker: not our process)"),
        }
        println!(
            "  load         {:.2} CPU s/GB (the load generator's thread)",
            self.load_cpu_s_per_gb()
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
            "load_cpu_s_per_gb": self.load_cpu_s_per_gb(),
            "units": UNITS,
            "throughput_over_time_mb_s": self.throughput_over_time(),
            "broker_rss_over_time_mb": self.broker_rss_over_time(),
            "broker_cpu_over_time_cores": self.broker_cpu_over_time(),
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

/// The JSON document's `units` note.
const UNITS: &str = "MB = 10^6 bytes (payload, i.e. record value, bytes for throughput; \
                     resident bytes for RSS); GB = 10^9; latency_us in microseconds; \
                     CPU over time in cores (CPU seconds per second)";

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
            broker_peak_rss_bytes: Some(16_000_000),
            load_cpu: Duration::from_millis(500),
            samples: vec![
                Sample {
                    t_s: 0.0,
                    bytes: 0,
                    broker_rss_bytes: Some(8_000_000),
                    broker_cpu: Some(Duration::from_secs(10)),
                },
                Sample {
                    t_s: 2.0,
                    bytes: 1_000_000_000,
                    broker_rss_bytes: Some(16_000_000),
                    broker_cpu: Some(Duration::from_secs(11)),
                },
                Sample {
                    t_s: 4.0,
                    bytes: 2_000_000_000,
                    broker_rss_bytes: None,
                    broker_cpu: None,
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
        assert_eq!(r.broker_cpu_over_time(), vec![(2.0, 0.5)]);
        let [p50, p90, p99, p999, max] = r.latency_us();
        assert!(r.latency.equivalent(p50.1, 500) && r.latency.equivalent(p90.1, 900));
        assert!(r.latency.equivalent(p99.1, 990) && r.latency.equivalent(p999.1, 999));
        assert!(r.latency.equivalent(max.1, 1000));
    }

    #[test]
    fn json_has_the_issue_keys_and_baseline_ratios() {
        let doc = report(Some(limits())).json();
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

    fn limits() -> Baselines {
        let limit = |mb: u64| Limit {
            payload_bytes: mb * 1_000_000,
            elapsed: Duration::from_secs(1),
        };
        Baselines {
            raw_tcp: limit(2000),
            raw_quinn: limit(400),
            file_write: limit(1500),
            file_write_fdatasync: limit(500),
            s3_put: None,
            primary: "raw_tcp",
        }
    }

    #[test]
    fn every_latency_is_in_milliseconds() {
        assert_eq!(format_latency(7155), "7.155ms");
        assert_eq!(format_latency(13_800), "13.800ms");
        assert_eq!(format_latency(42), "0.042ms");
        let line = report(None).run_line(1, 2);
        let latencies: Vec<&str> = line
            .split([' ', ','])
            .filter(|w| w.starts_with('p') && w.contains('='))
            .collect();
        assert_eq!(latencies.len(), 3, "{line}");
        assert!(latencies.iter().all(|w| w.ends_with("ms")), "{line}");
    }

    #[test]
    fn run_line_and_figures_carry_the_baseline_ratio() {
        let r = report(Some(limits()));
        assert_eq!(r.ratio_to_baseline(), Some(0.25));
        let line = r.run_line(2, 3);
        assert!(
            line.starts_with("run 2/3: 500.0 MB/s, 500000 records/s"),
            "{line}"
        );
        assert!(line.contains("peak RSS 16.0 MB"), "{line}");
        assert!(
            line.ends_with("raw_tcp 2000.0 MB/s, kelp at 0.25 of it"),
            "{line}"
        );
        let figures = r.figures();
        let ratio = figures
            .iter()
            .find(|f| f.label == "kelp / raw_tcp")
            .unwrap();
        assert!(ratio.primary && ratio.value == Some(0.25));
        assert!(figures.iter().any(|f| f.label == "latency p99.9 ms"));
        let unmeasured = Report {
            broker_cpu: None,
            ..report(None)
        };
        let cpu = unmeasured.figures();
        let cpu = cpu.iter().find(|f| f.label == "broker CPU s/GB").unwrap();
        assert_eq!(cpu.value, None);
    }
}
