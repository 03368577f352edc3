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
    # The fixture is loaded unmerged, so superseded verdict versions are present; the view must
    # show exactly one row per live intent.
    r = chdb_engine.query("SELECT count(), uniqExact(intent_id) FROM reckon_current_verdicts").rows[0]
    assert r[0] == r[1]
    raw = chdb_engine.query("SELECT count() FROM reckon_verdicts").rows[0][0]
    assert raw >= r[0]
