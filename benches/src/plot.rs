//! `--plot FILE.png`: throughput over time against the host's limits
//! measured in the same run (dashed horizontal lines: raw TCP, raw quinn,
//! disk write with and without fdatasync), the latency distribution (by
//! percentile, on a "nines" axis as HDR histograms are usually drawn) and,
//! with the bench's own broker, the broker's CPU (cores) and resident
//! memory over time. With `--repeat` every panel draws every run, one
//! colour per run; each panel has a legend.
//!
//! Text needs a TrueType font, loaded at run time from the system (Debian's
//! `fonts-dejavu-core`); without one, `--plot` fails before the run starts.

use std::{path::Path, sync::OnceLock};

use anyhow::{anyhow, ensure, Context, Result};
use plotters::{coord::types::RangedCoordf64, prelude::*};

use crate::{
    report::{limit_label, Report, LATENCY_UNIT, MICROSECONDS_PER_MS},
    summary::Spread,
};

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
/// The shortest time axis, seconds.
const T_MIN_S: f64 = 0.1;
/// Head room above the highest point of a panel.
const Y_HEADROOM: f64 = 1.1;
/// Dash and gap of the baselines' lines, pixels.
const DASH_PX: u32 = 8;
/// The baselines' colours, in `Baselines::all` order.
const LIMIT_COLORS: [RGBColor; 4] = [
    RGBColor(0, 0, 0),
    RGBColor(160, 32, 240),
    RGBColor(0, 128, 0),
    RGBColor(200, 100, 0),
];

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

type Chart<'a, 'b> =
    ChartContext<'a, BitMapBackend<'b>, Cartesian2d<RangedCoordf64, RangedCoordf64>>;
type Area<'b> = DrawingArea<BitMapBackend<'b>, plotters::coord::Shift>;

/// Draws the runs' panels into a PNG at `path`.
pub fn draw(path: &Path, reports: &[Report]) -> Result<()> {
    load_font()?;
    ensure!(!reports.is_empty(), "no run to plot");
    let broker_measured = reports.iter().any(|r| !r.broker_rss_over_time().is_empty());
    let panels = if broker_measured { 4 } else { 2 };
    let root = BitMapBackend::new(path, (WIDTH_PX, PANEL_HEIGHT_PX * panels)).into_drawing_area();
    root.fill(&WHITE)?;
    let areas = root.split_evenly((panels as usize, 1));
    let t_max = reports
        .iter()
        .filter_map(|r| r.throughput_over_time().last().map(|p| p.0))
        .fold(T_MIN_S, f64::max);
    draw_throughput(&areas[0], reports, t_max)?;
    draw_latency(&areas[1], reports)?;
    if broker_measured {
        let cpu: Vec<_> = reports.iter().map(Report::broker_cpu_over_time).collect();
        let caption = "broker CPU (CPU seconds per second, 10 ms ticks)";
        draw_over_time(&areas[2], caption, "cores", &cpu, t_max)?;
        let rss: Vec<_> = reports.iter().map(Report::broker_rss_over_time).collect();
        draw_over_time(&areas[3], "broker resident memory", "MB", &rss, t_max)?;
    }
    root.present()
        .with_context(|| format!("write {}", path.display()))?;
    Ok(())
}

/// Run `index`'s colour.
fn run_color(index: usize) -> RGBColor {
    let (r, g, b) = Palette99::pick(index).rgb();
    RGBColor(r, g, b)
}

/// The name of run `index` of `runs` in a legend.
fn run_name(index: usize, runs: usize) -> String {
    if runs == 1 {
        "kelp".into()
    } else {
        format!("kelp run {}", index + 1)
    }
}

fn line_chart<'a, 'b>(
    area: &'a Area<'b>,
    caption: &str,
    x: std::ops::Range<f64>,
    y: std::ops::Range<f64>,
) -> Result<Chart<'a, 'b>> {
    Ok(ChartBuilder::on(area)
        .caption(caption, (FONT_FAMILY, 18))
        .margin(12)
        .x_label_area_size(36)
        .y_label_area_size(70)
        .build_cartesian_2d(x, y)?)
}

fn draw_legend<'a, 'b: 'a>(chart: &mut Chart<'a, 'b>, position: SeriesLabelPosition) -> Result<()> {
    chart
        .configure_series_labels()
        .position(position)
        .background_style(WHITE.mix(0.85))
        .border_style(BLACK)
        .label_font((FONT_FAMILY, 13))
        .draw()?;
    Ok(())
}

/// A legend entry's sample line.
fn legend_line(color: RGBColor) -> impl Fn((i32, i32)) -> PathElement<(i32, i32)> {
    move |(x, y)| PathElement::new(vec![(x, y), (x + 20, y)], color.stroke_width(2))
}

/// kelp's throughput over time, one line per run, and each run's
/// baselines as dashed horizontal lines, labelled with the median.
fn draw_throughput(area: &Area<'_>, reports: &[Report], t_max: f64) -> Result<()> {
    let Some(first) = reports.first() else {
        return Ok(());
    };
    let series: Vec<_> = reports.iter().map(Report::throughput_over_time).collect();
    let limits_mb_s = limits_by_name(reports);
    let y_max = series
        .iter()
        .flatten()
        .map(|p| p.1)
        .chain(
            limits_mb_s
                .iter()
                .flat_map(|(_, values)| values.iter().copied()),
        )
        .fold(1.0, f64::max)
        * Y_HEADROOM;
    let mb_s: Vec<f64> = reports.iter().map(Report::throughput_mb_s).collect();
    let spread = Spread::of(&mb_s).map_or(String::new(), |s| match reports.len() {
        1 => format!("{:.1} MB/s", s.median),
        n => format!(
            "median {:.1} MB/s ({:.1}-{:.1}) over {n} runs",
            s.median, s.min, s.max
        ),
    });
    let title = format!(
        "kelp bench {} over {} ({} B records, {} per batch, ack={}): {spread}",
        first.scenario, first.transport, first.record_bytes, first.batch_records, first.ack,
    );
    let mut chart = line_chart(area, &title, 0.0..t_max, 0.0..y_max)?;
    chart
        .configure_mesh()
        .x_desc("seconds")
        .y_desc("MB/s")
        .label_style((FONT_FAMILY, 14))
        .draw()?;
    draw_runs(&mut chart, &series)?;
    for (index, (name, values)) in limits_mb_s.iter().enumerate() {
        let color = LIMIT_COLORS[index % LIMIT_COLORS.len()];
        let label = match Spread::of(values) {
            Some(s) if values.len() == 1 => format!("{} {:.0} MB/s", limit_label(name), s.median),
            Some(s) => format!(
                "{} median {:.0} MB/s ({:.0}-{:.0})",
                limit_label(name),
                s.median,
                s.min,
                s.max
            ),
            None => continue,
        };
        for (run, mb_s) in values.iter().enumerate() {
            let line = DashedLineSeries::new(
                [(0.0, *mb_s), (t_max, *mb_s)],
                DASH_PX,
                DASH_PX,
                color.stroke_width(2),
            );
            let drawn = chart.draw_series(line)?;
            if run == 0 {
                drawn.label(label.clone()).legend(legend_line(color));
            }
        }
    }
    draw_legend(&mut chart, SeriesLabelPosition::LowerRight)
}

/// Every baseline's MB/s in each run that measured it, by name.
fn limits_by_name(reports: &[Report]) -> Vec<(&'static str, Vec<f64>)> {
    let mut limits: Vec<(&'static str, Vec<f64>)> = Vec::new();
    for baselines in reports.iter().filter_map(|r| r.baselines.as_ref()) {
        for (name, limit) in baselines.all() {
            match limits.iter_mut().find(|(n, _)| *n == name) {
                Some((_, values)) => values.push(limit.mb_per_s()),
                None => limits.push((name, vec![limit.mb_per_s()])),
            }
        }
    }
    limits
}

/// One line per run, in the run's colour and with its legend entry.
fn draw_runs(chart: &mut Chart<'_, '_>, series: &[Vec<(f64, f64)>]) -> Result<()> {
    for (index, points) in series.iter().enumerate() {
        let color = run_color(index);
        chart
            .draw_series(LineSeries::new(
                points.iter().copied(),
                color.stroke_width(2),
            ))?
            .label(run_name(index, series.len()))
            .legend(legend_line(color));
    }
    Ok(())
}

/// Latency by percentile, one curve per run: x is the number of nines,
/// -log10(1 - q); y is milliseconds, the unit of the text summary.
fn draw_latency(area: &Area<'_>, reports: &[Report]) -> Result<()> {
    let Some(first) = reports.first() else {
        return Ok(());
    };
    let samples = reports
        .iter()
        .map(|r| r.latency.len())
        .max()
        .unwrap_or(0)
        .max(1) as f64;
    let nines_max = samples.log10().clamp(1.0, NINES_MAX);
    let curves: Vec<Vec<(f64, f64)>> = reports
        .iter()
        .map(|r| latency_curve(r, nines_max))
        .collect();
    let lat_max = curves.iter().flatten().map(|p| p.1).fold(0.001, f64::max) * Y_HEADROOM;
    let caption = format!("latency: {}", first.latency_kind);
    let mut chart = line_chart(area, &caption, 0.0..nines_max, 0.0..lat_max)?;
    chart
        .configure_mesh()
        .x_desc("percentile")
        .y_desc(LATENCY_UNIT)
        .x_labels(nines_max as usize + 1)
        .x_label_formatter(&|n| percentile_label(*n))
        .label_style((FONT_FAMILY, 14))
        .draw()?;
    draw_runs(&mut chart, &curves)?;
    draw_legend(&mut chart, SeriesLabelPosition::UpperLeft)
}

/// (nines, milliseconds) along one run's latency histogram.
fn latency_curve(report: &Report, nines_max: f64) -> Vec<(f64, f64)> {
    (0..=(nines_max * f64::from(POINTS_PER_NINE)) as u32)
        .map(|i| {
            let nines = f64::from(i) / f64::from(POINTS_PER_NINE);
            let q = 1.0 - 10f64.powf(-nines);
            let us = report.latency.value_at_quantile(q);
            (nines, us as f64 / MICROSECONDS_PER_MS)
        })
        .collect()
}

/// A broker figure over time, one line per run.
fn draw_over_time(
    area: &Area<'_>,
    caption: &str,
    unit: &str,
    series: &[Vec<(f64, f64)>],
    t_max: f64,
) -> Result<()> {
    let y_max = series.iter().flatten().map(|p| p.1).fold(0.1, f64::max) * Y_HEADROOM;
    let mut chart = line_chart(area, caption, 0.0..t_max, 0.0..y_max)?;
    chart
        .configure_mesh()
        .x_desc("seconds")
        .y_desc(unit)
        .label_style((FONT_FAMILY, 14))
        .draw()?;
    draw_runs(&mut chart, series)?;
    draw_legend(&mut chart, SeriesLabelPosition::LowerRight)
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
