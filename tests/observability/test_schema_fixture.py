"""The DDL the tests use is reckon's own (read out of schema.rs), and the fixture is what reckon
wrote with it during a demo run."""

import reckon_sql


def test_ddl_extractor_finds_every_table_and_view():
    objs = reckon_sql.created_objects(reckon_sql.schema_statements())
    assert {n for n, k in objs.items() if k == "TABLE"} == reckon_sql.EXPECTED_TABLES
    assert {n for n, k in objs.items() if k == "VIEW"} == reckon_sql.EXPECTED_VIEWS


def _tsv_unescape(s: str) -> str:
    return s.replace("\\'", "'").replace("\\\\", "\\")


def test_fixture_columns_match_the_schema(fixture_dir, chdb_engine):
    for table in reckon_sql.data_tables():
        lines = (fixture_dir / f"{table}.tsv").read_text().split("\n", 2)
        names = lines[0].split("\t")
        types = [_tsv_unescape(t) for t in lines[1].split("\t")]
        desc = chdb_engine.query(f"SELECT name, type FROM system.columns WHERE database = 'reckon' AND table = '{table}' ORDER BY position")
        assert names == [r[0] for r in desc.rows], table
        assert [t.replace(" ", "") for t in types] == [r[1].replace(" ", "") for r in desc.rows], table


def test_fixture_holds_a_whole_demo_run(fixture_meta, chdb_engine):
    assert fixture_meta["demo_exit_code"] == 0, "reckon demo failed against the ClickHouse store (see demo.txt in the fixture)"
    rows = fixture_meta["rows"]
    for table in ("reckon_attempts", "reckon_readbacks", "reckon_records", "reckon_verdicts",
                  "reckon_escalations", "reckon_findings"):
        assert rows[table] > 0, table
    # The cases the reports and dashboards exist for must all be in the data they are tested on.
    kinds = {r[0] for r in chdb_engine.query("SELECT DISTINCT toString(kind) FROM reckon_current_findings").rows}
    assert {"duplicate_effect", "expired_key_retry", "key_reuse_mismatch", "retry_budget_exceeded"} <= kinds
    states = {r[0] for r in chdb_engine.query("SELECT DISTINCT toString(state) FROM reckon_current_verdicts").rows}
    assert {"completed", "unknown", "pending", "failed_before_execution", "failed_after_execution"} <= states


def test_views_hide_superseded_rows(chdb_engine):
    """The views must show the newest version of a verdict, hide older ones and tombstones, and
    show only the findings written with the current version. Checked on rows written for the
    purpose (in a database of their own, so the fixture the other tests read stays as it was)."""
    src = chdb_engine.database
    db = "reckon_view_check"
    chdb_engine.run(f"DROP DATABASE IF EXISTS {db}")
    chdb_engine.run(f"CREATE DATABASE {db}")
    chdb_engine.run(f"USE {db}")
    try:
        for stmt in reckon_sql.schema_statements():
            chdb_engine.run(stmt)
        intent = chdb_engine.query(f"SELECT intent_id FROM {src}.reckon_verdicts ORDER BY intent_id LIMIT 1").rows[0][0]
        row = f"SELECT * FROM {src}.reckon_verdicts WHERE intent_id = '{intent}' ORDER BY version DESC LIMIT 1"
        # An old version says pending; the newest says completed and was audited later.
        chdb_engine.run(f"INSERT INTO reckon_verdicts SELECT * REPLACE (toUInt64(10) AS version, 'pending' AS state, toUInt64(1) AS audited_ns) FROM ({row})")
        chdb_engine.run(f"INSERT INTO reckon_verdicts SELECT * REPLACE (toUInt64(11) AS version, 'completed' AS state, toUInt64(2) AS audited_ns) FROM ({row})")
        # A tombstoned pseudo-intent must not show at all.
        chdb_engine.run(f"INSERT INTO reckon_verdicts SELECT * REPLACE ('orphan:gone' AS intent_id, toUInt64(5) AS version, toUInt8(1) AS deleted) FROM ({row})")
        # A finding written with the old version only, and one with the current version.
        chdb_engine.run(
            "INSERT INTO reckon_findings (intent_id, kind, severity, at, at_ns, subject, detail, tool, verdict_version) VALUES "
            f"('{intent}', 'stuck_pending', 'medium', now(), 1, '', 'stale', NULL, 10), "
            f"('{intent}', 'misreported_outcome', 'medium', now(), 2, 's', 'current', NULL, 11)"
        )
        raw = chdb_engine.query("SELECT count() FROM reckon_verdicts").rows[0][0]
        assert raw == 3, "all versions are stored"
        rows = chdb_engine.query("SELECT intent_id, toString(state), audited_ns, version FROM reckon_current_verdicts").rows
        assert rows == [[intent, "completed", 2, 11]], rows
        kinds = chdb_engine.query("SELECT toString(kind) FROM reckon_current_findings").rows
        assert kinds == [["misreported_outcome"]], kinds
    finally:
        chdb_engine.run(f"USE {src}")
        chdb_engine.run(f"DROP DATABASE IF EXISTS {db}")
