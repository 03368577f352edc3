"""queries/: every file states its question, parameters and 18.16 portability, and runs on a
current engine (chDB) and on ClickHouse 18.16 ($RECKON_TEST_CLICKHOUSE), both loaded with the
same demo run, with rows of the promised columns, the same rows from both."""

import datetime as dt

import pytest

import reckon_sql

FILES = sorted(reckon_sql.QUERIES_DIR.glob("*.sql"))
IDS = [p.name for p in FILES]

# The reports the issue asks for, one question each.
REQUIRED = {
    "duplicate_effects_by_tool_and_day.sql",
    "unknown_outcomes_open.sql",
    "expired_key_retries.sql",
    "key_reuse_changed_parameters.sql",
    "time_to_settle_by_tool.sql",
    "escalations_by_age_and_status.sql",
    "attempts_per_intent.sql",
}


def _fmt(ts: int) -> str:
    return dt.datetime.fromtimestamp(ts, dt.timezone.utc).strftime("%Y-%m-%d %H:%M:%S")


@pytest.fixture(scope="module")
def params(time_range):
    since, until = time_range
    return {
        "since": _fmt(since),
        "until": _fmt(until),
        "opened_since": "1970-01-01 00:00:00",
        "min_age_s": 0,
        "min_attempts": 2,
    }


@pytest.fixture(scope="module")
def params_from_midway(params, chdb_engine):
    """A window that starts halfway through the demo's attempts: intents whose first attempt
    precedes it are left out, and their later rows must be too, on both servers alike."""
    mid = int(chdb_engine.query("SELECT toUInt32(quantileExact(0.5)(started_at)) FROM reckon_attempts").rows[0][0])
    return {**params, "since": _fmt(mid), "opened_since": _fmt(mid), "min_attempts": 1}


def test_every_report_is_there():
    assert REQUIRED <= set(IDS)


@pytest.mark.parametrize("path", FILES, ids=IDS)
def test_header(path):
    q = reckon_sql.parse_query_file(path)
    assert q.question, "no '-- Question:' line"
    assert q.columns, "no '-- Columns:' line"
    assert "Runs on ClickHouse 18.16:" in q.sql
    assert q.params == reckon_sql.used_params(q.sql), "the header's parameters differ from the ones used"


@pytest.mark.parametrize("path", FILES, ids=IDS)
def test_every_report_says_it_runs_on_18_16(path):
    # 18.16 is what Debian ships and what reckon's store supports: a report a user of it cannot
    # run is no report.
    assert reckon_sql.parse_query_file(path).portable, "'-- Runs on ClickHouse 18.16: yes' expected"


@pytest.mark.parametrize("path", FILES, ids=IDS)
def test_runs_on_both_servers_with_the_same_rows(path, chdb_engine, ch1816, params):
    q = reckon_sql.parse_query_file(path)
    sql = reckon_sql.bind_params(q.sql, params)
    results = {}
    for name, engine in (("chDB", chdb_engine), ("ClickHouse 18.16", ch1816)):
        try:
            results[name] = engine.query(sql)
        except Exception as e:  # the engine's message names the problem
            pytest.fail(f"{name}: {e}")
        assert results[name].names == q.columns, name
        assert results[name].rows, f"{name}: no rows on the demo data"
    problem = reckon_sql.disagreement(results["ClickHouse 18.16"], results["chDB"])
    assert problem is None, f"18.16 and chDB disagree: {problem}"


@pytest.mark.parametrize("path", FILES, ids=IDS)
def test_a_window_from_midway_gives_the_same_rows_on_both(path, chdb_engine, ch1816, params_from_midway):
    q = reckon_sql.parse_query_file(path)
    sql = reckon_sql.bind_params(q.sql, params_from_midway)
    problem = reckon_sql.disagreement(ch1816.query(sql), chdb_engine.query(sql))
    assert problem is None, f"18.16 and chDB disagree: {problem}"
