//! The evidence of one intent on a time axis, as inline SVG: one lane per attempt (a bar from
//! send to answer), a lane of read-backs, one lane per downstream object (each status
//! observation a dot), a lane of findings, and the escalation's own moments (opened, claimed,
//! resolved) as vertical rules. Colours come from classes in `reckon.css`; every text is escaped
//! and hover titles carry the full values.

use std::fmt::Write as _;

use super::html::E;
use crate::model::Timestamp;

pub enum Shape {
    /// From `at` to the end (an attempt: sent, answered or given up on).
    Bar(Timestamp),
    Dot,
    /// Known only from a response, not from the downstream's own records.
    HollowDot,
    Diamond,
    Triangle,
}

pub struct Item {
    pub at: Timestamp,
    pub shape: Shape,
    /// CSS tone: `ok`, `bad`, `wait`, `unknown`, `muted`, `conflict`, `critical`, `high`, `medium`.
    pub tone: &'static str,
    /// Short text drawn beside the mark (skipped where it would overlap the previous one).
    pub label: String,
    /// The full story, shown on hover.
    pub tip: String,
}

pub struct Lane {
    pub name: String,
    pub tip: String,
    pub items: Vec<Item>,
    /// Draw a rule from the first to the last item (an object's life).
    pub life: bool,
}

#[derive(Default)]
pub struct Timeline {
    pub lanes: Vec<Lane>,
    /// The escalation's moments: (time, label).
    pub moments: Vec<(Timestamp, String)>,
}

const WIDTH: f64 = 1000.0;
const LABELS: f64 = 170.0;
const PLOT_LEFT: f64 = LABELS + 14.0;
const PLOT_RIGHT: f64 = WIDTH - 24.0;
const LANE: f64 = 30.0;
const TOP: f64 = 40.0;
const AXIS: f64 = 36.0;
/// Rough width of one character of the 11 px labels, for overlap checks.
const CHAR: f64 = 6.4;

impl Timeline {
    fn range(&self) -> Option<(i64, i64)> {
        let times = self
            .lanes
            .iter()
            .flat_map(|l| &l.items)
            .flat_map(|i| match i.shape {
                Shape::Bar(end) => vec![i.at.0, end.0],
                _ => vec![i.at.0],
            })
            .chain(self.moments.iter().map(|(t, _)| t.0));
        let (lo, hi) = times.fold((i64::MAX, i64::MIN), |(lo, hi), t| (lo.min(t), hi.max(t)));
        (lo <= hi).then_some((lo, hi))
    }

    /// The SVG, or `None` when there is nothing to place on the axis.
    pub fn render(&self) -> Option<String> {
        let (t0, t1) = self.range()?;
        // At least 1 ms wide, with a little air on both sides.
        let span = (t1 - t0).max(1_000_000);
        let pad = span / 25;
        let (from, to) = (t0 - pad, t0 + span + pad);
        let x = |t: Timestamp| {
            PLOT_LEFT + (t.0 - from) as f64 / (to - from) as f64 * (PLOT_RIGHT - PLOT_LEFT)
        };
        let height = TOP + LANE * self.lanes.len() as f64 + AXIS;
        let bottom = TOP + LANE * self.lanes.len() as f64;
        let mut s = String::with_capacity(4096);
        let _ = write!(
            s,
            "<svg class=\"timeline\" viewBox=\"0 0 {WIDTH} {height}\" role=\"img\" \
             aria-label=\"evidence on a time axis\" xmlns=\"http://www.w3.org/2000/svg\">"
        );
        // Lanes: zebra background and name.
        for (n, lane) in self.lanes.iter().enumerate() {
            let y = TOP + LANE * n as f64;
            let _ = write!(
                s,
                "<g class=\"lane\"><title>{}</title><rect class=\"lane-bg{}\" x=\"0\" y=\"{y}\" \
                 width=\"{WIDTH}\" height=\"{LANE}\"/><text class=\"lane-name\" x=\"8\" y=\"{}\">{}</text></g>",
                E(&lane.tip),
                if n % 2 == 0 { "" } else { " odd" },
                y + LANE / 2.0 + 4.0,
                E(&clip(&lane.name, 25)),
            );
        }
        // The axis: ticks at a round step, labelled as offsets from the first event.
        let step = tick_step(to - from);
        let mut t = t0 + (from - t0).div_euclid(step) * step;
        while t <= to {
            if t >= from {
                let tx = x(Timestamp(t));
                let _ = write!(
                    s,
                    "<line class=\"tick\" x1=\"{tx:.1}\" y1=\"{TOP}\" x2=\"{tx:.1}\" y2=\"{}\"/>\
                     <text class=\"tick-label\" x=\"{tx:.1}\" y=\"{}\" text-anchor=\"middle\">{}</text>",
                    bottom + 4.0,
                    bottom + 18.0,
                    E(&offset_label(t - t0)),
                );
            }
            t += step;
        }
        let _ = write!(
            s,
            "<line class=\"axis\" x1=\"{PLOT_LEFT}\" y1=\"{bottom}\" x2=\"{PLOT_RIGHT}\" y2=\"{bottom}\"/>"
        );
        // The escalation's moments. Labels right of their rule, or left of it near the right edge; on the first of two
        // rows where they overlap no other label.
        let mut rows: [Vec<(f64, f64)>; 2] = Default::default();
        for (at, label) in &self.moments {
            let mx = x(*at);
            let width = label.chars().count() as f64 * CHAR;
            let (anchor, lx, extent) = if mx + 4.0 + width > WIDTH - 4.0 {
                ("end", mx - 4.0, (mx - 4.0 - width, mx - 4.0))
            } else {
                ("start", mx + 4.0, (mx + 4.0, mx + 4.0 + width))
            };
            let clear = |r: &Vec<(f64, f64)>| {
                r.iter()
                    .all(|(a, b)| extent.1 + 6.0 < *a || extent.0 - 6.0 > *b)
            };
            let row = if clear(&rows[0]) { 0 } else { 1 };
            rows[row].push(extent);
            let _ = write!(
                s,
                "<g class=\"moment\"><title>{}</title><line x1=\"{mx:.1}\" y1=\"{}\" x2=\"{mx:.1}\" y2=\"{bottom}\"/>\
                 <text x=\"{lx:.1}\" y=\"{}\" text-anchor=\"{anchor}\">{}</text></g>",
                E(label),
                if row == 0 { 6.0 } else { 20.0 },
                if row == 0 { 16.0 } else { 30.0 },
                E(label),
            );
        }
        // The marks.
        for (n, lane) in self.lanes.iter().enumerate() {
            let mid = TOP + LANE * n as f64 + LANE / 2.0;
            if lane.life && lane.items.len() > 1 {
                let a = lane.items.iter().map(|i| i.at).min().unwrap_or_default();
                let b = lane.items.iter().map(|i| i.at).max().unwrap_or_default();
                let _ = write!(
                    s,
                    "<line class=\"life\" x1=\"{:.1}\" y1=\"{mid}\" x2=\"{:.1}\" y2=\"{mid}\"/>",
                    x(a),
                    x(b)
                );
            }
            let mut items: Vec<&Item> = lane.items.iter().collect();
            items.sort_by_key(|i| i.at);
            // Shapes first, each with its hover title; remember where each one lies.
            let mut taken: Vec<(f64, f64)> = Vec::with_capacity(items.len());
            for item in &items {
                let ix = x(item.at);
                let _ = write!(
                    s,
                    "<g class=\"mark t-{}\"><title>{}</title>",
                    item.tone,
                    E(&item.tip)
                );
                let extent = match item.shape {
                    Shape::Bar(end) => {
                        let w = (x(end) - ix).max(3.0);
                        let _ = write!(
                            s,
                            "<rect x=\"{ix:.1}\" y=\"{}\" width=\"{w:.1}\" height=\"12\" rx=\"2\"/>",
                            mid - 6.0
                        );
                        (ix, ix + w)
                    }
                    Shape::Dot => {
                        let _ = write!(s, "<circle cx=\"{ix:.1}\" cy=\"{mid}\" r=\"5\"/>");
                        (ix - 5.0, ix + 5.0)
                    }
                    Shape::HollowDot => {
                        let _ = write!(
                            s,
                            "<circle class=\"hollow\" cx=\"{ix:.1}\" cy=\"{mid}\" r=\"4.5\"/>"
                        );
                        (ix - 5.0, ix + 5.0)
                    }
                    Shape::Diamond => {
                        let _ = write!(
                            s,
                            "<path d=\"M{ix:.1} {} l6 6 l-6 6 l-6 -6 z\"/>",
                            mid - 6.0
                        );
                        (ix - 6.0, ix + 6.0)
                    }
                    Shape::Triangle => {
                        let _ = write!(s, "<path d=\"M{ix:.1} {} l6 11 l-12 0 z\"/>", mid - 6.0);
                        (ix - 6.0, ix + 6.0)
                    }
                };
                s.push_str("</g>");
                taken.push(extent);
            }
            // Then labels: right of the mark, else left of it, else none (the title has it),
            // never over another mark or label of the lane.
            for (n, item) in items.iter().enumerate() {
                if item.label.is_empty() {
                    continue;
                }
                let (left, right) = taken[n];
                let width = item.label.chars().count() as f64 * CHAR;
                let free = |a: f64, b: f64| {
                    a >= PLOT_LEFT - 10.0
                        && b <= WIDTH - 2.0
                        && taken
                            .iter()
                            .enumerate()
                            .all(|(m, (x0, x1))| m == n || b + 2.0 < *x0 || a - 2.0 > *x1)
                };
                let place = if free(right + 4.0, right + 4.0 + width) {
                    Some((right + 4.0, "start", (right + 4.0, right + 4.0 + width)))
                } else if free(left - 4.0 - width, left - 4.0) {
                    Some((left - 4.0, "end", (left - 4.0 - width, left - 4.0)))
                } else {
                    None
                };
                if let Some((lx, anchor, extent)) = place {
                    let _ = write!(
                        s,
                        "<text class=\"mark-label\" x=\"{lx:.1}\" y=\"{}\" text-anchor=\"{anchor}\">{}</text>",
                        mid + 4.0,
                        E(&item.label)
                    );
                    taken.push(extent);
                }
            }
        }
        s.push_str("</svg>");
        Some(s)
    }
}

fn clip(s: &str, n: usize) -> String {
    if s.chars().count() <= n {
        s.to_string()
    } else {
        let head: String = s.chars().take(n - 1).collect();
        format!("{head}…")
    }
}

/// A round tick step giving about six ticks over `span` nanoseconds.
fn tick_step(span: i64) -> i64 {
    const MS: i64 = 1_000_000;
    const S: i64 = 1000 * MS;
    const STEPS: [i64; 28] = [
        MS / 10,
        MS / 5,
        MS / 2,
        MS,
        2 * MS,
        5 * MS,
        10 * MS,
        20 * MS,
        50 * MS,
        100 * MS,
        200 * MS,
        500 * MS,
        S,
        2 * S,
        5 * S,
        10 * S,
        15 * S,
        30 * S,
        60 * S,
        120 * S,
        300 * S,
        600 * S,
        1800 * S,
        3600 * S,
        7200 * S,
        6 * 3600 * S,
        12 * 3600 * S,
        24 * 3600 * S,
    ];
    let want = span / 6;
    STEPS
        .iter()
        .copied()
        .find(|s| *s >= want)
        .unwrap_or_else(|| (want / (24 * 3600 * S) + 1) * 24 * 3600 * S)
}

/// An offset from the first event, as a tick label: `0`, `+250 ms`, `+1.5 s`, `+2 min`.
fn offset_label(ns: i64) -> String {
    if ns == 0 {
        return "0".into();
    }
    let sign = if ns < 0 { "−" } else { "+" };
    let ns = ns.abs();
    let body = if ns < 1_000_000 {
        format!("{} µs", ns / 1000)
    } else if ns < 1_000_000_000 {
        format!("{} ms", ns / 1_000_000)
    } else if ns < 60_000_000_000 {
        let s = format!("{:.3}", ns as f64 / 1e9);
        format!("{} s", s.trim_end_matches('0').trim_end_matches('.'))
    } else {
        let s = ns / 1_000_000_000;
        let (big, small) = if s < 3600 {
            ((s / 60, "min"), (s % 60, "s"))
        } else if s < 86_400 {
            ((s / 3600, "h"), ((s % 3600) / 60, "min"))
        } else {
            ((s / 86_400, "d"), ((s % 86_400) / 3600, "h"))
        };
        if small.0 == 0 {
            format!("{} {}", big.0, big.1)
        } else {
            format!("{} {} {} {}", big.0, big.1, small.0, small.1)
        }
    };
    format!("{sign}{body}")
}

#[cfg(test)]
mod tests {
    use super::*;

    fn item(at: i64, shape: Shape, label: &str) -> Item {
        Item {
            at: Timestamp(at),
            shape,
            tone: "ok",
            label: label.into(),
            tip: format!("tip <{label}>"),
        }
    }

    #[test]
    fn empty_timeline_draws_nothing() {
        assert!(Timeline::default().render().is_none());
    }

    #[test]
    fn marks_are_placed_in_time_order_and_escaped() {
        let s = 1_000_000_000i64;
        let t = Timeline {
            lanes: vec![
                Lane {
                    name: "attempt 1".into(),
                    tip: "k".into(),
                    items: vec![item(0, Shape::Bar(Timestamp(s)), "unknown")],
                    life: false,
                },
                Lane {
                    name: "<img src=x>".into(),
                    tip: "\"quoted\"".into(),
                    items: vec![
                        item(3 * s, Shape::Dot, "succeeded"),
                        item(2 * s, Shape::Dot, "pending"),
                    ],
                    life: true,
                },
            ],
            moments: vec![(Timestamp(2 * s), "claimed by <b>".into())],
        };
        let svg = t.render().unwrap();
        assert!(svg.starts_with("<svg") && svg.ends_with("</svg>"));
        assert!(!svg.contains("<img") && !svg.contains("<b>"), "{svg}");
        assert!(svg.contains("&lt;img src=x&gt;") && svg.contains("&quot;quoted&quot;"));
        assert!(svg.contains("claimed by &lt;b&gt;"));
        // The pending dot lies left of the succeeded one.
        let p = svg.find(">pending<").unwrap();
        let q = svg.find(">succeeded<").unwrap();
        assert!(p < q);
        assert!(svg.contains("class=\"life\""));
        // Ticks labelled as offsets from the first event.
        assert!(svg.contains(">0<") && svg.contains(">+1 s<"), "{svg}");
    }

    #[test]
    fn close_moments_take_two_rows() {
        let s = 1_000_000_000i64;
        let t = Timeline {
            lanes: vec![Lane {
                name: "attempt 1".into(),
                tip: String::new(),
                items: vec![item(0, Shape::Dot, "x")],
                life: false,
            }],
            moments: vec![
                (Timestamp(0), "escalation opened".into()),
                (Timestamp(60 * s), "claimed by ana".into()),
                (Timestamp(61 * s), "resolved by ana".into()),
            ],
        };
        let svg = t.render().unwrap();
        let y_of = |label: &str| {
            let at = svg.find(&format!(">{label}</text>")).unwrap();
            let open = svg[..at].rfind("<text").unwrap();
            let tag = &svg[open..at];
            let y = tag.split("y=\"").nth(1).unwrap();
            y[..y.find('"').unwrap()].to_string()
        };
        assert_eq!(y_of("escalation opened"), "16");
        assert_ne!(y_of("claimed by ana"), y_of("resolved by ana"), "{svg}");
    }

    #[test]
    fn tick_steps_and_labels_are_round() {
        assert_eq!(tick_step(3_000_000_000), 500_000_000);
        assert_eq!(tick_step(6 * 3600 * 1_000_000_000), 3600 * 1_000_000_000);
        assert_eq!(offset_label(1_500_000_000), "+1.5 s");
        assert_eq!(offset_label(250_000_000), "+250 ms");
        assert_eq!(offset_label(120_000_000_000), "+2 min");
        assert_eq!(offset_label(-2_000_000_000), "−2 s");
        assert_eq!(offset_label(90_000_000_000_000), "+1 d 1 h");
    }
}
