//! Slurm hostlist expressions (`gpu[1-3,5],login1`, `n[08-10]`) expanded into host
//! names, without calling Slurm.
//!
//! Owns the one expansion every part of the product uses: `preempt/budget` matches a
//! running job's `NodeList` against the drained nodes of the snapshot, and budgetd lists
//! which jobs hold a draining node. Grammar, as Slurm's `hostlist_create` reads it for
//! a one-dimensional cluster:
//! - items are separated by commas (or white space) outside brackets;
//! - an item is `prefix[ranges]suffix`, or a plain name; several bracket groups
//!   (`rack[1-2]n[1-4]`) expand to every combination, leftmost slowest;
//! - ranges are comma separated `N` or `N-M` (decimal, `N <= M`); a lower bound
//!   written with leading zeros sets the width (`n[08-10]` -> `n08 n09 n10`).
//!
//! Bad syntax is an error naming the problem, never a guess; an expression that
//! would expand to more than a bound (default [`MAX_HOSTS`]) is refused before any
//! name is built, so a hostile or mistyped `n[0-999999999]` costs nothing.

/// The largest expansion [`expand`] accepts (far above any real cluster's node count).
pub const MAX_HOSTS: usize = 100_000;

/// Why a hostlist expression could not be expanded.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum HostlistError {
    /// A `[` without its `]`, or a `]` without its `[`.
    #[error("unbalanced brackets in {0:?}")]
    Unbalanced(String),
    /// A `[` inside brackets.
    #[error("nested brackets in {0:?}")]
    Nested(String),
    /// A bracket group or one of its ranges is empty (`n[]`, `n[1,]`).
    #[error("empty range in {0:?}")]
    EmptyRange(String),
    /// A range that is not `N` or `N-M` with decimal `N <= M`.
    #[error("bad range {range:?} in {item:?}: expected N or N-M with N <= M")]
    BadRange { item: String, range: String },
    /// More names than the bound.
    #[error("{expr:?} expands to more than {max} host names")]
    TooLarge { expr: String, max: usize },
}

/// One numeric range of a bracket group.
#[derive(Debug, Clone, Copy)]
struct Range {
    lo: u64,
    hi: u64,
    width: usize,
}

impl Range {
    fn len(&self) -> u64 {
        (self.hi - self.lo).saturating_add(1)
    }
}

/// An item split into its literal parts and bracket groups:
/// `literals[0] group[0] literals[1] group[1] ... literals[n]`.
#[derive(Debug)]
struct Item<'a> {
    literals: Vec<&'a str>,
    groups: Vec<Vec<Range>>,
}

impl Item<'_> {
    fn count(&self) -> u64 {
        self.groups.iter().fold(1u64, |n, g| {
            n.saturating_mul(g.iter().map(Range::len).fold(0u64, u64::saturating_add))
        })
    }

    fn push_names(&self, out: &mut Vec<String>) {
        // Names are built group by group: `prefixes` holds every expansion of the
        // item up to the current group.
        let mut prefixes = vec![self.literals[0].to_string()];
        for (g, lit) in self.groups.iter().zip(&self.literals[1..]) {
            let mut next = Vec::with_capacity(prefixes.len());
            for p in &prefixes {
                for r in g {
                    for n in r.lo..=r.hi {
                        next.push(format!("{p}{n:0w$}{lit}", w = r.width));
                    }
                }
            }
            prefixes = next;
        }
        out.extend(prefixes);
    }
}

fn parse_range(item: &str, r: &str) -> Result<Range, HostlistError> {
    let bad = || HostlistError::BadRange {
        item: item.to_string(),
        range: r.to_string(),
    };
    let num = |s: &str| {
        if s.is_empty() || !s.bytes().all(|b| b.is_ascii_digit()) {
            return Err(bad());
        }
        s.parse::<u64>().map_err(|_| bad())
    };
    let (lo_s, hi_s) = r.split_once('-').unwrap_or((r, r));
    let (lo, hi) = (num(lo_s)?, num(hi_s)?);
    if lo > hi {
        return Err(bad());
    }
    Ok(Range {
        lo,
        hi,
        width: lo_s.len(),
    })
}

fn parse_item(item: &str) -> Result<Item<'_>, HostlistError> {
    let mut literals = Vec::new();
    let mut groups = Vec::new();
    let mut rest = item;
    loop {
        let open = rest.find('[');
        let close = rest.find(']');
        match (open, close) {
            (None, None) => {
                literals.push(rest);
                return Ok(Item { literals, groups });
            }
            (Some(o), Some(c)) if o < c => {
                let inside = &rest[o + 1..c];
                if inside.contains('[') {
                    return Err(HostlistError::Nested(item.to_string()));
                }
                if inside.is_empty() {
                    return Err(HostlistError::EmptyRange(item.to_string()));
                }
                let mut ranges = Vec::new();
                for r in inside.split(',') {
                    if r.is_empty() {
                        return Err(HostlistError::EmptyRange(item.to_string()));
                    }
                    ranges.push(parse_range(item, r)?);
                }
                literals.push(&rest[..o]);
                groups.push(ranges);
                rest = &rest[c + 1..];
            }
            _ => return Err(HostlistError::Unbalanced(item.to_string())),
        }
    }
}

/// Split at separators outside brackets; empty items are skipped.
fn items(expr: &str) -> Result<Vec<&str>, HostlistError> {
    let mut out = Vec::new();
    let (mut depth, mut start) = (0i32, 0usize);
    for (i, c) in expr.char_indices() {
        match c {
            '[' => depth += 1,
            ']' => {
                depth -= 1;
                if depth < 0 {
                    return Err(HostlistError::Unbalanced(expr.to_string()));
                }
            }
            ',' | ' ' | '\t' | '\n' if depth == 0 => {
                out.push(&expr[start..i]);
                start = i + c.len_utf8();
            }
            _ => {}
        }
    }
    if depth != 0 {
        return Err(HostlistError::Unbalanced(expr.to_string()));
    }
    out.push(&expr[start..]);
    Ok(out.into_iter().filter(|i| !i.is_empty()).collect())
}

/// Expand `expr` into host names, in order, refusing more than [`MAX_HOSTS`].
/// An empty expression expands to no names.
pub fn expand(expr: &str) -> Result<Vec<String>, HostlistError> {
    expand_at_most(expr, MAX_HOSTS)
}

/// [`expand`] with an explicit bound on the number of names.
pub fn expand_at_most(expr: &str, max: usize) -> Result<Vec<String>, HostlistError> {
    let parsed = items(expr)?
        .into_iter()
        .map(parse_item)
        .collect::<Result<Vec<_>, _>>()?;
    let total = parsed
        .iter()
        .map(Item::count)
        .fold(0u64, u64::saturating_add);
    if total > max as u64 {
        return Err(HostlistError::TooLarge {
            expr: expr.to_string(),
            max,
        });
    }
    let mut out = Vec::with_capacity(total as usize);
    for item in &parsed {
        item.push_names(&mut out);
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn ok(s: &str) -> Vec<String> {
        expand(s).unwrap_or_else(|e| panic!("{s:?}: {e}"))
    }

    #[test]
    fn expands_ranges_lists_and_widths() {
        assert_eq!(
            ok("gpu[1-3,5],login1"),
            vec!["gpu1", "gpu2", "gpu3", "gpu5", "login1"]
        );
        assert_eq!(ok("n[08-10]"), vec!["n08", "n09", "n10"]);
        assert_eq!(ok("n[8-10]"), vec!["n8", "n9", "n10"]);
        assert_eq!(ok("gpu1"), vec!["gpu1"]);
        assert_eq!(ok("a[1-2]-ib"), vec!["a1-ib", "a2-ib"]);
        assert_eq!(ok("r[1-2]n[1-2]"), vec!["r1n1", "r1n2", "r2n1", "r2n2"]);
        assert_eq!(ok("x y,,z"), vec!["x", "y", "z"]);
        assert!(ok("").is_empty());
        assert!(ok(" , ").is_empty());
    }

    #[test]
    fn syntax_errors_are_named() {
        assert!(matches!(
            expand("bad[x-1]"),
            Err(HostlistError::BadRange { .. })
        ));
        assert!(matches!(
            expand("n[3-1]"),
            Err(HostlistError::BadRange { .. })
        ));
        assert!(matches!(
            expand("n[1-]"),
            Err(HostlistError::BadRange { .. })
        ));
        assert!(matches!(
            expand("n[+1]"),
            Err(HostlistError::BadRange { .. })
        ));
        assert!(matches!(expand("n[1-2"), Err(HostlistError::Unbalanced(_))));
        assert!(matches!(expand("n1-2]"), Err(HostlistError::Unbalanced(_))));
        assert!(matches!(expand("n]1["), Err(HostlistError::Unbalanced(_))));
        assert!(matches!(expand("n[[1]]"), Err(HostlistError::Nested(_))));
        assert!(matches!(expand("n[]"), Err(HostlistError::EmptyRange(_))));
        assert!(matches!(expand("n[1,]"), Err(HostlistError::EmptyRange(_))));
        let e = expand("bad[x-1]").unwrap_err().to_string();
        assert!(e.contains("\"x-1\"") && e.contains("bad[x-1]"), "{e}");
    }

    #[test]
    fn expansion_is_bounded_before_building_names() {
        assert!(matches!(
            expand("n[0-18446744073709551615]"),
            Err(HostlistError::TooLarge { .. })
        ));
        assert!(matches!(
            expand("a[0-999]b[0-999]"),
            Err(HostlistError::TooLarge { max: MAX_HOSTS, .. })
        ));
        assert_eq!(expand_at_most("n[1-4]", 4).map(|v| v.len()), Ok(4));
        assert!(matches!(
            expand_at_most("n[1-4],m", 4),
            Err(HostlistError::TooLarge { max: 4, .. })
        ));
    }

    proptest! {
        /// Expanding the compressed form of a set of numbered names gives them back.
        #[test]
        fn round_trips_ranges(
            prefix in "[a-z]{1,4}",
            mut nums in proptest::collection::btree_set(0u64..500, 1..40),
        ) {
            let mut ranges = Vec::new();
            let mut expected = Vec::new();
            while let Some(&lo) = nums.iter().next() {
                let mut hi = lo;
                while nums.contains(&(hi + 1)) { hi += 1; }
                for n in lo..=hi { nums.remove(&n); expected.push(format!("{prefix}{n}")); }
                ranges.push(if lo == hi { lo.to_string() } else { format!("{lo}-{hi}") });
            }
            let expr = format!("{prefix}[{}]", ranges.join(","));
            prop_assert_eq!(expand(&expr), Ok(expected));
        }

        /// Any input gives names or an error, never a panic, and never more than the bound.
        #[test]
        fn never_panics(s in "[a-c0-9\\[\\]\\-, ]{0,24}") {
            if let Ok(v) = expand_at_most(&s, 1000) {
                prop_assert!(v.len() <= 1000);
            }
        }
    }
}
