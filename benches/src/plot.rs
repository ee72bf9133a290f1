//! `--plot FILE.png`: throughput over time, the latency distribution (by
//! percentile, on a "nines" axis as HDR histograms are usually drawn) and,
//! with the bench's own broker, the broker's resident memory over time.
//!
//! Text needs a TrueType font, loaded at run time from the system (Debian's
//! `fonts-dejavu-core`); without one, `--plot` fails before the run starts.

use std::{path::Path, sync::OnceLock};

use anyhow::{anyhow, Context, Result};
use plotters::prelude::*;

use crate::report::Report;

/// Where Debian and most distributions keep DejaVu Sans.
const FONT_CANDIDATES: &[&str] = &[
    "/usr/share/fonts/truetype/dejavu/DejaVuSans.ttf",
    "/usr/share/fonts/dejavu/DejaVuSans.ttf",
    "/usr/share/fonts/TTF/DejaVuSans.ttf",
];
const FONT_FAMILY: &str = "sans-serif";
const WIDTH_PX: u32 = 1200;
const PANEL_HEIGHT_PX: u32 = 330;
/// The latency curve goes up to at most this many nines (99.999%).
const NINES_MAX: f64 = 5.0;
/// Points on the latency curve per nine.
const POINTS_PER_NINE: u32 = 100;

/// Registers the first system DejaVu Sans found, once per process.
pub fn load_font() -> Result<()> {
    static LOADED: OnceLock<std::result::Result<(), String>> = OnceLock::new();
    LOADED
        .get_or_init(|| {
            let path = FONT_CANDIDATES
                .iter()
                .find(|p| Path::new(p).exists())
                .ok_or_else(|| {
                    format!(
                        "--plot needs a TrueType font and none was found at {}; install one \
                         (Debian: apt-get install fonts-dejavu-core)",
                        FONT_CANDIDATES.join(", ")
                    )
                })?;
            let bytes = std::fs::read(path).map_err(|e| format!("read {path}: {e}"))?;
            // plotters keeps fonts for the life of the process.
            let bytes: &'static [u8] = Box::leak(bytes.into_boxed_slice());
            plotters::style::register_font(FONT_FAMILY, FontStyle::Normal, bytes)
                .map_err(|_| format!("{path} is not a usable TrueType font"))
        })
        .clone()
        .map_err(|e| anyhow!(e))
}

/// Draws the report's panels into a PNG at `path`.
pub fn draw(path: &Path, report: &Report) -> Result<()> {
    load_font()?;
    let throughput = report.throughput_over_time();
    let rss = report.broker_rss_over_time();
    let panels = if rss.is_empty() { 2 } else { 3 };
    let root = BitMapBackend::new(path, (WIDTH_PX, PANEL_HEIGHT_PX * panels)).into_drawing_area();
    root.fill(&WHITE)?;
    let areas = root.split_evenly((panels as usize, 1));
    let title = format!(
        "kelp bench {} over {} ({} B records, {} per batch, ack={}): {:.1} MB/s",
        report.scenario,
        report.transport,
        report.record_bytes,
        report.batch_records,
        report.ack,
        report.throughput_mb_s()
    );

    let t_max = throughput.last().map_or(1.0, |p| p.0).max(0.1);
    let y_max = throughput.iter().map(|p| p.1).fold(1.0, f64::max) * 1.1;
    let mut chart = ChartBuilder::on(&areas[0])
        .caption(&title, (FONT_FAMILY, 20))
        .margin(12)
        .x_label_area_size(36)
        .y_label_area_size(70)
        .build_cartesian_2d(0f64..t_max, 0f64..y_max)?;
    chart
        .configure_mesh()
        .x_desc("seconds")
        .y_desc("MB/s")
        .label_style((FONT_FAMILY, 14))
        .draw()?;
    chart.draw_series(LineSeries::new(throughput, &BLUE))?;

    // Latency by percentile: x is the number of nines, -log10(1 - q).
    let samples = report.latency.len().max(1) as f64;
    let nines_max = samples.log10().clamp(1.0, NINES_MAX);
    let points: Vec<(f64, f64)> = (0..=(nines_max * f64::from(POINTS_PER_NINE)) as u32)
        .map(|i| {
            let nines = f64::from(i) / f64::from(POINTS_PER_NINE);
            let q = 1.0 - 10f64.powf(-nines);
            let us = report.latency.value_at_quantile(q);
            (nines, us as f64 / 1000.0)
        })
        .collect();
    let lat_max = points.iter().map(|p| p.1).fold(0.001, f64::max) * 1.1;
    let mut chart = ChartBuilder::on(&areas[1])
        .caption(
            format!("latency: {}", report.latency_kind),
            (FONT_FAMILY, 18),
        )
        .margin(12)
        .x_label_area_size(36)
        .y_label_area_size(70)
        .build_cartesian_2d(0f64..nines_max, 0f64..lat_max)?;
    chart
        .configure_mesh()
        .x_desc("percentile")
        .y_desc("ms")
        .x_labels(nines_max as usize + 1)
        .x_label_formatter(&|n| percentile_label(*n))
        .label_style((FONT_FAMILY, 14))
        .draw()?;
    chart.draw_series(LineSeries::new(points, &RED))?;

    if panels == 3 {
        let rss_max = rss.iter().map(|p| p.1).fold(1.0, f64::max) * 1.2;
        let mut chart = ChartBuilder::on(&areas[2])
            .caption("broker resident memory", (FONT_FAMILY, 18))
            .margin(12)
            .x_label_area_size(36)
            .y_label_area_size(70)
            .build_cartesian_2d(0f64..t_max, 0f64..rss_max)?;
        chart
            .configure_mesh()
            .x_desc("seconds")
            .y_desc("MiB")
            .label_style((FONT_FAMILY, 14))
            .draw()?;
        chart.draw_series(LineSeries::new(rss, &GREEN))?;
    }
    root.present()
        .with_context(|| format!("write {}", path.display()))?;
    Ok(())
}

/// 0 -> "0%", 1 -> "90%", 2 -> "99%", 3 -> "99.9%".
fn percentile_label(nines: f64) -> String {
    let q = (1.0 - 10f64.powf(-nines)) * 100.0;
    let decimals = (nines.round() as usize).saturating_sub(2);
    format!("{q:.decimals$}%")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn percentile_labels() {
        assert_eq!(percentile_label(0.0), "0%");
        assert_eq!(percentile_label(1.0), "90%");
        assert_eq!(percentile_label(2.0), "99%");
        assert_eq!(percentile_label(3.0), "99.9%");
        assert_eq!(percentile_label(4.0), "99.99%");
    }
}
