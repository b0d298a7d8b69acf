//! Plain-text tables for `budgetctl`'s human output.

/// Renders rows under headers, columns left-aligned and padded to the
/// widest cell, two spaces apart; numbers are right-aligned.
pub fn render(headers: &[&str], rows: &[Vec<String>]) -> String {
    let n = headers.len();
    let mut width: Vec<usize> = headers.iter().map(|h| h.chars().count()).collect();
    for r in rows {
        for (i, c) in r.iter().enumerate().take(n) {
            width[i] = width[i].max(c.chars().count());
        }
    }
    let numeric: Vec<bool> = (0..n)
        .map(|i| {
            !rows.is_empty()
                && rows.iter().all(|r| {
                    r.get(i)
                        .is_none_or(|c| c.is_empty() || c == "-" || c.parse::<f64>().is_ok())
                })
        })
        .collect();
    let mut out = String::new();
    let mut line = |cells: Vec<&str>, header: bool| {
        let mut l = String::new();
        for (i, c) in cells.iter().enumerate() {
            let pad = width[i].saturating_sub(c.chars().count());
            if i > 0 {
                l.push_str("  ");
            }
            if numeric[i] && !header {
                l.push_str(&" ".repeat(pad));
                l.push_str(c);
            } else {
                l.push_str(c);
                if i + 1 < cells.len() {
                    l.push_str(&" ".repeat(pad));
                }
            }
        }
        out.push_str(l.trim_end());
        out.push('\n');
    };
    line(headers.to_vec(), true);
    for r in rows {
        line(r.iter().map(String::as_str).collect(), false);
    }
    out
}

/// A number with up to `digits` decimals, trailing zeros dropped.
pub fn num(v: f64, digits: usize) -> String {
    if v >= 1e8 {
        return "inf".to_string();
    }
    let s = format!("{v:.digits$}");
    if s.contains('.') {
        s.trim_end_matches('0').trim_end_matches('.').to_string()
    } else {
        s
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn aligns_columns() {
        let t = render(
            &["NAME", "GPUH"],
            &[
                vec!["a".into(), "1.5".into()],
                vec!["bbbb".into(), "10".into()],
            ],
        );
        assert_eq!(t, "NAME  GPUH\na      1.5\nbbbb    10\n");
        assert_eq!(num(1.2500, 3), "1.25");
        assert_eq!(num(2.0, 3), "2");
    }
}
