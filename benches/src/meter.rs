//! The meter of one benchmark phase: a thread that samples progress and
//! the broker's memory and CPU every 100 ms and draws the progress bar
//! (stderr, only when it is a terminal; MB and MB/s like the summary), and
//! the phase's CPU: the broker's from
//! `/proc`, the load generator's from `getrusage` of the calling thread
//! (the load runs on its current-thread runtime).

use std::{
    sync::{
        atomic::{AtomicBool, Ordering},
        Arc,
    },
    thread,
    time::{Duration, Instant},
};

use anyhow::{anyhow, Result};
use indicatif::{ProgressBar, ProgressStyle};

use crate::{baseline::cpu_time, broker_process::ProcessStats, load::Progress, report::Sample};

/// How often throughput, broker memory and CPU and the progress bar are
/// sampled.
const SAMPLE_INTERVAL: Duration = Duration::from_millis(100);
const MEGABYTE: f64 = 1e6;

/// The progress bar's text: `12.3/20.0 MB, 450 MB/s`, in the summary's units.
fn progress_message(bytes: u64, total_bytes: Option<u64>, mb_s: f64) -> String {
    let done = bytes as f64 / MEGABYTE;
    match total_bytes {
        Some(total) => format!(
            "{done:.1}/{:.1} MB, {mb_s:.0} MB/s",
            total as f64 / MEGABYTE
        ),
        None => format!("{done:.1} MB, {mb_s:.0} MB/s"),
    }
}

/// Samples progress and broker memory while a phase runs, draws the
/// progress bar, and measures the phase's broker and load-generator CPU.
pub struct Meter {
    stop: Arc<AtomicBool>,
    sampler: thread::JoinHandle<Vec<Sample>>,
    stats: Option<ProcessStats>,
    broker_cpu_before: Option<Duration>,
    load_cpu_before: Duration,
}

impl Meter {
    pub fn start(
        stats: Option<ProcessStats>,
        progress: Arc<Progress>,
        total_bytes: Option<u64>,
        label: &'static str,
    ) -> Result<Meter> {
        let broker_cpu_before = stats.map(|s| s.cpu()).transpose()?;
        let stop = Arc::new(AtomicBool::new(false));
        // indicatif's own {bytes} are MiB; the message carries MB instead.
        let bar = match total_bytes {
            Some(total) => ProgressBar::new(total).with_style(
                ProgressStyle::with_template("{prefix} [{elapsed_precise}] {wide_bar} {msg}")
                    .unwrap_or_else(|_| ProgressStyle::default_bar()),
            ),
            None => ProgressBar::new_spinner().with_style(
                ProgressStyle::with_template("{prefix} [{elapsed_precise}] {spinner} {msg}")
                    .unwrap_or_else(|_| ProgressStyle::default_spinner()),
            ),
        }
        .with_prefix(label);
        let sampler = {
            let stop = stop.clone();
            thread::Builder::new()
                .name("bench-sampler".into())
                .spawn(move || sample_until(&stop, &progress, stats, &bar, total_bytes))?
        };
        Ok(Meter {
            stop,
            sampler,
            stats,
            broker_cpu_before,
            // The load runs on this thread's runtime.
            load_cpu_before: cpu_time(libc::RUSAGE_THREAD),
        })
    }

    /// The samples, the broker's CPU and the load generator's CPU.
    pub fn finish(self) -> Result<(Vec<Sample>, Option<Duration>, Duration)> {
        let load_cpu = cpu_time(libc::RUSAGE_THREAD).saturating_sub(self.load_cpu_before);
        let broker_cpu = match (self.stats, self.broker_cpu_before) {
            (Some(stats), Some(before)) => Some(stats.cpu()?.saturating_sub(before)),
            _ => None,
        };
        self.stop.store(true, Ordering::Relaxed);
        let samples = self
            .sampler
            .join()
            .map_err(|_| anyhow!("the sampler thread panicked"))?;
        Ok((samples, broker_cpu, load_cpu))
    }
}

fn sample_until(
    stop: &AtomicBool,
    progress: &Progress,
    stats: Option<ProcessStats>,
    bar: &ProgressBar,
    total_bytes: Option<u64>,
) -> Vec<Sample> {
    let start = Instant::now();
    let mut samples = Vec::new();
    let mut last = (0.0f64, 0u64);
    loop {
        let stopping = stop.load(Ordering::Relaxed);
        let t = start.elapsed().as_secs_f64();
        let bytes = progress.bytes.load(Ordering::Relaxed);
        samples.push(Sample {
            t_s: t,
            bytes,
            broker_rss_bytes: stats.and_then(|s| s.rss_bytes().ok()),
            broker_cpu: stats.and_then(|s| s.cpu().ok()),
        });
        bar.set_position(bytes);
        if t > last.0 {
            let mb_s = bytes.saturating_sub(last.1) as f64 / MEGABYTE / (t - last.0);
            bar.set_message(progress_message(bytes, total_bytes, mb_s));
        }
        last = (t, bytes);
        if stopping {
            bar.finish_and_clear();
            return samples;
        }
        thread::sleep(SAMPLE_INTERVAL);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn progress_is_in_megabytes_like_the_summary() {
        assert_eq!(
            progress_message(12_345_678, Some(20_000_000), 450.4),
            "12.3/20.0 MB, 450 MB/s"
        );
        assert_eq!(progress_message(1_000_000, None, 1.0), "1.0 MB, 1 MB/s");
    }
}
