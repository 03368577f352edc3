"""Session fixtures: the demo-run fixture, chDB (a current ClickHouse engine, in process) and the
18.16 test server, both loaded with reckon's schema and that fixture.

The fixture is made once per session by make_fixture.py (a real `reckon serve` on ClickHouse
18.16 filled by `reckon demo`, ~10 s), unless RECKON_SQL_FIXTURE names a directory an earlier
run produced. The 18.16 server is $RECKON_TEST_CLICKHOUSE (.ci/run starts it); every panel,
variable, alert query and queries/ file runs there and on chDB, in a database of the session's
own that is dropped after. Without it the tests that need it fail (RECKON_SKIP_CLICKHOUSE=1
skips them instead, and make_fixture.py starts a throwaway server for the fixture).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
import uuid
from pathlib import Path

import pytest

# Dates in the fixture are UTC text; chDB must read them as UTC whatever the machine says.
os.environ["TZ"] = "UTC"
time.tzset()

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
import reckon_sql  # noqa: E402


@pytest.fixture(scope="session")
def fixture_dir(tmp_path_factory) -> Path:
    given = os.environ.get("RECKON_SQL_FIXTURE")
    if given:
        return Path(given)
    out = tmp_path_factory.mktemp("sql-fixture")
    proc = subprocess.run(
        [sys.executable, str(HERE / "make_fixture.py"), "--out", str(out)],
        capture_output=True, text=True, timeout=600,
    )
    if proc.returncode != 0:
        pytest.fail(f"make_fixture.py failed ({proc.returncode}):\n{proc.stdout[-3000:]}\n{proc.stderr[-3000:]}")
    return out


@pytest.fixture(scope="session")
def fixture_meta(fixture_dir) -> dict:
    return json.loads((fixture_dir / "meta.json").read_text())


@pytest.fixture(scope="session")
def chdb_engine(fixture_dir, tmp_path_factory):
    eng = reckon_sql.ChdbEngine(str(tmp_path_factory.mktemp("chdb")), "reckon")
    eng.load(fixture_dir)
    yield eng
    eng.close()


@pytest.fixture(scope="session")
def ch1816(fixture_dir):
    url = os.environ.get("RECKON_TEST_CLICKHOUSE")
    if not url:
        # A check that silently did not run is worse than a red one.
        if os.environ.get("RECKON_SKIP_CLICKHOUSE") == "1":
            pytest.skip("RECKON_SKIP_CLICKHOUSE=1")
        pytest.fail("RECKON_TEST_CLICKHOUSE is not set: start ClickHouse 18.16 (scripts/clickhouse-test-server start) or set RECKON_SKIP_CLICKHOUSE=1")
    # A database of this session's own: parallel runs against one server never meet.
    eng = reckon_sql.HttpEngine(url, f"reckon_sqltest_{uuid.uuid4().hex[:12]}")
    eng.load(fixture_dir)
    yield eng
    eng.drop()


@pytest.fixture(scope="session")
def time_range(fixture_meta) -> tuple[int, int]:
    """The dashboard time range the tests use: around the demo run."""
    t = fixture_meta["generated_at"]
    return t - 6 * 3600, t + 3600
