//! The demo's result table: per scenario, what the notes expect, the verdicts expected and
//! concluded, the stub's object count, and PASS or FAIL.

use std::fmt::Write as _;

/// One checkpoint: the verdict expected for an intent at one point of the scenario.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Check {
    pub intent: usize,
    pub expected: String,
    /// The last verdict seen, or why there was none.
    pub concluded: String,
    pub pass: bool,
}

/// The stub's objects for one intent at the end.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ObjectCheck {
    pub intent: usize,
    pub expected: usize,
    pub actual: usize,
}

#[derive(Clone, Debug, PartialEq)]
pub struct Row {
    pub name: String,
    pub source: String,
    pub notes: String,
    pub checks: Vec<Check>,
    pub objects: Vec<ObjectCheck>,
    /// Hints for a failing row (a report reckon refused, a missing contract).
    pub problems: Vec<String>,
    pub secs: f64,
}

impl Row {
    pub fn pass(&self) -> bool {
        !self.checks.is_empty()
            && self.checks.iter().all(|c| c.pass)
            && self.objects.iter().all(|o| o.expected == o.actual)
    }
}

fn intent_label(i: usize, multi: bool) -> String {
    if multi {
        format!("[{}] ", i + 1)
    } else {
        String::new()
    }
}

/// Renders the table. Each scenario takes a block: its name and result, what the notes expect,
/// then one line per checkpoint (expected, and what reckon concluded when it differs).
pub fn render(rows: &[Row]) -> String {
    let mut out = String::new();
    let passed = rows.iter().filter(|r| r.pass()).count();
    let _ = writeln!(
        out,
        "{:>3}  {:<6} {:<72} time",
        "#", "result", "scenario (source)"
    );
    let _ = writeln!(out, "{}", "-".repeat(100));
    for (n, r) in rows.iter().enumerate() {
        let result = if r.pass() { "PASS" } else { "FAIL" };
        let title = format!("{} ({})", r.name, r.source);
        let _ = writeln!(
            out,
            "{:>3}  {:<6} {:<72} {:.1}s",
            n + 1,
            result,
            title,
            r.secs
        );
        let _ = writeln!(out, "{:>11}notes expect: {}", "", r.notes);
        let multi = r.checks.iter().any(|c| c.intent > 0);
        for c in &r.checks {
            let mark = if c.pass { "ok " } else { "XX " };
            let label = intent_label(c.intent, multi);
            let _ = writeln!(out, "{:>11}{mark}{label}expected:  {}", "", c.expected);
            let _ = writeln!(out, "{:>11}   {label}concluded: {}", "", c.concluded);
        }
        if !r.objects.is_empty() {
            let text: Vec<String> = r
                .objects
                .iter()
                .map(|o| {
                    format!(
                        "{}{} expected, {} held",
                        intent_label(o.intent, multi),
                        o.expected,
                        o.actual
                    )
                })
                .collect();
            let mark = if r.objects.iter().all(|o| o.expected == o.actual) {
                "ok "
            } else {
                "XX "
            };
            let _ = writeln!(out, "{:>11}{mark}stub objects: {}", "", text.join("; "));
        }
        for p in &r.problems {
            let _ = writeln!(out, "{:>11}!! {p}", "");
        }
    }
    let _ = writeln!(out, "{}", "-".repeat(100));
    let _ = writeln!(
        out,
        "{passed}/{} scenarios pass{}",
        rows.len(),
        if passed == rows.len() {
            ""
        } else {
            ": reckon's conclusions differ from the notes'"
        }
    );
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn row(pass: bool, objects_ok: bool) -> Row {
        Row {
            name: "lost response".into(),
            source: "note 1".into(),
            notes: "unknown".into(),
            checks: vec![Check {
                intent: 0,
                expected: "unknown / wait / -".into(),
                concluded: if pass {
                    "unknown / wait / -".into()
                } else {
                    "unknown / retry_same_key / -".into()
                },
                pass,
            }],
            objects: vec![ObjectCheck {
                intent: 0,
                expected: 1,
                actual: if objects_ok { 1 } else { 2 },
            }],
            problems: vec![],
            secs: 1.0,
        }
    }

    #[test]
    fn a_row_passes_only_when_verdicts_and_objects_match() {
        assert!(row(true, true).pass());
        assert!(!row(false, true).pass());
        assert!(!row(true, false).pass());
        let mut empty = row(true, true);
        empty.checks.clear();
        assert!(!empty.pass(), "a row that checked nothing proves nothing");
    }

    #[test]
    fn render_marks_failures_and_counts() {
        let text = render(&[row(true, true), row(false, true)]);
        assert!(text.contains("PASS"), "{text}");
        assert!(text.contains("FAIL"), "{text}");
        assert!(
            text.contains("concluded: unknown / retry_same_key / -"),
            "{text}"
        );
        assert!(text.contains("1/2 scenarios pass"), "{text}");
    }
}
