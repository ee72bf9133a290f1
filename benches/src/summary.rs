//! `--repeat N`: the spread of every figure over the runs, as a table on
//! stdout and as the JSON document of a repeated bench.
//!
//! Each figure is summarised by its median, minimum and maximum over the
//! runs; a ratio to a baseline is the median of the per-run ratios (each
//! run's kelp figure over the baseline measured in that same run), not a
//! ratio of medians. With an even number of runs the median is the mean of
//! the middle two.

use serde_json::{json, Map, Value};

use crate::report::Report;

/// The keys of a run's JSON document that hold figures; the summary spreads
/// these, the other keys say what ran and are the same in every run.
const FIGURE_KEYS: &[&str] = &[
    "records",
    "payload_bytes",
    "elapsed_s",
    "throughput_mb_s",
    "records_per_s",
    "latency_us",
    "latency_samples",
    "broker_cpu_s_per_gb",
    "broker_peak_rss_mb",
    "load_cpu_s_per_gb",
    "baseline_mb_s",
    "ratio_to_baseline",
    "baselines",
];
/// Series over time: kept per run in `runs`, not summarised.
const SERIES_KEYS: &[&str] = &[
    "throughput_over_time_mb_s",
    "broker_rss_over_time_mb",
    "broker_cpu_over_time_cores",
];
/// Width of the table's label column.
const LABEL_WIDTH: usize = 30;
/// Width of each number column.
const NUMBER_WIDTH: usize = 12;

/// Median, minimum and maximum of one figure over the runs.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Spread {
    pub median: f64,
    pub min: f64,
    pub max: f64,
}

impl Spread {
    /// `None` for no values, or when one is not a number.
    pub fn of(values: &[f64]) -> Option<Spread> {
        if values.is_empty() || values.iter().any(|v| v.is_nan()) {
            return None;
        }
        let mut sorted = values.to_vec();
        sorted.sort_by(f64::total_cmp);
        let middle = sorted.len() / 2;
        let median = if sorted.len() % 2 == 0 {
            (sorted[middle - 1] + sorted[middle]) / 2.0
        } else {
            sorted[middle]
        };
        Some(Spread {
            median,
            min: sorted[0],
            max: sorted[sorted.len() - 1],
        })
    }

    fn json(self) -> Value {
        json!({ "median": self.median, "min": self.min, "max": self.max })
    }
}

/// Prints the summary table of `reports` (one per run, in run order).
pub fn print(reports: &[Report]) {
    let Some(first) = reports.first() else {
        return;
    };
    println!(
        "{}, {} runs (latency: {})",
        first.describe(),
        reports.len(),
        first.latency_kind
    );
    for line in table(reports) {
        println!("{line}");
    }
}

/// The table's lines: a header, then one line per figure with its median,
/// minimum and maximum over the runs.
pub fn table(reports: &[Report]) -> Vec<String> {
    let per_run: Vec<_> = reports.iter().map(Report::figures).collect();
    let Some(first) = per_run.first() else {
        return Vec::new();
    };
    let mut lines = vec![format!(
        "  {:<LABEL_WIDTH$}{:>NUMBER_WIDTH$}{:>NUMBER_WIDTH$}{:>NUMBER_WIDTH$}",
        "figure", "median", "min", "max"
    )];
    for (row, figure) in first.iter().enumerate() {
        let values: Option<Vec<f64>> = per_run
            .iter()
            .map(|figures| figures.get(row).and_then(|f| f.value))
            .collect();
        let label = &figure.label;
        let line = match values.as_deref().and_then(Spread::of) {
            Some(s) => {
                let d = figure.decimals;
                let mark = if figure.primary { "  <- limit" } else { "" };
                format!(
                    "  {label:<LABEL_WIDTH$}{:>NUMBER_WIDTH$.d$}{:>NUMBER_WIDTH$.d$}{:>NUMBER_WIDTH$.d$}{mark}",
                    s.median, s.min, s.max
                )
            }
            None => format!("  {label:<LABEL_WIDTH$}{:>NUMBER_WIDTH$}", "not measured"),
        };
        lines.push(line);
    }
    lines
}

/// The JSON document of a repeated bench from its runs' documents: what
/// ran (the first run's keys), `repeat`, every run's document under
/// `runs`, the spread of every figure under `summary`, and each figure's
/// median under its usual key, so a reader of one run's document reads
/// the medians.
pub fn repeated_json(runs: &[Value]) -> Value {
    let mut doc = runs
        .first()
        .and_then(Value::as_object)
        .cloned()
        .unwrap_or_default();
    doc.retain(|key, _| !SERIES_KEYS.contains(&key.as_str()));
    let mut summary = Map::new();
    for key in FIGURE_KEYS {
        let values: Vec<&Value> = runs.iter().filter_map(|run| run.get(*key)).collect();
        if values.len() == runs.len() && !values.is_empty() {
            let spread = summarize(&values);
            doc.insert(key.to_string(), medians(&spread));
            summary.insert(key.to_string(), spread);
        }
    }
    doc.insert("repeat".into(), json!(runs.len()));
    doc.insert("runs".into(), Value::Array(runs.to_vec()));
    doc.insert("summary".into(), Value::Object(summary));
    Value::Object(doc)
}

/// The same value in every run: numbers become their spread, objects are
/// summarised key by key, anything else (a name, `null`) is the first
/// run's.
fn summarize(values: &[&Value]) -> Value {
    let numbers: Option<Vec<f64>> = values.iter().map(|v| v.as_f64()).collect();
    if let Some(numbers) = numbers {
        return Spread::of(&numbers).map_or(Value::Null, Spread::json);
    }
    if let Some(first) = values.first().and_then(|v| v.as_object()) {
        let keys = first.keys().map(|key| {
            let inner: Vec<&Value> = values.iter().filter_map(|v| v.get(key)).collect();
            (key.clone(), summarize(&inner))
        });
        return Value::Object(keys.collect());
    }
    values.first().map_or(Value::Null, |v| (*v).clone())
}

/// A summary with every spread replaced by its median.
fn medians(summary: &Value) -> Value {
    match summary {
        Value::Object(map) => match map.get("median") {
            Some(median) => median.clone(),
            None => Value::Object(
                map.iter()
                    .map(|(key, v)| (key.clone(), medians(v)))
                    .collect(),
            ),
        },
        other => other.clone(),
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    #[test]
    fn spread_takes_the_middle_and_the_ends() {
        let s = Spread::of(&[3.0, 1.0, 2.0]).unwrap();
        assert_eq!((s.median, s.min, s.max), (2.0, 1.0, 3.0));
        let s = Spread::of(&[4.0, 1.0]).unwrap();
        assert_eq!((s.median, s.min, s.max), (2.5, 1.0, 4.0));
        assert_eq!(Spread::of(&[]), None);
        assert_eq!(Spread::of(&[1.0, f64::NAN]), None);
    }

    fn run(mb_s: f64, p50: u64, ratio: f64) -> Value {
        json!({
            "scenario": "produce",
            "record_bytes": 1000,
            "throughput_mb_s": mb_s,
            "latency_us": { "p50": p50, "p999": p50 * 10 },
            "broker_cpu_s_per_gb": null,
            "baseline": "raw_tcp",
            "ratio_to_baseline": ratio,
            "baselines": { "raw_tcp": { "mb_s": mb_s / ratio, "ratio": ratio } },
            "throughput_over_time_mb_s": [[0.1, mb_s]],
        })
    }

    #[test]
    fn repeated_json_has_the_runs_the_spread_and_the_medians() {
        let runs = [
            run(100.0, 500, 0.5),
            run(300.0, 700, 0.25),
            run(200.0, 900, 0.2),
        ];
        let doc = repeated_json(&runs);
        assert_eq!(doc["repeat"], 3);
        assert_eq!(doc["runs"].as_array().unwrap().len(), 3);
        assert_eq!(doc["runs"][1], runs[1]);
        assert_eq!(doc["scenario"], "produce");
        assert_eq!(doc["record_bytes"], 1000);
        assert_eq!(doc["baseline"], "raw_tcp");
        let summary = &doc["summary"];
        assert_eq!(
            summary["throughput_mb_s"],
            json!({ "median": 200.0, "min": 100.0, "max": 300.0 })
        );
        assert_eq!(summary["latency_us"]["p50"]["median"], 700.0);
        assert_eq!(summary["ratio_to_baseline"]["median"], 0.25);
        assert_eq!(summary["baselines"]["raw_tcp"]["ratio"]["max"], 0.5);
        assert!(summary["broker_cpu_s_per_gb"].is_null());
        assert!(summary.get("record_bytes").is_none());
        // The usual keys hold the medians; series stay in the runs.
        assert_eq!(doc["throughput_mb_s"], 200.0);
        assert_eq!(doc["latency_us"]["p999"], 7000.0);
        assert!(doc.get("throughput_over_time_mb_s").is_none());
    }
}
