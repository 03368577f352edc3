"""dashboards/ and grafana/provisioning/: static checks (no Grafana here), then every panel,
variable and alert query expanded as the grafana-clickhouse-datasource v4 plugin expands it and
run on a current ClickHouse engine (chDB) and on ClickHouse 18.16 ($RECKON_TEST_CLICKHOUSE),
both loaded with the same demo run: each must run on both, return rows of the right shape, and
return the same rows from both. The health dashboard is PromQL on reckon's own metrics: each
expression is checked by promtool and reads only series reckon exposes."""

import json
import re
import shutil
import subprocess
import sys
import uuid

import pytest
import yaml

import reckon_sql
from reckon_sql import DATASOURCE_TYPE, DATASOURCE_UID, GrafanaContext

DS = {"type": DATASOURCE_TYPE, "uid": DATASOURCE_UID}
PROM = {"type": "prometheus", "uid": "reckon-prometheus"}
ALL_FILES = sorted(reckon_sql.DASHBOARDS_DIR.glob("*.json"))
# reckon's own health, from Prometheus; the others are SQL on reckon's tables.
HEALTH = reckon_sql.DASHBOARDS_DIR / "reckon-health.json"
FILES = [p for p in ALL_FILES if p != HEALTH]
# uids are part of the interface: links (the overview's intent links, the alert's
# __dashboardUid__) and bookmarks use them, so they are pinned here.
EXPECTED_UIDS = {"reckon-overview": "reckon overview", "reckon-intent": "reckon intent",
                 "reckon-contracts": "reckon contracts", "reckon-health": "reckon health"}
PROVISIONING = sorted(p for p in reckon_sql.PROVISIONING_DIR.rglob("*") if p.is_file())


def load(path):
    return json.loads(path.read_text())


def panels(d):
    for p in d["panels"]:
        yield p
        yield from p.get("panels", [])  # collapsed rows


# ------------------------------------------------------------------------------ static


def test_dashboards_parse_with_stable_unique_uids():
    dashboards = [load(p) for p in ALL_FILES]
    assert {d["uid"]: d["title"] for d in dashboards} == EXPECTED_UIDS
    assert len({d["uid"] for d in dashboards}) == len(dashboards)


def test_dashboards_are_what_the_generator_writes():
    r = subprocess.run([sys.executable, str(reckon_sql.ROOT / "scripts" / "make-dashboards"), "--check"],
                       capture_output=True, text=True)
    assert r.returncode == 0, r.stderr


@pytest.mark.parametrize("path", FILES, ids=[p.name for p in FILES])
def test_every_query_uses_the_provisioned_datasource(path):
    d = load(path)
    ids = [p["id"] for p in panels(d)]
    assert len(ids) == len(set(ids)), "panel ids repeat"
    for p in panels(d):
        if p["type"] == "row":
            continue
        assert p["datasource"] == DS, p["title"]
        assert p["targets"], p["title"]
        refs = [t["refId"] for t in p["targets"]]
        assert len(refs) == len(set(refs))
        for t in p["targets"]:
            assert t["datasource"] == DS, p["title"]
            assert t["editorType"] == "sql" and t["rawSql"].strip(), p["title"]
            assert t["format"] in (0, 1), p["title"]
    for v in d["templating"]["list"]:
        if v["type"] == "query":
            assert v["datasource"] == DS, v["name"]


def _sql_queries():
    """(where, rawSql) of every SQL query: panels, variables and the alert rules."""
    for path in FILES:
        d = load(path)
        for p in panels(d):
            for t in p.get("targets", []):
                if "rawSql" in t:
                    yield f"{path.stem}: {p['title']}", t["rawSql"]
        for v in d["templating"]["list"]:
            if v["type"] == "query":
                yield f"{path.stem}: variable {v['name']}", v["query"]["rawSql"]
    for r in alert_rules():
        for q in r["data"]:
            if q["datasourceUid"] == DATASOURCE_UID:
                yield f"alert {r['title']}", q["model"]["rawSql"]


def _code(sql):
    """The SQL without its comments and string literals."""
    sql = re.sub(r"'(?:[^'\\]|\\.)*'", "''", sql)
    return re.sub(r"--[^\n]*", "", sql)


def test_no_query_parses_json():
    """The panels show typed columns: the verdict's JSON document (`doc`) is 66 % of the store
    and no query reads it, let alone parses it."""
    for where, sql in _sql_queries():
        code = _code(sql)
        assert not re.search(r"\bdoc\b|JSON|visitParam", code, re.I), where


def test_no_query_needs_what_18_16_lacks():
    """What the plugin or a current server offers and 18.16 lacks, named before any engine runs
    (the run on 18.16 below is the proof): $__timeInterval (its expansion is toStartOfInterval),
    WITH subqueries, window functions, DateTime64."""
    for where, sql in _sql_queries():
        code = _code(sql)
        for pattern, what in ((r"\$__timeInterval|\$__timeGroup|toStartOfInterval", "toStartOfInterval (BUCKET() in make-dashboards instead)"),
                              (r"\bWITH\s+\w+\s+AS\s*\(", "a WITH subquery"),
                              (r"\bOVER\s*\(", "a window function"),
                              (r"DateTime64|UnixTimestamp64", "DateTime64"),
                              (r"\$__\w+_ms\b", "a millisecond macro (DateTime64)")):
            assert not re.search(pattern, code), f"{where}: {what}"


def test_no_macro_inside_a_comment():
    """The plugin skips macros in SQL comments; the harness does not model that, so there are none."""
    for where, sql in _sql_queries():
        for comment in re.findall(r"--[^\n]*|/\*.*?\*/", sql, re.S):
            assert "$" not in comment, f"{where}: {comment}"


def test_no_unresolved_import_placeholders():
    for path in ALL_FILES + PROVISIONING:
        assert "${DS_" not in path.read_text(), path
        assert "__inputs" not in path.read_text(), path


def _yaml(path):
    return yaml.safe_load(path.read_text())


def test_datasource_provisioning():
    docs = [_yaml(p) for p in sorted((reckon_sql.PROVISIONING_DIR / "datasources").glob("*.yaml"))]
    sources = {s["uid"]: s for d in docs for s in d["datasources"]}
    assert {uid: s["type"] for uid, s in sources.items()} == \
        {DATASOURCE_UID: DATASOURCE_TYPE, PROM["uid"]: PROM["type"]}
    s = sources[DATASOURCE_UID]
    assert s["jsonData"]["protocol"] in ("http", "native")
    assert "password" in s.get("secureJsonData", {}), "the password belongs in secureJsonData"
    # The Prometheus of docker-compose.yml, the one that scrapes reckon.
    compose = _yaml(reckon_sql.ROOT / "docker-compose.yml")["services"]
    m = re.fullmatch(r"http://([a-z0-9-]+):(\d+)/?", sources[PROM["uid"]]["url"])
    assert m and m.group(1) == "prometheus" and m.group(1) in compose and m.group(2) == "9090"


def _health_exprs():
    for p in panels(load(HEALTH)):
        if p["type"] == "row":
            continue
        assert p["datasource"] == PROM, p["title"]
        for t in p["targets"]:
            assert t["datasource"] == PROM, p["title"]
            yield p["title"], t["expr"]


def test_health_dashboard_reads_only_series_reckon_exposes():
    metrics_rs = (reckon_sql.ROOT / "src" / "metrics.rs").read_text()
    exposed = set(re.findall(r'"(reckon_[a-z_]+)"', metrics_rs))
    # Histograms are exposed as NAME_bucket / _sum / _count.
    exposed |= {f"{n}_{s}" for n in exposed for s in ("bucket", "sum", "count")}
    exprs = list(_health_exprs())
    assert len(exprs) >= 10
    for title, expr in exprs:
        used = set(re.findall(r"\b(reckon_[a-z_]+)", expr))
        assert used, (title, expr)
        assert used <= exposed, f"{title}: not exposed by reckon: {sorted(used - exposed)}"


def test_health_dashboard_promql_parses(tmp_path):
    """promtool checks each expression as a recording rule ($__rate_interval as Grafana would
    set it for a 15 s scrape)."""
    promtool = shutil.which("promtool")
    if not promtool:
        pytest.fail("promtool is not installed: apt-get install prometheus")
    rules = {"groups": [{"name": "health", "rules": [
        {"record": f"panel_{i}", "expr": expr.replace("$__rate_interval", "1m")}
        for i, (_, expr) in enumerate(_health_exprs())]}]}
    path = tmp_path / "health.yml"
    path.write_text(json.dumps(rules))
    r = subprocess.run([promtool, "check", "rules", str(path)], capture_output=True, text=True)
    assert r.returncode == 0, r.stdout + r.stderr


def test_dashboard_provider_points_at_the_mounted_dashboards():
    compose = _yaml(reckon_sql.ROOT / "docker-compose.yml")
    mounts = {}
    for m in compose["services"]["grafana"]["volumes"]:
        src, dst = m.split(":")[:2]
        mounts[dst] = src
    docs = [_yaml(p) for p in (reckon_sql.PROVISIONING_DIR / "dashboards").glob("*.yaml")]
    providers = [p for d in docs for p in d["providers"]]
    assert providers
    for p in providers:
        assert mounts.get(p["options"]["path"]) == "./dashboards"
    assert mounts.get("/etc/grafana/provisioning") == "./grafana/provisioning"


def _alerting(key):
    """Every `key` entry of the alerting provisioning files (rules, contact points and
    policies may share a directory and a file)."""
    out = []
    for p in sorted((reckon_sql.PROVISIONING_DIR / "alerting").glob("*.yaml")):
        doc = _yaml(p)
        assert doc.get("apiVersion") == 1, p
        assert set(doc) - {"apiVersion"} <= {"groups", "contactPoints", "policies", "templates",
                                             "muteTimes", "deleteRules", "deleteContactPoints",
                                             "resetPolicies"}, (p, set(doc))
        out += doc.get(key, [])
    return out


def alert_rules():
    return [r for g in _alerting("groups") for r in g["rules"]]


def test_contact_point_and_policy_page_through_the_compose_alertmanager():
    """Grafana's alerts reach someone: one policy tree whose receivers are provisioned contact
    points, and the contact point is the Alertmanager service of docker-compose.yml."""
    points = _alerting("contactPoints")
    assert points, "no contact point provisioned"
    names = {c["name"] for c in points}
    uids = [r["uid"] for c in points for r in c["receivers"]]
    assert len(uids) == len(set(uids))
    for uid in uids:
        assert re.fullmatch(r"[A-Za-z0-9_-]{1,40}", uid), uid
    policies = _alerting("policies")
    assert len(policies) == 1, "one notification policy tree per organisation"

    def receivers(policy):
        yield policy["receiver"]
        for route in policy.get("routes", []):
            yield from receivers({"receiver": policy["receiver"], **route})

    for policy in policies:
        assert policy["orgId"] == 1
        for r in receivers(policy):
            assert r in names, f"policy routes to {r!r}, not a provisioned contact point"
    compose = _yaml(reckon_sql.ROOT / "docker-compose.yml")["services"]
    am = [r for c in points for r in c["receivers"] if r["type"] == "prometheus-alertmanager"]
    assert am, "Grafana forwards to the stack's Alertmanager"
    for r in am:
        m = re.fullmatch(r"http://([a-z0-9-]+):(\d+)/?", r["settings"]["url"])
        assert m and m.group(1) in compose, r["settings"]["url"]
        assert m.group(2) == "9093"
        assert r.get("disableResolveMessage") is False, "resolutions must end the page"
    # Grafana only forwards; it must re-send firing alerts before Alertmanager's default
    # resolve_timeout (5m) would let them lapse.
    for policy in policies:
        assert _seconds(policy["repeat_interval"]) < 300
    assert "alertmanager" in compose["grafana"].get("depends_on", {})


def _seconds(d: str) -> int:
    units = {"s": 1, "m": 60, "h": 3600}
    return sum(int(n) * units[u] for n, u in re.findall(r"(\d+)([smh])", d))


def test_alert_rules_are_consistent():
    rules = alert_rules()
    assert rules, "no alert rule provisioned"
    uids = [r["uid"] for r in rules]
    assert len(uids) == len(set(uids))
    assert any("duplicate" in r["title"] for r in rules)
    for r in rules:
        refs = {q["refId"] for q in r["data"]}
        assert r["condition"] in refs, r["title"]
        for q in r["data"]:
            assert q["datasourceUid"] in (DATASOURCE_UID, "__expr__"), q
            m = q["model"]
            if q["datasourceUid"] == "__expr__":
                # Expressions refer to queries of the same rule only.
                assert m["expression"] in refs, q
            else:
                assert m["datasource"] == DS and m["editorType"] == "sql", q
        panel = r.get("annotations", {}).get("__dashboardUid__")
        if panel:
            assert panel in EXPECTED_UIDS


# ------------------------------------------------------------------------------ execution


def _run(engine, sql, what):
    try:
        return engine.query(sql)
    except Exception as e:  # the engine's message names the problem
        pytest.fail(f"{what} on {engine_name(engine)}: {e}\n--- expanded SQL:\n{sql}")


def engine_name(engine):
    return "ClickHouse 18.16" if isinstance(engine, reckon_sql.HttpEngine) else "chDB"


def _on_both(chdb_engine, ch1816, sql, what):
    """The query's rows from chDB, after checking 18.16 runs it and returns the same rows."""
    new = _run(chdb_engine, sql, what)
    old = _run(ch1816, sql, what)
    problem = reckon_sql.disagreement(old, new)
    assert problem is None, f"{what}: 18.16 and chDB disagree: {problem}\n--- expanded SQL:\n{sql}"
    return old, new


def _variable_values(d, chdb_engine, ch1816, ctx):
    """Every variable's options, from its own query (run like a panel's, on both engines)."""
    out = {}
    for v in d["templating"]["list"]:
        sql = reckon_sql.expand(v["query"]["rawSql"], ctx)
        _, res = _on_both(chdb_engine, ch1816, sql, f"variable {v['name']}")
        assert res.rows, f"variable {v['name']} has no options"
        out[v["name"]] = [str(r[0]) for r in res.rows]
    return out


def _intent_with_everything(chdb_engine):
    """An intent the intent dashboard must show fully: attempts, a read-back, objects, findings
    and an escalation (the demo's resend after an empty read-back)."""
    rows = chdb_engine.query(
        "SELECT intent_id FROM reckon_current_verdicts "
        "WHERE readbacks > 0 AND objects > 0 AND findings > 0 AND isNotNull(escalation_id) "
        "ORDER BY intent_id LIMIT 1").rows
    assert rows, "the demo data has no intent with read-backs, objects, findings and an escalation"
    return rows[0][0]


def contexts(d, chdb_engine, ch1816, time_range):
    """The variable settings (and time ranges) each dashboard is tested under, each with
    whether its panels must have rows."""
    base = GrafanaContext(from_s=time_range[0], to_s=time_range[1], interval_s=60)
    names = [v["name"] for v in d["templating"]["list"]]
    options = _variable_values(d, chdb_engine, ch1816, base)
    out = []
    if "tool" in names:
        # All (the default), and the busiest tool alone (a one-element multi-value).
        busiest = chdb_engine.query(
            "SELECT tool FROM reckon_attempts GROUP BY tool ORDER BY count() DESC, tool LIMIT 1").rows[0][0]
        for value in ("$__all", [busiest]):
            out.append((GrafanaContext(base.from_s, base.to_s, 60, {"tool": value}, {"tool": options["tool"]}), True))
        # A range that starts halfway through the demo's attempts, at a 10 s interval: intents
        # whose first attempt precedes it, buckets of another size. Some panels are empty then;
        # the two servers must still agree.
        mid = int(chdb_engine.query("SELECT toUInt32(quantileExact(0.5)(started_at)) FROM reckon_attempts").rows[0][0])
        out.append((GrafanaContext(mid, base.to_s, 10, {"tool": "$__all"}, {"tool": options["tool"]}), False))
    if "intent_id" in names:
        out.append((GrafanaContext(base.from_s, base.to_s, 1, {"intent_id": _intent_with_everything(chdb_engine)}), True))
    assert out, f"{d['uid']}: no variable setting to test under"
    return out


CASES = [(p, panel["id"]) for p in FILES for panel in panels(load(p)) if panel["type"] != "row"]


@pytest.mark.parametrize("path,panel_id", CASES, ids=[f"{p.stem}:{i}" for p, i in CASES])
def test_panel_runs_on_both_servers_with_the_same_rows(path, panel_id, chdb_engine, ch1816, time_range):
    d = load(path)
    panel = next(p for p in panels(d) if p["id"] == panel_id)
    for ctx, rows_expected in contexts(d, chdb_engine, ch1816, time_range):
        for t in panel["targets"]:
            sql = reckon_sql.expand(t["rawSql"], ctx)
            what = f"{panel['title']} ({ctx.variables}, from {ctx.from_s})"
            for res in _on_both(chdb_engine, ch1816, sql, what):
                assert res.rows or not rows_expected, f"{what}: no rows on the demo data\n{sql}"
                if t["format"] == 0:
                    # A time series: a `time` column of a date-time type, at least one number,
                    # and time ascending (the plugin's long-to-wide conversion needs it).
                    assert "time" in res.names, panel["title"]
                    ti = res.names.index("time")
                    assert res.types[ti].startswith(("DateTime", "Nullable(DateTime")), res.types[ti]
                    assert any(re.match(r"(Nullable\()?(U?Int|Float|Decimal)", ty) for ty in res.types), res.types
                    times = [r[ti] for r in res.rows]
                    assert times == sorted(times), f"{panel['title']}: time not ascending"


# The panels that read the intents active in the range from reckon_intent_tally (scripts/
# make-dashboards, ACTIVE_VERDICTS), and the current findings of the range through it
# (current_findings), each with what it computed from every current verdict or finding before:
# the reference it must equal.
TOOL = "$__conditionalAll(tool IN (${tool}), $tool)"
CLASSES = ["rejected", "conflict", "succeeded", "failed", "recorded", "unknown"]
TALLY_PANELS = {
    "Intent states": f"""
SELECT state, count() AS intents
FROM reckon_current_verdicts
WHERE $__timeFilter(last_event) AND {TOOL}
GROUP BY state
ORDER BY state""",
    "Attempt classes": f"""
SELECT toDateTime(intDiv(toUInt32(last_event), $__interval_s) * $__interval_s) AS time, class, sum(n) AS attempts
FROM reckon_current_verdicts
ARRAY JOIN [{", ".join(repr(c) for c in CLASSES)}] AS class, [{", ".join("attempts_" + c for c in CLASSES)}] AS n
WHERE $__timeFilter(last_event) AND {TOOL} AND n > 0
GROUP BY time, class
ORDER BY time, class""",
    "Contracts by tool": f"""
SELECT ifNull(tool, '(unknown tool)') AS tool, ifNull(contract, '(none)') AS contract,
       count() AS intents,
       sum(v.attempts) AS sends,
       sum(v.attempts) - countIf(v.attempts > 0) AS retries,
       countIf(has(arrayMap(k -> toString(k), finding_kinds), 'expired_key_retry')) AS expired_key_retries,
       countIf(has(arrayMap(k -> toString(k), finding_kinds), 'key_reuse_mismatch')) AS key_reuse_mismatches,
       countIf(has(arrayMap(k -> toString(k), finding_kinds), 'effect_mismatch')) AS effect_mismatches,
       countIf(has(arrayMap(k -> toString(k), finding_kinds), 'retry_budget_exceeded')) AS over_retry_budget,
       countIf(state = 'pending') AS pending,
       countIf(has(arrayMap(k -> toString(k), finding_kinds), 'stuck_pending')) AS stuck_pending,
       countIf(state = 'unknown') AS unknown
FROM reckon_current_verdicts AS v
WHERE $__timeFilter(last_event) AND {TOOL}
GROUP BY tool, contract
ORDER BY tool, contract""",
    "Duplicate effects": f"""
SELECT count() AS duplicate_effects, uniqExact(intent_id) AS intents
FROM reckon_current_findings
WHERE kind = 'duplicate_effect' AND $__timeFilter(at) AND {TOOL}""",
    "Duplicate effects by tool": f"""
SELECT toDateTime(intDiv(toUInt32(at), $__interval_s) * $__interval_s) AS time, ifNull(tool, '(unknown tool)') AS tool, count() AS duplicate_effects
FROM reckon_current_findings
WHERE kind = 'duplicate_effect' AND $__timeFilter(at) AND {TOOL}
GROUP BY time, tool
ORDER BY time, tool""",
    "Expired-key retries by tool": f"""
SELECT toDateTime(intDiv(toUInt32(at), $__interval_s) * $__interval_s) AS time, ifNull(tool, '(unknown tool)') AS tool, count() AS expired_key_retries
FROM reckon_current_findings
WHERE kind = 'expired_key_retry' AND $__timeFilter(at) AND {TOOL}
GROUP BY time, tool
ORDER BY time, tool""",
    "Mismatches": f"""
SELECT toDateTime(intDiv(toUInt32(at), $__interval_s) * $__interval_s) AS time, concat(ifNull(tool, '(unknown tool)'), ' ', toString(kind)) AS series, count() AS mismatches
FROM reckon_current_findings
WHERE kind IN ('key_reuse_mismatch', 'effect_mismatch') AND $__timeFilter(at) AND {TOOL}
GROUP BY time, series
ORDER BY time, series""",
    "Pending intents": f"""
SELECT first_seen, intent_id, ifNull(tool, '(unknown tool)') AS tool,
       toUInt32(now()) - toUInt32(first_seen) AS age_s,
       has(arrayMap(k -> toString(k), finding_kinds), 'stuck_pending') AS stuck, decision, ifNull(escalation_id, '') AS escalation
FROM reckon_current_verdicts
WHERE state = 'pending' AND $__timeFilter(last_event) AND {TOOL}
ORDER BY first_seen_ns, intent_id
LIMIT 500""",
    # Every stored attempt of the intent's own tool after its first (wrapper spans of other
    # tools are no sends).
    "Retries by tool": f"""
SELECT toDateTime(intDiv(toUInt32(a.started_at), $__interval_s) * $__interval_s) AS time, tool, count() AS retries
FROM (SELECT intent_id, tool, started_at, started_ns FROM reckon_attempts FINAL WHERE $__timeFilter(started_at) AND {TOOL}) AS a
ALL INNER JOIN
(
    SELECT intent_id, tool, first
    FROM (SELECT intent_id, ifNull(tool, '') AS tool FROM reckon_current_verdicts) AS v
    ALL INNER JOIN (SELECT intent_id, tool, min(started_ns) AS first FROM reckon_attempts GROUP BY intent_id, tool) AS f
    USING (intent_id, tool)
) AS v USING (intent_id, tool)
WHERE a.started_ns > v.first
GROUP BY time, tool
ORDER BY time, tool""",
    "Unknown rate by tool": f"""
SELECT toDateTime(intDiv(toUInt32(last_event), $__interval_s) * $__interval_s) AS time, ifNull(tool, '(unknown tool)') AS tool,
       sum(attempts_unknown) / sum(attempts) AS unknown_rate
FROM reckon_current_verdicts
WHERE $__timeFilter(last_event) AND {TOOL} AND attempts > 0
GROUP BY time, tool
ORDER BY time, tool""",
}


def _synthetic_history(lo: int) -> list[str]:
    """Verdicts of 24 intents listed over the 30 hours before `lo` (unix s), as reckon writes
    them: each version in reckon_verdicts and reckon_intent_tally with its findings, and in
    reckon_intent_activity when its latest event lies in a later hour than its listing place. Some are rewritten with a
    later latest event (hours later), one is then deleted. The demo fixture's intents all live
    within seconds: these are the ones the activity table answers for."""
    ns = 1_000_000_000
    base = (lo // 3600 - 30) * 3600
    verdicts, tally, activity, findings = [], [], [], []
    for k in range(24):
        intent = f"hist-{k:02d}"
        tool = ["issue_refund", "send_email"][k % 2]
        listed = base + k * 3600 + (k * 37) % 3600
        last = listed + (k % 4) * 2700
        versions = [(1, last, "pending" if k % 4 == 1 else "unknown", 0)]
        if k % 3 == 0:
            last += (k % 5) * 3600 + 5
            versions.append((2, last, "completed", 0))
        if k == 9:
            versions.append((3, last, "completed", 1))
        attempts, unknown = 1 + k % 3, k % 2
        for version, last_event, state, deleted in versions:
            # Its findings: each version one of its own kind, the first also one the rewrite
            # drops; found a minute after the listing place, or later for the later versions.
            kinds = [] if deleted else [["duplicate_effect", "expired_key_retry", "key_reuse_mismatch", "effect_mismatch"][(k + version) % 4]]
            if version == 1 and not deleted:
                kinds.append("duplicate_effect")
                if state == "pending":
                    kinds.append("stuck_pending")
            for j, kind in enumerate(kinds):
                at = listed + 60 + (version - 1) * 1800 + j
                findings.append(
                    f"('{intent}', '{kind}', 'critical', {at}, {at * ns}, 's-{k}-{j}', '', '{tool}', {version}, {listed * ns})")
            kind_list = "[" + ", ".join(f"'{x}'" for x in kinds) + "]"
            distinct_kinds = "[" + ", ".join(f"'{x}'" for x in sorted(set(kinds))) + "]"
            verdicts.append(
                f"('{intent}', '{tool}', '{state}', 'none', {listed}, {listed * ns}, {last_event}, "
                f"{last_event * ns}, {attempts}, {unknown}, {attempts - unknown}, {distinct_kinds}, '', {deleted}, {version}, {listed * ns})")
            tally.append(
                f"({listed}, {listed * ns}, '{intent}', '{tool}', '{state}', 'none', {last_event * ns}, "
                f"{attempts}, {unknown}, {attempts - unknown}, {kind_list}, {deleted}, {version})")
            if last_event // 3600 > listed // 3600 and not deleted:
                activity.append(f"({last_event * ns}, '{intent}', {listed * ns})")
    return [
        "INSERT INTO reckon_verdicts (intent_id, tool, state, decision, first_seen, first_seen_ns, last_event, "
        "last_event_ns, attempts, attempts_unknown, attempts_succeeded, finding_kinds, doc, deleted, version, listed_ns) VALUES "
        + ", ".join(verdicts),
        "INSERT INTO reckon_intent_tally (listed_at, listed_ns, intent_id, tool, state, decision, last_event_ns, "
        "attempts, attempts_unknown, attempts_succeeded, finding_kind, deleted, version) VALUES " + ", ".join(tally),
        "INSERT INTO reckon_findings (intent_id, kind, severity, at, at_ns, subject, detail, tool, verdict_version, "
        "listed_ns) VALUES " + ", ".join(findings),
        "INSERT INTO reckon_intent_activity (last_event_ns, intent_id, listed_ns) VALUES " + ", ".join(activity),
    ]


@pytest.fixture
def with_history(fixture_dir, chdb_engine, ch1816):
    """The demo fixture plus `_synthetic_history`, on chDB and on 18.16, each in a database of
    its own (chDB: the session's one embedded server, switched to it for this test only)."""
    home = chdb_engine.database
    http = reckon_sql.HttpEngine(ch1816.url, f"reckon_sqlhist_{uuid.uuid4().hex[:12]}")
    chdb_engine.run("CREATE DATABASE IF NOT EXISTS reckon_history")
    chdb_engine.run("USE reckon_history")
    try:
        for engine in (chdb_engine, http):
            engine.load(fixture_dir)
        lo = int(chdb_engine.query("SELECT toUInt32(min(first_seen)) FROM reckon_current_verdicts").rows[0][0])
        for engine in (chdb_engine, http):
            for stmt in _synthetic_history(lo):
                engine.run(stmt)
        yield chdb_engine, http
    finally:
        chdb_engine.run(f"USE {home}")
        chdb_engine.run("DROP DATABASE IF EXISTS reckon_history")
        http.drop()


NOW = "toDateTime(2000000000)"


def test_panels_from_the_tally_equal_the_current_verdicts(with_history):
    """Ranges that start before the history, at each hour boundary and inside its hours, at an
    intent's latest event and one second after it, and end inside it or after it: the tally's
    rows of the range and the activity table's give what every current verdict gives."""
    by_title = {p["title"]: p
                for name in ("reckon-overview.json", "reckon-contracts.json")
                for p in panels(load(reckon_sql.ROOT / "dashboards" / name))}
    assert set(TALLY_PANELS) <= set(by_title)
    chdb, http = with_history
    lo, hi = (int(x) for x in chdb.query(
        "SELECT toUInt32(min(first_seen)), toUInt32(max(last_event)) FROM reckon_current_verdicts").rows[0])
    assert int(chdb.query("SELECT count() FROM reckon_intent_activity").rows[0][0]) >= 8
    lasts = [int(r[0]) for r in chdb.query(
        "SELECT DISTINCT toUInt32(last_event) FROM reckon_current_verdicts ORDER BY 1").rows]
    starts = {lo - 1, lo, (lo + hi) // 2}
    starts |= set(range((lo // 3600 + 1) * 3600, hi + 1, 3 * 3600))
    starts |= {t + dt for t in lasts[::3] for dt in (0, 1)}
    ends = {hi + 3600, (lo + hi) // 2}
    tools = [r[0] for r in chdb.query("SELECT DISTINCT tool FROM reckon_attempts ORDER BY 1").rows]
    compared: dict[str, int] = {}
    for title, reference in TALLY_PANELS.items():
        sql = by_title[title]["targets"][0]["rawSql"]
        assert "reckon_intent_tally" in sql, title
        for f in sorted(starts):
            for t in sorted(ends):
                if t < f:
                    continue
                for tool in ("$__all", ["issue_refund"]):
                    ctx = GrafanaContext(f, t, 600, {"tool": tool}, {"tool": tools + ["issue_refund"]})
                    for engine in (chdb, http):
                        # One clock for both, so an age read a second apart agrees.
                        got = _run(engine, reckon_sql.expand(sql, ctx).replace("now()", NOW), title)
                        want = _run(engine, reckon_sql.expand(reference, ctx).replace("now()", NOW),
                                    title + " (reference)")
                        assert got.rows == want.rows, f"{title} from {f} to {t}, tool {tool} on {engine_name(engine)}"
                        compared[title] = compared.get(title, 0) + bool(want.rows)
    # Each panel was held to rows, not only to an empty answer.
    assert all(compared.get(title, 0) >= 4 for title in TALLY_PANELS), compared
    assert sum(compared.values()) > 100, compared


# The alert rule as it read every current finding and verdict before: the reference the rule
# must equal.
ALERT_REFERENCE = """
SELECT ifNull(tool, '(unknown tool)') AS tool, count() AS duplicate_effects
FROM reckon_current_findings
WHERE kind = 'duplicate_effect'
  AND (intent_id IN (SELECT intent_id FROM (SELECT intent_id, status FROM reckon_escalations FINAL) WHERE status != 'resolved')
       OR intent_id NOT IN (SELECT intent_id FROM reckon_escalations))
GROUP BY tool
ORDER BY tool"""


def test_the_alert_rule_equals_every_current_finding(with_history):
    """On the demo's duplicates (escalated) and the synthetic history's (superseded, deleted, and
    current ones without an escalation), the rule counts what every current finding gives."""
    chdb, http = with_history
    ctx = GrafanaContext(0, 2_000_000_000)
    [rule] = [r for r in alert_rules() if "duplicate" in r["title"]]
    [sql] = [q["model"]["rawSql"] for q in rule["data"] if q["datasourceUid"] == DATASOURCE_UID]
    for engine in (chdb, http):
        got = _run(engine, reckon_sql.expand(sql, ctx), "alert rule")
        want = _run(engine, ALERT_REFERENCE, "alert rule (reference)")
        assert got.rows == want.rows, engine_name(engine)
        assert sum(int(r[1]) for r in want.rows) > 5, want.rows


def test_macros_are_expanded_like_the_plugin():
    ctx = GrafanaContext(from_s=1700000000, to_s=1700003600, interval_s=30,
                         variables={"tool": "$__all", "one": ["a"], "text": "x-1"},
                         all_values={"tool": ["a", "b"]})
    assert reckon_sql.expand("$__timeFilter(at)", ctx) == "at >= toDateTime(1700000000) AND at <= toDateTime(1700003600)"
    assert reckon_sql.expand("$__timeFilter_ms(at)", ctx) == \
        "at >= fromUnixTimestamp64Milli(1700000000000) AND at <= fromUnixTimestamp64Milli(1700003600000)"
    assert reckon_sql.expand("$__timeInterval(at)", ctx) == "toStartOfInterval(toDateTime(at), INTERVAL 30 second)"
    assert reckon_sql.expand("$__timeFrom(at) AND $__timeTo(at)", ctx) == \
        "at >= toDateTime(1700000000) AND at <= toDateTime(1700003600)"
    assert reckon_sql.expand("$__timeGroup(at, '5m')", ctx) == "toStartOfInterval(toDateTime(at), INTERVAL 300 second)"
    # Nested macros come out as the plugin's (innermost first) do.
    assert reckon_sql.expand("$__timeFilter(coalesce(closed_at, $__toTime))", ctx) == \
        "coalesce(closed_at, toDateTime(1700003600)) >= toDateTime(1700000000) AND " \
        "coalesce(closed_at, toDateTime(1700003600)) <= toDateTime(1700003600)"
    assert reckon_sql.expand("$__interval_s", ctx) == "30"
    assert reckon_sql.expand("$__fromTime,$__toTime", ctx) == "toDateTime(1700000000),toDateTime(1700003600)"
    assert reckon_sql.expand("$__dateFilter(d)", ctx) == "d >= toDate('2023-11-14') AND d <= toDate('2023-11-14')"
    assert reckon_sql.expand("$__conditionalAll(tool IN (${tool}), $tool)", ctx) == "1=1"
    assert reckon_sql.expand("$__conditionalAll(t IN (${one}), $one)", ctx) == "t IN ('a')"
    assert reckon_sql.expand("id = '${text}'", ctx) == "id = 'x-1'"
    with pytest.raises(AssertionError):
        reckon_sql.expand("$__unknownMacro(x)", ctx)


def test_alert_query_fires_on_the_demo_duplicates(chdb_engine, ch1816, time_range):
    ctx = GrafanaContext(from_s=time_range[0], to_s=time_range[1])
    ran = 0
    for rule in alert_rules():
        for q in rule["data"]:
            if q["datasourceUid"] != DATASOURCE_UID:
                continue
            ran += 1
            sql = reckon_sql.expand(q["model"]["rawSql"], ctx)
            for res in _on_both(chdb_engine, ch1816, sql, rule["title"]):
                # One row per tool: string labels and one number, as Grafana's numeric table
                # frames want them; the demo leaves duplicate effects unresolved, so the value
                # is > 0.
                assert res.rows, rule["title"]
                num = [i for i, ty in enumerate(res.types) if re.match(r"U?Int|Float", ty)]
                assert len(num) == 1, res.types
                assert all(int(r[num[0]]) > 0 for r in res.rows)
    assert ran > 0, "no alert rule has a SQL query to run"


# The intent dashboard's objects as they read every object row of the lookup before (filtered
# by intent): the reference the panel, which reads the lookup by the objects the intent's
# evidence names, must equal.
OBJECTS_REFERENCE = """
SELECT DISTINCT value
FROM reckon_intent_lookup
WHERE kind = 'object' AND intent_id = '${intent_id}'
  AND (intent_id, verdict_version) IN (SELECT intent_id, version FROM reckon_verdicts FINAL WHERE intent_id = '${intent_id}')
ORDER BY value"""


# Objects the demo links no other way, as reckon writes them (the verdict, its lookup row, the
# evidence): an orphan record (no intent claims it), an object only a key-only record names
# (the send timed out), an object only a read-back lists.
def _linked_only_by(intent_id, object_id, keys, evidence):
    return [
        "INSERT INTO reckon_verdicts (intent_id, state, decision, idempotency_keys, first_seen, first_seen_ns, last_event, last_event_ns, doc, deleted, version, listed_ns) "
        f"VALUES ('{intent_id}', 'completed', 'none', {keys}, 1700000000, 1700000000000000000, 1700000000, 1700000000000000000, '', 0, 1, 1700000000000000000)",
        f"INSERT INTO reckon_intent_lookup (kind, value, intent_id, verdict_version) VALUES ('object', '{object_id}', '{intent_id}', 1)",
        evidence,
    ]


ONLY_LINKED = (
    _linked_only_by("orphan:re_orph", "re_orph", "[]",
                    "INSERT INTO reckon_records (source, kind, object_id, status, observed_at, observed_ns, ingested_ns) "
                    "VALUES ('stripe', 'refund', 're_orph', 'succeeded', 1700000000, 1700000000000000000, 1)")
    + _linked_only_by("by-key-1", "re_bykey", "['k-only']",
                      "INSERT INTO reckon_records (source, kind, object_id, idempotency_key, status, observed_at, observed_ns, ingested_ns) "
                      "VALUES ('stripe', 'refund', 're_bykey', 'k-only', 'succeeded', 1700000000, 1700000000000000000, 1)")
    + _linked_only_by("by-read-1", "re_byread", "[]",
                      "INSERT INTO reckon_readbacks (trace_id, span_id, intent_id, tool, read_at, read_ns, ended_ns, object_ids, ingested_ns) "
                      "VALUES ('t1', 's1', 'by-read-1', 'get_refund', 1700000000, 1700000000000000000, 1700000000000000001, ['re_byread'], 1)")
)


def test_intent_objects_equal_every_lookup_row_of_the_intent(with_history, time_range):
    """For every intent of the demo (shared keys, read-backs of other intents' objects,
    key-only records) and the ONLY_LINKED ones, the Objects panel names the objects the lookup
    holds."""
    panel = next(p for p in panels(load(reckon_sql.ROOT / "dashboards" / "reckon-intent.json"))
                 if p["title"] == "Objects")
    sql = panel["targets"][0]["rawSql"]
    for engine in with_history:
        for stmt in ONLY_LINKED:
            engine.run(stmt)
    ids = [r[0] for r in with_history[0].query(
        "SELECT DISTINCT intent_id FROM reckon_current_verdicts ORDER BY intent_id").rows]
    assert {"orphan:re_orph", "by-key-1", "by-read-1"} <= set(ids)
    with_objects = 0
    for intent_id in ids:
        ctx = GrafanaContext(time_range[0], time_range[1], 60, {"intent_id": intent_id})
        for engine in with_history:
            got = sorted({r[0] for r in _run(engine, reckon_sql.expand(sql, ctx), "Objects").rows})
            want = [r[0] for r in _run(engine, reckon_sql.expand(OBJECTS_REFERENCE, ctx), "reference").rows]
            assert got == want, f"objects of {intent_id} on {engine_name(engine)}"
            with_objects += bool(want)
    assert with_objects >= 20, with_objects
