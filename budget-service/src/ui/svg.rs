//! Small inline SVG charts for the web view: no script, no external file,
//! each with a text equivalent (`role="img"`, `<title>`) for screen readers.
//! Colours come from the page's style sheet (`ui::STYLE`, classes `c` and
//! `o`), not from attributes repeated on every shape: the accounts page
//! draws one chart per account.

use super::{escape, num};

/// One window of an account: its allocation and usage (weighted GPU-hours).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Window {
    pub allocation: f64,
    pub usage: f64,
}

const WIDTH: f64 = 132.0;
const HEIGHT: f64 = 36.0;
const BAR: f64 = 24.0;
const GAP: f64 = 9.0;

/// Bars of usage per window (oldest first), each with its allocation as a
/// dark line across it; a bar over its allocation is drawn in a darker,
/// distinct colour (the text equivalent says so too, colour is not the only
/// cue). `label` names the account for the description.
pub fn usage_chart(label: &str, windows: &[Window]) -> String {
    let top = windows
        .iter()
        .flat_map(|w| [w.allocation, w.usage])
        .filter(|v| v.is_finite())
        .fold(0.0_f64, f64::max)
        .max(1e-9);
    let scale = (HEIGHT - 2.0) / top;
    let mut desc = format!(
        "{label}: usage against allocation, last {} windows, oldest first:",
        windows.len()
    );
    let mut shapes = String::new();
    for (i, w) in windows.iter().enumerate() {
        let x = 2.0 + i as f64 * (BAR + GAP);
        let u = (w.usage.max(0.0) * scale).min(HEIGHT - 2.0);
        let a = (w.allocation.max(0.0) * scale).min(HEIGHT - 2.0);
        let over = w.usage > w.allocation;
        let class = if over { " class=\"o\"" } else { "" };
        shapes.push_str(&format!(
            "<rect x=\"{x:.1}\" y=\"{:.1}\" width=\"{BAR}\" height=\"{u:.1}\"{class}/>\
<line x1=\"{:.1}\" x2=\"{:.1}\" y1=\"{y:.1}\" y2=\"{y:.1}\"/>",
            HEIGHT - u,
            x - 2.0,
            x + BAR + 2.0,
            y = HEIGHT - a
        ));
        desc.push_str(&format!(
            " {} of {}{};",
            num(w.usage),
            num(w.allocation),
            if over { " (over)" } else { "" }
        ));
    }
    format!(
        "<svg class=\"c\" width=\"{WIDTH}\" height=\"{HEIGHT}\" viewBox=\"0 0 {WIDTH} {HEIGHT}\" role=\"img\"><title>{d}</title>{shapes}</svg>",
        d = escape(&desc)
    )
}

/// One team of [`paired_chart`]: its name and the figure in each case.
#[derive(Debug, Clone, PartialEq)]
pub struct Pair {
    pub team: String,
    pub was: f64,
    pub would: f64,
}

const P_HEIGHT: f64 = 160.0;
const P_TOP: f64 = 34.0;
const P_BOTTOM: f64 = 22.0;
const P_BAR: f64 = 30.0;
const P_GROUP: f64 = 2.0 * P_BAR + 30.0;
const P_LABEL: usize = 10;

/// Paired bars, one pair per team: the figure as it was (left, class `w`)
/// and as it would be (right, class `n`), each labelled with its value
/// (`fmt`), a legend above and the team under each pair; the full
/// description, every team's two values, is the chart's accessible name.
pub fn paired_chart(what: &str, pairs: &[Pair], fmt: fn(f64) -> String) -> String {
    let top = pairs
        .iter()
        .flat_map(|p| [p.was, p.would])
        .filter(|v| v.is_finite())
        .fold(0.0_f64, f64::max)
        .max(1e-9);
    let plot = P_HEIGHT - P_TOP - P_BOTTOM;
    let base = P_HEIGHT - P_BOTTOM;
    let width = (10.0 + pairs.len() as f64 * P_GROUP).max(260.0);
    let mut desc = format!("{what}, as it was and as it would be, per team:");
    let mut shapes = format!(
        "<rect class=\"w\" x=\"4\" y=\"4\" width=\"12\" height=\"12\"/><text x=\"20\" y=\"14\">as it was</text>\
<rect class=\"n\" x=\"100\" y=\"4\" width=\"12\" height=\"12\"/><text x=\"116\" y=\"14\">as it would be</text>\
<line x1=\"0\" x2=\"{width:.1}\" y1=\"{base:.1}\" y2=\"{base:.1}\"/>"
    );
    for (i, p) in pairs.iter().enumerate() {
        let x0 = 10.0 + i as f64 * P_GROUP;
        for (k, (v, class)) in [(p.was, "w"), (p.would, "n")].into_iter().enumerate() {
            let x = x0 + k as f64 * (P_BAR + 2.0);
            let h = if v.is_finite() {
                (v.max(0.0) / top * plot).min(plot)
            } else {
                0.0
            };
            shapes.push_str(&format!(
                "<rect class=\"{class}\" x=\"{x:.1}\" y=\"{:.1}\" width=\"{P_BAR}\" height=\"{h:.1}\"/>\
<text class=\"v\" x=\"{:.1}\" y=\"{:.1}\">{}</text>",
                base - h,
                x + P_BAR / 2.0,
                base - h - 3.0,
                escape(&fmt(v))
            ));
        }
        let label: String = if p.team.chars().count() > P_LABEL {
            let mut s: String = p.team.chars().take(P_LABEL - 1).collect();
            s.push('\u{2026}');
            s
        } else {
            p.team.clone()
        };
        shapes.push_str(&format!(
            "<text class=\"t\" x=\"{:.1}\" y=\"{:.1}\">{}</text>",
            x0 + P_BAR + 1.0,
            base + 15.0,
            escape(&label)
        ));
        desc.push_str(&format!(
            " {}: {} as it was, {} as it would be;",
            p.team,
            fmt(p.was),
            fmt(p.would)
        ));
    }
    format!(
        "<svg class=\"p\" width=\"{width:.0}\" height=\"{P_HEIGHT}\" viewBox=\"0 0 {width:.0} {P_HEIGHT}\" role=\"img\"><title>{d}</title>{shapes}</svg>",
        d = escape(&desc)
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn paired_chart_draws_both_cases_per_team() {
        let pct = |v: f64| format!("{:.1}%", v * 100.0);
        let svg = paired_chart(
            "Entitlement shortfall",
            &[
                Pair {
                    team: "a<b>".into(),
                    was: 0.5,
                    would: 0.25,
                },
                Pair {
                    team: "a-very-long-team-name".into(),
                    was: 0.0,
                    would: f64::NAN,
                },
            ],
            pct,
        );
        assert_eq!(svg.matches("<rect class=\"w\"").count(), 3, "legend + 2");
        assert_eq!(svg.matches("<rect class=\"n\"").count(), 3, "legend + 2");
        assert!(svg.contains("a&lt;b&gt;: 50.0% as it was, 25.0% as it would be;"));
        // The tallest bar fills the plot (160 - 34 - 22 = 104), half of it half.
        assert!(svg.contains("height=\"104.0\"") && svg.contains("height=\"52.0\""));
        assert!(svg.contains("a-very-lo\u{2026}"));
        assert!(!svg.contains("height=\"NaN\""));
    }

    #[test]
    fn chart_scales_bars_and_describes_them() {
        let svg = usage_chart(
            "<a>",
            &[
                Window {
                    allocation: 10.0,
                    usage: 5.0,
                },
                Window {
                    allocation: 10.0,
                    usage: 20.0,
                },
            ],
        );
        assert!(svg.contains("&lt;a&gt;: usage against allocation, last 2 windows"));
        assert!(svg.contains("5.00 of 10.00;") && svg.contains("20.00 of 10.00 (over);"));
        // The description once (the accessible name), the bar over its
        // allocation marked for the style sheet's distinct colour.
        assert_eq!(svg.matches("usage against allocation").count(), 1);
        assert_eq!(svg.matches("class=\"o\"").count(), 1);
        // The fullest bar reaches the top (2 px margin), the half one half-way.
        assert!(svg.contains("height=\"34.0\"") && svg.contains("height=\"8.5\""));
        // Zero everywhere draws flat bars, no NaN.
        let flat = usage_chart(
            "z",
            &[Window {
                allocation: 0.0,
                usage: 0.0,
            }],
        );
        assert!(!flat.contains("NaN") && flat.contains("height=\"0.0\""));
    }
}
