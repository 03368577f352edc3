//! What pages a person: the `reckon_escalations_unresolved` gauge alert rules read, the store and
//! deadline gauges, and the escalation queue's web pages (queue, evidence, claim and resolve by
//! form post), all through a running reckon. The pages in a real browser: `tests/browser/`.

use super::support::*;

const R: &str = "issue_refund";

/// The seed note's careless resend: a timed-out refund, an empty read-back, a resend under a new
/// key, and both refunds recorded by the downstream. Returns the intent id.
async fn duplicate_refund(s: &Server, intent: &str) -> String {
    let (k1, k2, re1, re2) = (unique("k"), unique("k"), unique("re"), unique("re"));
    let t0 = ago(5.0 * 60.0);
    let refund = |start, secs, key: &str| {
        ToolSpan::new(R, start, secs)
            .intent(intent)
            .key(key)
            .args(refund_args("45.00"))
    };
    let lost = refund(t0, 30.0, &k1).timeout().told("unknown");
    let read = ToolSpan::read(intent, after(t0, 35.0), &[]);
    let resend = refund(after(t0, 36.0), 0.4, &k2)
        .http(200)
        .object(&re2, "succeeded")
        .told("succeeded");
    export_grpc(s, &[&lost, &read]).await;
    export_http(s, &[&resend]).await;
    for (re, key, at) in [(&re2, &k2, 36.3), (&re1, &k1, 50.0)] {
        s.stripe(&stripe_event(
            "refund.created",
            intent,
            re,
            "succeeded",
            4500,
            Some(key),
            after(t0, at),
        ))
        .await;
    }
    let e = s
        .escalation_of(intent, "open")
        .await
        .expect("the duplicate refund opens an escalation");
    e["id"].as_str().unwrap().to_string()
}

fn unresolved(finding: &str, severity: &str) -> String {
    format!("reckon_escalations_unresolved{{tool=\"{R}\",finding=\"{finding}\",severity=\"{severity}\"}}")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn unresolved_gauge_counts_intents_until_a_person_resolves() {
    let s = Server::start().await;
    let dup = unresolved("duplicate_effect", "critical");
    let nkr = unresolved("new_key_retry", "high");
    assert_eq!(
        s.metric(&dup).await,
        None,
        "no series before any escalation"
    );
    assert_eq!(s.metric("reckon_store_up").await, Some(1.0));

    let a = duplicate_refund(&s, &unique("int")).await;
    let b = duplicate_refund(&s, &unique("int")).await;
    assert_eq!(s.metric(&dup).await, Some(2.0));
    assert_eq!(s.metric(&nkr).await, Some(2.0));
    // Medium findings never escalate, so they are no escalation's.
    assert_eq!(
        s.metric(&unresolved("inconclusive_readback_acted_on", "medium"))
            .await,
        None
    );

    // A claim keeps it unresolved.
    let (code, body) = s
        .post_json(
            &format!("/api/v1/escalations/{a}/claim"),
            &serde_json::json!({"by": "ana"}),
        )
        .await;
    assert_eq!(code, 200, "{body}");
    assert_eq!(s.metric(&dup).await, Some(2.0));

    for id in [&a, &b] {
        let (code, body) = s
            .post_json(
                &format!("/api/v1/escalations/{id}/resolve"),
                &serde_json::json!({"by": "ana", "resolution": "reversed_extra_effect"}),
            )
            .await;
        assert_eq!(code, 200, "{body}");
    }
    // Falls to zero, the series stays.
    assert_eq!(s.metric(&dup).await, Some(0.0));
    assert_eq!(s.metric(&nkr).await, Some(0.0));
    // No deadline is left waiting on a stuck timer.
    let overdue = s.metric("reckon_deadline_overdue_seconds").await.unwrap();
    assert!(overdue < 5.0, "deadline overdue by {overdue} s");
    s.stop().await;
}

/// `application/x-www-form-urlencoded`, as a browser encodes a form.
fn form(fields: &[(&str, &str)]) -> String {
    let enc = |s: &str| {
        s.bytes()
            .map(|b| match b {
                b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'.' | b'_' | b'*' => {
                    (b as char).to_string()
                }
                b' ' => "+".into(),
                b => format!("%{b:02X}"),
            })
            .collect::<String>()
    };
    fields
        .iter()
        .map(|(k, v)| format!("{}={}", enc(k), enc(v)))
        .collect::<Vec<_>>()
        .join("&")
}

struct Page {
    status: u16,
    location: Option<String>,
    body: String,
    headers: reqwest::header::HeaderMap,
}

async fn page(client: &reqwest::Client, url: String, post: Option<(String, &str)>) -> Page {
    let req = match post {
        Some((body, site)) => client
            .post(url)
            .header("content-type", "application/x-www-form-urlencoded")
            .header("sec-fetch-site", site)
            .body(body),
        None => client.get(url),
    };
    let resp = req.send().await.unwrap();
    Page {
        status: resp.status().as_u16(),
        location: resp
            .headers()
            .get("location")
            .map(|v| v.to_str().unwrap().to_string()),
        headers: resp.headers().clone(),
        body: resp.text().await.unwrap(),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn queue_pages_escape_and_work_claim_and_resolve() {
    let s = Server::start().await;
    let client = reqwest::Client::builder()
        .redirect(reqwest::redirect::Policy::none())
        .build()
        .unwrap();
    // Intent ids and names come from outside: markup in them must stay text.
    let intent = format!("{}<script>alert(1)</script>\"'&", unique("int"));
    let id = duplicate_refund(&s, &intent).await;
    // A second, unrelated escalation: an email with no idempotency contract that timed out.
    let email = unique("mail");
    export_grpc(
        &s,
        &[&ToolSpan::new("send_email", ago(60.0), 30.0)
            .intent(&email)
            .timeout()
            .told("unknown")],
    )
    .await;
    s.escalation_of(&email, "open")
        .await
        .expect("email escalates");

    assert_eq!(
        s.metric(&unresolved("duplicate_effect", "critical")).await,
        Some(1.0)
    );

    let q = page(&client, s.api("/"), None).await;
    assert_eq!(q.status, 200);
    assert!(q.headers["content-type"]
        .to_str()
        .unwrap()
        .starts_with("text/html"));
    assert!(q.headers["content-security-policy"]
        .to_str()
        .unwrap()
        .contains("default-src 'none'"));
    assert!(
        !q.body.contains("<script>"),
        "unescaped intent id in the queue"
    );
    assert!(q
        .body
        .contains("&lt;script&gt;alert(1)&lt;/script&gt;&quot;&#39;&amp;"));
    assert!(q.body.contains(&format!("href=\"/escalations/{id}\"")));
    assert!(q.body.contains(&email));
    // The critical one first.
    assert!(q.body.find(&id).unwrap() < q.body.find(&email).unwrap());
    let critical = page(&client, s.api("/?severity=critical"), None).await.body;
    assert!(critical.contains(&id) && !critical.contains(&email));
    let emails = page(&client, s.api("/?tool=send_email"), None).await.body;
    assert!(!emails.contains(&id) && emails.contains(&email));
    assert_eq!(
        page(&client, s.api("/?status=bogus"), None).await.status,
        400
    );

    // The evidence page: a time axis with every kind of evidence, both sets of findings, the
    // contract, and the forms.
    let p = page(&client, s.api(&format!("/escalations/{id}")), None).await;
    assert_eq!(p.status, 200, "{}", p.body);
    assert!(!p.body.contains("<script>"));
    for needle in [
        "<svg class=\"timeline\"",
        ">attempt 1<",
        ">attempt 2<",
        ">read-backs<",
        "found nothing",
        ">duplicate_effect<",
        "escalation opened",
        "id=\"escalation-findings\"",
        "id=\"verdict-findings\"",
        "inconclusive_readback_acted_on",
        "no (medium findings do not escalate)",
        "id=\"contract\"",
        "payments.refund",
        "id=\"claim-form\"",
        "id=\"resolve-form\"",
        "from stripe",
    ] {
        assert!(p.body.contains(needle), "missing {needle:?} in\n{}", p.body);
    }
    assert_eq!(
        page(&client, s.api("/escalations/esc_nope_1"), None)
            .await
            .status,
        404
    );

    // A form post from another site changes nothing.
    let claim = s.api(&format!("/escalations/{id}/claim"));
    let forged = page(
        &client,
        claim.clone(),
        Some((form(&[("by", "mallory")]), "cross-site")),
    )
    .await;
    assert_eq!(forged.status, 403);
    assert_eq!(s.escalation_of(&intent, "open").await.unwrap()["id"], id);

    // Claim: post, redirect, get.
    let name = "ana <b>";
    let done = page(
        &client,
        claim.clone(),
        Some((form(&[("by", name)]), "same-origin")),
    )
    .await;
    assert_eq!(done.status, 303, "{}", done.body);
    let location = done.location.unwrap();
    assert_eq!(location, format!("/escalations/{id}?done=claimed"));
    let p = page(&client, s.api(&location), None).await;
    assert!(p.body.contains("id=\"notice\""));
    assert!(p.body.contains("claimed by ana &lt;b&gt;") && !p.body.contains("ana <b>"));
    assert!(
        !p.body.contains("id=\"claim-form\""),
        "claimed: only resolve is left"
    );
    let e = s.escalation_of(&intent, "claimed").await.unwrap();
    assert_eq!(e["claimed_by"], name);
    // Someone else cannot claim it over ana: the page says why, with 409.
    let clash = page(
        &client,
        claim,
        Some((form(&[("by", "bob")]), "same-origin")),
    )
    .await;
    assert_eq!(clash.status, 409);
    assert!(clash.body.contains("id=\"problem\""), "{}", clash.body);
    // Taking it over is the box ticked: the page offers it to whoever is not the holder, and
    // each take-over is recorded (who, from whom) and listed on the page.
    let held = page(&client, s.api(&format!("/escalations/{id}")), None).await;
    assert!(held.body.contains("id=\"take-over-form\""), "{}", held.body);
    let claim = s.api(&format!("/escalations/{id}/claim"));
    for (n, (who, from)) in [("bob", name), (name, "bob")].into_iter().enumerate() {
        let taken = page(
            &client,
            claim.clone(),
            Some((form(&[("by", who), ("override", "true")]), "same-origin")),
        )
        .await;
        assert_eq!(taken.status, 303, "{}", taken.body);
        let e = s.escalation_of(&intent, "claimed").await.unwrap();
        assert_eq!(e["claimed_by"], who);
        assert_eq!(e["overrides"].as_array().unwrap().len(), n + 1);
        assert_eq!(e["overrides"][n]["held_by"], from);
        assert_eq!(e["overrides"][n]["action"], "claim");
    }
    let shown = page(&client, s.api(&format!("/escalations/{id}")), None).await;
    assert_eq!(
        shown
            .body
            .matches("<span class=\"override\">claim by")
            .count(),
        2,
        "{}",
        shown.body
    );

    // Resolve without a resolution: refused, still claimed.
    let resolve = s.api(&format!("/escalations/{id}/resolve"));
    let missing = page(
        &client,
        resolve.clone(),
        Some((form(&[("by", name), ("resolution", " ")]), "same-origin")),
    )
    .await;
    assert_eq!(missing.status, 400, "{}", missing.body);
    assert!(s.escalation_of(&intent, "claimed").await.is_some());

    let note = "voided re_2 <img src=x onerror=alert(1)>";
    let done = page(
        &client,
        resolve,
        Some((
            form(&[
                ("by", name),
                ("resolution", "reversed_extra_effect"),
                ("note", note),
            ]),
            "same-origin",
        )),
    )
    .await;
    assert_eq!(done.status, 303, "{}", done.body);
    let p = page(&client, s.api(&done.location.unwrap()), None).await;
    assert!(p.body.contains("data-status=\"resolved\""));
    assert!(p
        .body
        .contains("voided re_2 &lt;img src=x onerror=alert(1)&gt;"));
    assert!(!p.body.contains("<img"));
    let e = s.escalation_of(&intent, "resolved").await.unwrap();
    assert_eq!(e["resolution"], "reversed_extra_effect");
    assert_eq!(e["note"], note);

    // It has left the queue; the resolved view has it.
    let q = page(&client, s.api("/"), None).await.body;
    assert!(!q.contains(&id) && q.contains(&email));
    let resolved = page(&client, s.api("/?status=resolved"), None).await.body;
    assert!(resolved.contains(&id));
    assert_eq!(
        s.metric(&unresolved("duplicate_effect", "critical")).await,
        Some(0.0)
    );

    let css = client.get(s.api("/ui/reckon.css")).send().await.unwrap();
    assert_eq!(css.status(), 200);
    assert!(css.headers()["content-type"]
        .to_str()
        .unwrap()
        .starts_with("text/css"));
    s.stop().await;
}
