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

#[cfg(test)]
mod tests {
    use super::*;

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
