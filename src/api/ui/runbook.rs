//! `/runbook`: docs/runbook.md as a page, so the `runbook_url` of every alert in
//! `prometheus/rules.yml` leads somewhere with no docs site (set the `runbook` external label to
//! this page, or to a copy that stays up when reckon is down). Headings get the anchors GitHub
//! gives them, so one link works on either.

use std::sync::LazyLock;

use pulldown_cmark::{html, CowStr, Event, Options, Parser, Tag, TagEnd};

const RUNBOOK: &str = include_str!("../../../docs/runbook.md");

/// The page's body, rendered once.
pub static BODY: LazyLock<String> = LazyLock::new(|| render(RUNBOOK));

/// The anchor GitHub gives a heading: lower case, spaces to hyphens, other punctuation dropped.
fn slug(text: &str) -> String {
    text.trim()
        .to_lowercase()
        .chars()
        .filter(|c| c.is_alphanumeric() || *c == '-' || *c == '_' || *c == ' ')
        .map(|c| if c == ' ' { '-' } else { c })
        .collect()
}

/// Markdown to HTML, each heading with its anchor. The input is reckon's own file; raw HTML in
/// it is rendered as text, not passed through.
fn render(markdown: &str) -> String {
    let events: Vec<Event> = Parser::new_ext(markdown, Options::ENABLE_TABLES)
        .map(|e| match e {
            Event::Html(s) | Event::InlineHtml(s) => Event::Text(s),
            e => e,
        })
        .collect();
    let mut out: Vec<Event> = Vec::with_capacity(events.len());
    let mut i = 0;
    while i < events.len() {
        if let Event::Start(Tag::Heading {
            level,
            id: None,
            classes,
            attrs,
        }) = &events[i]
        {
            let end = events[i..]
                .iter()
                .position(|e| matches!(e, Event::End(TagEnd::Heading(_))))
                .map_or(events.len(), |n| i + n);
            let text: String = events[i + 1..end]
                .iter()
                .filter_map(|e| match e {
                    Event::Text(t) | Event::Code(t) => Some(t.as_ref()),
                    _ => None,
                })
                .collect();
            out.push(Event::Start(Tag::Heading {
                level: *level,
                id: Some(CowStr::from(slug(&text))),
                classes: classes.clone(),
                attrs: attrs.clone(),
            }));
            i += 1;
            continue;
        }
        out.push(events[i].clone());
        i += 1;
    }
    let mut body = String::with_capacity(markdown.len() * 2);
    html::push_html(&mut body, out.into_iter());
    body
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn headings_get_githubs_anchors_and_html_stays_text() {
        let body = render("# A b\n\n### ReckonDown\n\ntext <script>x</script> `code`\n");
        assert!(body.contains("<h1 id=\"a-b\">A b</h1>"), "{body}");
        assert!(
            body.contains("<h3 id=\"reckondown\">ReckonDown</h3>"),
            "{body}"
        );
        assert!(body.contains("&lt;script&gt;"), "{body}");
        assert!(body.contains("<code>code</code>"), "{body}");
    }

    #[test]
    fn the_runbook_has_a_section_per_alert() {
        for line in include_str!("../../../prometheus/rules.yml").lines() {
            if let Some(alert) = line.trim().strip_prefix("- alert: ") {
                let anchor = format!("id=\"{}\"", alert.to_lowercase());
                assert!(BODY.contains(&anchor), "no section for {alert}");
            }
        }
    }
}
