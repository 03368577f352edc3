//! The audit report as a person reads it (text) or a spreadsheet takes it (CSV). The JSON form
//! is the `Report` struct itself.

use std::fmt::Write;

use crate::store::Report;

pub fn text(r: &Report) -> String {
    let mut s = String::new();
    let since = r.since.as_deref().unwrap_or("the beginning");
    let _ = writeln!(
        s,
        "reckon audit report: intents active since {since} (generated {})",
        r.generated_at
    );
    let _ = writeln!(
        s,
        "intents {}   attempts {}   findings {}",
        r.intents, r.attempts, r.findings
    );
    let section =
        |s: &mut String, title: &str, map: &std::collections::BTreeMap<String, u64>, all: bool| {
            let _ = writeln!(s, "\n{title}");
            let rows: Vec<_> = map.iter().filter(|(_, &n)| all || n > 0).collect();
            if rows.is_empty() {
                let _ = writeln!(s, "  (none)");
            }
            for (k, n) in rows {
                let _ = writeln!(s, "  {k:<32} {n:>8}");
            }
        };
    section(&mut s, "by state", &r.by_state, true);
    section(&mut s, "by decision", &r.by_decision, true);
    section(&mut s, "attempts by class", &r.by_attempt_class, true);
    section(&mut s, "findings by kind", &r.by_finding, false);
    section(&mut s, "findings by severity", &r.by_severity, true);
    let _ = writeln!(s, "\nby tool");
    if r.by_tool.is_empty() {
        let _ = writeln!(s, "  (none)");
    } else {
        let _ = writeln!(
            s,
            "  {:<28} {:>8} {:>8} {:>10} {:>8} {:>8} {:>9} {:>10}",
            "tool",
            "intents",
            "attempts",
            "completed",
            "unknown",
            "pending",
            "findings",
            "duplicates"
        );
        for (tool, t) in &r.by_tool {
            let st = |k: &str| t.by_state.get(k).copied().unwrap_or(0);
            let _ = writeln!(
                s,
                "  {tool:<28} {:>8} {:>8} {:>10} {:>8} {:>8} {:>9} {:>10}",
                t.intents,
                t.attempts,
                st("completed"),
                st("unknown"),
                st("pending"),
                t.findings,
                t.duplicate_effects
            );
        }
    }
    let esc = |k: &str| r.escalations.get(k).copied().unwrap_or(0);
    let _ = writeln!(
        s,
        "\nescalations   open {}   claimed {}   resolved {}",
        esc("open"),
        esc("claimed"),
        esc("resolved")
    );
    s
}

/// Long format, one count per row (`section,key,count`), so new keys never shift columns.
pub fn csv(r: &Report) -> String {
    let mut s = String::from("section,key,count\n");
    let mut row = |section: &str, key: &str, n: u64| {
        let _ = writeln!(s, "{},{},{n}", field(section), field(key));
    };
    row("total", "intents", r.intents);
    row("total", "attempts", r.attempts);
    row("total", "findings", r.findings);
    for (k, n) in &r.by_state {
        row("state", k, *n);
    }
    for (k, n) in &r.by_decision {
        row("decision", k, *n);
    }
    for (k, n) in &r.by_attempt_class {
        row("attempt_class", k, *n);
    }
    for (k, n) in &r.by_finding {
        row("finding", k, *n);
    }
    for (k, n) in &r.by_severity {
        row("severity", k, *n);
    }
    for (tool, t) in &r.by_tool {
        let section = format!("tool:{tool}");
        row(&section, "intents", t.intents);
        row(&section, "attempts", t.attempts);
        row(&section, "findings", t.findings);
        row(&section, "duplicate_effects", t.duplicate_effects);
        for (k, n) in &t.by_state {
            row(&section, &format!("state:{k}"), *n);
        }
    }
    for (k, n) in &r.escalations {
        row("escalations", k, *n);
    }
    s
}

/// RFC 4180 quoting, only when needed (tool names come from spans and may hold anything).
fn field(v: &str) -> String {
    if v.contains([',', '"', '\n', '\r']) {
        format!("\"{}\"", v.replace('"', "\"\""))
    } else {
        v.to_string()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::Timestamp;
    use crate::store::ToolReport;

    fn sample() -> Report {
        let mut r = Report::empty(
            Some(Timestamp::from_secs(1_780_000_000)),
            Timestamp::from_secs(1_780_086_400),
        );
        r.intents = 3;
        r.attempts = 5;
        r.findings = 1;
        *r.by_state.get_mut("completed").unwrap() = 2;
        *r.by_state.get_mut("unknown").unwrap() = 1;
        *r.by_finding.get_mut("duplicate_effect").unwrap() = 1;
        let mut t = ToolReport {
            intents: 3,
            attempts: 5,
            findings: 1,
            duplicate_effects: 1,
            ..ToolReport::default()
        };
        *t.by_state.get_mut("completed").unwrap() = 2;
        r.by_tool.insert("issue,refund".into(), t);
        r
    }

    #[test]
    fn text_shows_totals_nonzero_findings_and_tools() {
        let t = text(&sample());
        assert!(t.contains("intents 3   attempts 5   findings 1"), "{t}");
        assert!(t.contains("duplicate_effect"), "{t}");
        assert!(
            !t.contains("stuck_pending"),
            "zero finding kinds are left out of the text: {t}"
        );
        assert!(
            t.lines()
                .any(|l| l.trim_start().starts_with("issue,refund") && l.contains(" 2 ")),
            "{t}"
        );
    }

    #[test]
    fn csv_is_long_format_and_quotes_fields() {
        let c = csv(&sample());
        let lines: Vec<&str> = c.lines().collect();
        assert_eq!(lines[0], "section,key,count");
        assert!(lines.contains(&"total,intents,3"));
        assert!(lines.contains(&"state,completed,2"));
        assert!(
            lines.contains(&"finding,stuck_pending,0"),
            "every kind, zero included"
        );
        assert!(lines.contains(&"\"tool:issue,refund\",duplicate_effects,1"));
        assert!(lines
            .iter()
            .skip(1)
            .all(|l| l.rsplit(',').next().unwrap().parse::<u64>().is_ok()));
    }
}
