//! SVG charts (plotters, SVG backend only): each team's attained share of the
//! cluster over the trailing window, against its allocation, one chart per
//! policy. Solid line: attained share; thin line of the same colour:
//! allocation. Readable without the table: title names the policy and the
//! window, axes are labelled, the legend names the teams.

use std::path::{Path, PathBuf};

use plotters::prelude::*;

use crate::engine::Outcome;
use crate::metrics::attained_at;

const PALETTE: [RGBColor; 8] = [
    RGBColor(31, 119, 180),
    RGBColor(255, 127, 14),
    RGBColor(44, 160, 44),
    RGBColor(214, 39, 40),
    RGBColor(148, 103, 189),
    RGBColor(140, 86, 75),
    RGBColor(227, 119, 194),
    RGBColor(127, 127, 127),
];

/// Writes `share_<policy>.svg` into `dir`; returns its path.
pub fn share_chart(o: &Outcome, window: i64, dir: &Path) -> anyhow::Result<PathBuf> {
    std::fs::create_dir_all(dir).map_err(|e| anyhow::anyhow!("creating {}: {e}", dir.display()))?;
    let path = dir.join(format!("share_{}.svg", o.policy.name()));
    let per = o.sample_every.max(1) as f64;
    let cap = o.capacity_gpus.max(1) as f64;
    let series: Vec<Vec<(f64, f64)>> = {
        let mut s = vec![Vec::new(); o.teams.len()];
        for k in 1..o.samples.len() {
            let x = k as f64 * per / 86_400.0;
            for (t, v) in attained_at(o, k, window).into_iter().enumerate() {
                s[t].push((x, v));
            }
        }
        s
    };
    let x_max = (o.samples.len().max(2) - 1) as f64 * per / 86_400.0;
    let y_max = series
        .iter()
        .flatten()
        .map(|p| p.1)
        .chain(o.teams.iter().map(|t| t.gpus / cap))
        .fold(0.0f64, f64::max)
        .max(0.05)
        * 1.1;
    {
        let root = SVGBackend::new(&path, (1000, 560)).into_drawing_area();
        root.fill(&WHITE).map_err(|e| anyhow::anyhow!("{e}"))?;
        let title = format!(
            "{}: share of the cluster per team over the trailing {} (thin line: allocation)",
            o.policy.name(),
            policy_core::format_duration(window)
        );
        let mut chart = ChartBuilder::on(&root)
            .caption(title, ("sans-serif", 18))
            .margin(12)
            .x_label_area_size(40)
            .y_label_area_size(60)
            .build_cartesian_2d(0f64..x_max.max(1e-3), 0f64..y_max)
            .map_err(|e| anyhow::anyhow!("{e}"))?;
        chart
            .configure_mesh()
            .x_desc("day of the replay")
            .y_desc("share of cluster GPU-time")
            .draw()
            .map_err(|e| anyhow::anyhow!("{e}"))?;
        for (t, team) in o.teams.iter().enumerate() {
            let color = PALETTE[t % PALETTE.len()];
            chart
                .draw_series(LineSeries::new(
                    series[t].iter().copied(),
                    color.stroke_width(2),
                ))
                .map_err(|e| anyhow::anyhow!("{e}"))?
                .label(format!("{} (allocation {:.3})", team.name, team.gpus / cap))
                .legend(move |(x, y)| {
                    PathElement::new(vec![(x, y), (x + 20, y)], color.stroke_width(2))
                });
            let a = team.gpus / cap;
            chart
                .draw_series(LineSeries::new(
                    vec![(0.0, a), (x_max, a)],
                    color.mix(0.6).stroke_width(1),
                ))
                .map_err(|e| anyhow::anyhow!("{e}"))?;
        }
        chart
            .configure_series_labels()
            .border_style(BLACK)
            .background_style(WHITE.mix(0.85))
            .position(SeriesLabelPosition::UpperRight)
            .draw()
            .map_err(|e| anyhow::anyhow!("{e}"))?;
        root.present()
            .map_err(|e| anyhow::anyhow!("writing {}: {e}", path.display()))?;
    }
    Ok(path)
}
