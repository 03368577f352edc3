//! The re-audit's output, written as it goes: text for a person, one JSON document (changes
//! streamed into its array, totals at the end), or CSV (one row per change, then one
//! `(totals)` row).

use std::io::Write;

use super::{Change, FindingChange, Totals};

#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Format {
    #[default]
    Text,
    Json,
    Csv,
}

pub struct Printer<W: Write> {
    out: W,
    format: Format,
    first: bool,
}

fn opt(s: &Option<String>) -> &str {
    s.as_deref().unwrap_or("-")
}

fn kinds(fs: &[FindingChange]) -> String {
    fs.iter()
        .map(|f| match f.subject.as_str() {
            "" => f.kind.clone(),
            s => format!("{}({s})", f.kind),
        })
        .collect::<Vec<_>>()
        .join(" ")
}

/// One CSV field, quoted when it needs to be (RFC 4180).
fn field(s: &str) -> String {
    if s.contains([',', '"', '\n', '\r']) {
        format!("\"{}\"", s.replace('"', "\"\""))
    } else {
        s.to_string()
    }
}

impl<W: Write> Printer<W> {
    pub fn new(out: W, format: Format) -> Self {
        Printer {
            out,
            format,
            first: true,
        }
    }

    /// What is compared with what, before the first change.
    pub fn begin(
        &mut self,
        baseline: &str,
        proposed: &str,
        since: Option<&str>,
    ) -> std::io::Result<()> {
        match self.format {
            Format::Text => writeln!(
                self.out,
                "reckon reaudit: stored history under {proposed} compared with {baseline}, intents active since {}\n(nothing is changed)\n",
                since.unwrap_or("the beginning")
            ),
            Format::Json => write!(
                self.out,
                "{{\"baseline\":{},\"contracts\":{},\"since\":{},\"changes\":[",
                serde_json::to_string(baseline).unwrap_or_default(),
                serde_json::to_string(proposed).unwrap_or_default(),
                serde_json::to_string(&since).unwrap_or_else(|_| "null".into())
            ),
            Format::Csv => writeln!(
                self.out,
                "intent_id,tool,contract_before,contract_after,state_before,state_after,decision_before,decision_after,findings_added,findings_removed"
            ),
        }
    }

    pub fn change(&mut self, c: &Change) -> std::io::Result<()> {
        match self.format {
            Format::Text => {
                writeln!(self.out, "{}  ({})", c.intent_id, opt(&c.tool))?;
                if c.before.contract != c.after.contract {
                    writeln!(
                        self.out,
                        "  contract  {} -> {}",
                        opt(&c.before.contract),
                        opt(&c.after.contract)
                    )?;
                }
                let arrow = |a: &Option<String>, b: &Option<String>| {
                    if a == b {
                        format!("{} (unchanged)", opt(a))
                    } else {
                        format!("{} -> {}", opt(a), opt(b))
                    }
                };
                writeln!(
                    self.out,
                    "  state     {}",
                    arrow(&c.before.state, &c.after.state)
                )?;
                writeln!(
                    self.out,
                    "  decision  {}",
                    arrow(&c.before.decision, &c.after.decision)
                )?;
                for f in &c.findings_added {
                    writeln!(self.out, "  + {} [{}] {}", f.kind, f.severity, f.detail)?;
                }
                for f in &c.findings_removed {
                    writeln!(self.out, "  - {} [{}] {}", f.kind, f.severity, f.detail)?;
                }
                Ok(())
            }
            Format::Json => {
                if !self.first {
                    write!(self.out, ",")?;
                }
                self.first = false;
                let doc = serde_json::to_string(c).map_err(std::io::Error::other)?;
                write!(self.out, "\n{doc}")
            }
            Format::Csv => {
                let row = [
                    field(&c.intent_id),
                    field(opt(&c.tool)),
                    field(opt(&c.before.contract)),
                    field(opt(&c.after.contract)),
                    field(opt(&c.before.state)),
                    field(opt(&c.after.state)),
                    field(opt(&c.before.decision)),
                    field(opt(&c.after.decision)),
                    field(&kinds(&c.findings_added)),
                    field(&kinds(&c.findings_removed)),
                ];
                writeln!(self.out, "{}", row.join(","))
            }
        }
    }

    pub fn end(mut self, t: &Totals) -> std::io::Result<W> {
        let nonzero = |m: &std::collections::BTreeMap<String, u64>| -> String {
            let parts: Vec<String> = m
                .iter()
                .filter(|(_, n)| **n > 0)
                .map(|(k, n)| format!("{k}={n}"))
                .collect();
            if parts.is_empty() {
                "none".into()
            } else {
                parts.join(" ")
            }
        };
        match self.format {
            Format::Text => {
                if t.changed == 0 {
                    writeln!(self.out, "no verdict would change")?;
                } else {
                    writeln!(self.out)?;
                }
                writeln!(
                    self.out,
                    "totals: {} intents re-audited, {} would change ({} state, {} decision, {} contract)",
                    t.intents, t.changed, t.state_changed, t.decision_changed, t.contract_changed
                )?;
                writeln!(
                    self.out,
                    "  findings added    {}",
                    nonzero(&t.findings_added)
                )?;
                writeln!(
                    self.out,
                    "  findings removed  {}",
                    nonzero(&t.findings_removed)
                )?;
                writeln!(
                    self.out,
                    "  states            {}",
                    if t.states.is_empty() {
                        "unchanged".to_string()
                    } else {
                        t.states
                            .iter()
                            .map(|(k, n)| format!("{k}: {n}"))
                            .collect::<Vec<_>>()
                            .join(", ")
                    }
                )?;
            }
            Format::Json => {
                let doc = serde_json::to_string(t).map_err(std::io::Error::other)?;
                writeln!(self.out, "\n],\"totals\":{doc}}}")?;
            }
            Format::Csv => {
                let row = [
                    "(totals)".to_string(),
                    format!("{} of {} changed", t.changed, t.intents),
                    String::new(),
                    format!("{} contract", t.contract_changed),
                    String::new(),
                    format!("{} state", t.state_changed),
                    String::new(),
                    format!("{} decision", t.decision_changed),
                    field(&nonzero(&t.findings_added)),
                    field(&nonzero(&t.findings_removed)),
                ];
                writeln!(self.out, "{}", row.join(","))?;
            }
        }
        self.out.flush()?;
        Ok(self.out)
    }
}
