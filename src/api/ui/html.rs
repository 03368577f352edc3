//! The little HTML kit the pages are written with: escaping, URL components, times, the page
//! shell and the response headers. No template engine: every value from outside (intent ids,
//! keys, object ids, notes, names) goes through [`E`] or [`U`].

use std::fmt::{self, Display, Write as _};

use axum::http::{header, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};

use crate::codec::rfc3339;
use crate::model::Timestamp;

/// Text escaped for HTML (element content and quoted attribute values) and for SVG/XML.
pub struct E<'a>(pub &'a str);

impl Display for E<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let mut rest = self.0;
        while let Some(i) = rest.find(['&', '<', '>', '"', '\'']) {
            f.write_str(&rest[..i])?;
            f.write_str(match rest.as_bytes()[i] {
                b'&' => "&amp;",
                b'<' => "&lt;",
                b'>' => "&gt;",
                b'"' => "&quot;",
                _ => "&#39;",
            })?;
            rest = &rest[i + 1..];
        }
        f.write_str(rest)
    }
}

/// A URL path segment or query value: everything but RFC 3986's unreserved characters is
/// percent-encoded. The result is safe inside a quoted attribute too.
pub struct U<'a>(pub &'a str);

impl Display for U<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for b in self.0.bytes() {
            if b.is_ascii_alphanumeric() || matches!(b, b'-' | b'.' | b'_' | b'~') {
                f.write_char(b as char)?;
            } else {
                write!(f, "%{b:02X}")?;
            }
        }
        Ok(())
    }
}

/// A time for people: `2026-12-01 00:07:25.487Z`, in a `<time>` element carrying the full
/// RFC 3339 value (nanoseconds) for copying and for tests.
pub fn when(t: Timestamp) -> String {
    let full = rfc3339(t);
    format!(
        "<time datetime=\"{}\">{}</time>",
        E(&full),
        E(&short_time(&full))
    )
}

/// `2026-12-01T00:07:25.487051686Z` -> `2026-12-01 00:07:25.487Z`.
pub fn short_time(rfc: &str) -> String {
    let s = rfc.replacen('T', " ", 1);
    match (s.find('.'), s.ends_with('Z')) {
        (Some(dot), true) if s.len() > dot + 4 => format!("{}Z", &s[..dot + 4]),
        _ => s,
    }
}

/// A duration for people, at the precision that matters: `850 ms`, `2.4 s`, `3 min 5 s`,
/// `4 h 10 min`, `2 d 3 h`.
pub fn human_duration(ns: i64) -> String {
    let ns = ns.max(0);
    let ms = ns / 1_000_000;
    let s = ns / 1_000_000_000;
    match s {
        0 if ms == 0 => format!("{} µs", ns / 1000),
        0 => format!("{ms} ms"),
        1..=9 => format!("{:.1} s", ns as f64 / 1e9),
        10..=59 => format!("{s} s"),
        60..=3599 => format!("{} min {} s", s / 60, s % 60),
        3600..=86_399 => format!("{} h {} min", s / 3600, (s % 3600) / 60),
        _ => format!("{} d {} h", s / 86_400, (s % 86_400) / 3600),
    }
}

/// The page shell: header with the way back to the queue, then `body`.
pub fn page(title: &str, body: &str) -> String {
    let mut out = String::with_capacity(body.len() + 1024);
    let _ = write!(
        out,
        "<!doctype html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">\
         <meta name=\"viewport\" content=\"width=device-width, initial-scale=1\">\
         <title>{} · reckon</title>\
         <link rel=\"icon\" type=\"image/svg+xml\" href=\"/ui/favicon.svg\">\
         <link rel=\"stylesheet\" href=\"{}\"></head><body>\
         <header class=\"top\"><a class=\"brand\" href=\"/\">reckon</a>\
         <span class=\"sub\">escalation queue</span>\
         <nav><a href=\"/\">Queue</a> <a href=\"/?status=resolved\">Resolved</a> \
         <a href=\"/metrics\">Metrics</a></nav></header>\n<main>{body}</main></body></html>\n",
        E(title),
        E(&super::css_href()),
    );
    out
}

/// An HTML response with headers that keep the page to itself: no script at all, styles and
/// forms only from this origin, never framed, no referrer leaking intent ids elsewhere.
pub fn respond(status: StatusCode, html: String) -> Response {
    let mut r = (status, html).into_response();
    let h = r.headers_mut();
    h.insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("text/html; charset=utf-8"),
    );
    h.insert(
        header::CONTENT_SECURITY_POLICY,
        HeaderValue::from_static(
            "default-src 'none'; style-src 'self'; img-src 'self' data:; form-action 'self'; \
             frame-ancestors 'none'; base-uri 'none'",
        ),
    );
    h.insert(
        header::X_CONTENT_TYPE_OPTIONS,
        HeaderValue::from_static("nosniff"),
    );
    h.insert(
        header::REFERRER_POLICY,
        HeaderValue::from_static("no-referrer"),
    );
    h.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-store"));
    r
}

/// A page that says what went wrong, with the status it implies.
pub fn error_page(status: StatusCode, message: &str) -> Response {
    let body = format!(
        "<h1>{}</h1><p class=\"error\">{}</p><p><a href=\"/\">Back to the queue</a></p>",
        status.as_u16(),
        E(message)
    );
    respond(status, page(&status.to_string(), &body))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn escapes_markup_and_quotes() {
        assert_eq!(
            E(r#"<script>alert("x")</script> & 'y'"#).to_string(),
            "&lt;script&gt;alert(&quot;x&quot;)&lt;/script&gt; &amp; &#39;y&#39;"
        );
        assert_eq!(E("plain ünïcode").to_string(), "plain ünïcode");
        assert_eq!(E("").to_string(), "");
    }

    #[test]
    fn url_components_keep_only_unreserved() {
        assert_eq!(U("esc_ab12_1").to_string(), "esc_ab12_1");
        assert_eq!(
            U("a b/\"<>?&=#é").to_string(),
            "a%20b%2F%22%3C%3E%3F%26%3D%23%C3%A9"
        );
    }

    #[test]
    fn times_and_durations_read_well() {
        assert_eq!(
            short_time("2026-12-01T00:07:25.487051686Z"),
            "2026-12-01 00:07:25.487Z"
        );
        assert_eq!(human_duration(850_000_000), "850 ms");
        assert_eq!(human_duration(2_400_000_000), "2.4 s");
        assert_eq!(human_duration(185_000_000_000), "3 min 5 s");
        assert_eq!(human_duration(15_000_000_000_000), "4 h 10 min");
        assert_eq!(human_duration(-5), "0 µs");
        let t = when(Timestamp::from_secs(1_800_000_000));
        assert!(
            t.starts_with("<time datetime=\"2027-01-15T08:00:00.000000000Z\">"),
            "{t}"
        );
    }

    #[test]
    fn responses_forbid_scripts_and_framing() {
        let r = respond(StatusCode::OK, page("x", "<p>y</p>"));
        let csp = r.headers()[header::CONTENT_SECURITY_POLICY]
            .to_str()
            .unwrap();
        assert!(csp.contains("default-src 'none'") && !csp.contains("script-src"));
        assert!(csp.contains("frame-ancestors 'none'"));
        assert_eq!(r.headers()[header::X_CONTENT_TYPE_OPTIONS], "nosniff");
    }
}
