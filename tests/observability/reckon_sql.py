"""Shared helpers for the observability tests: reckon's ClickHouse DDL, the Grafana ClickHouse
plugin's macro expansion, the `queries/` file headers, small clients for chDB and the 18.16
server, and the comparison of one query's rows from both.

Nothing here imports chDB at module load, so the static checks run without it.
"""

from __future__ import annotations

import json
import re
import urllib.parse
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
SCHEMA_RS = ROOT / "src" / "store" / "clickhouse" / "schema.rs"
QUERIES_DIR = ROOT / "queries"
DASHBOARDS_DIR = ROOT / "dashboards"
PROVISIONING_DIR = ROOT / "grafana" / "provisioning"

# The uid the provisioned datasource is created with; every panel, variable and alert query
# refers to it, so a provisioned Grafana needs no import step and no `${DS_...}` mapping.
DATASOURCE_UID = "reckon-clickhouse"
DATASOURCE_TYPE = "grafana-clickhouse-datasource"

# The tables DESIGN.md names (prefix reckon_) plus the migrations bookkeeping table, the
# notification outbox, the routes to intents out of memory, the API's lookups by target,
# object and key, the owners of stored spans (the writer's look-up by span identity), and the
# listings of intents and escalations sorted by their fixed places.
EXPECTED_TABLES = {
    "reckon_schema_migrations",
    "reckon_attempts",
    "reckon_readbacks",
    "reckon_records",
    "reckon_verdicts",
    "reckon_escalations",
    "reckon_findings",
    "reckon_outbox",
    "reckon_routes",
    "reckon_meta",
    "reckon_intent_lookup",
    "reckon_span_owners",
    "reckon_intent_list",
    "reckon_escalation_list",
    "reckon_listing_hours",
    "reckon_listing_counts",
    "reckon_intent_tally",
    "reckon_intent_activity",
    "reckon_report_counts",
    "reckon_report_findings",
    "reckon_record_lookup",
    "reckon_finding_times",
}
EXPECTED_VIEWS = {"reckon_current_verdicts", "reckon_current_findings"}


# --------------------------------------------------------------------------------------------
# The DDL, read out of schema.rs
# --------------------------------------------------------------------------------------------

_CONST_RE = re.compile(r'pub const (\w+): &str = "(.*?)";', re.S)
# Raw string literals (`r#"..."#`), for statements that hold quotes or backslashes of their own.
_RAW_CONST_RE = re.compile(r'pub const (\w+): &str = r#"(.*?)"#;', re.S)
_MIGRATIONS_RE = re.compile(r"pub const MIGRATIONS: &\[Migration\] = &\[(.*?)\n\];", re.S)
_STATEMENTS_RE = re.compile(r"statements: &\[(.*?)\]", re.S)
_CREATE_RE = re.compile(r"CREATE (TABLE|VIEW) IF NOT EXISTS (\w+)")


def schema_statements() -> list[str]:
    """Every DDL statement reckon runs, in the order it runs them: `CREATE_MIGRATIONS`, then each
    migration's `statements` in order. Read from schema.rs rather than copied, so the tests follow
    the schema when it grows (the consts are plain string literals without escapes, or raw ones; a test checks
    that every const a migration names was found)."""
    text = SCHEMA_RS.read_text()
    consts = {m.group(1): m.group(2).strip() for m in _CONST_RE.finditer(text)}
    consts.update({m.group(1): m.group(2).strip() for m in _RAW_CONST_RE.finditer(text)})
    mig = _MIGRATIONS_RE.search(text)
    if not mig:
        raise AssertionError("MIGRATIONS not found in schema.rs")
    order = ["CREATE_MIGRATIONS"]
    for block in _STATEMENTS_RE.findall(mig.group(1)):
        order += [n.strip() for n in block.split(",") if n.strip()]
    missing = [n for n in order if n not in consts]
    if missing:
        raise AssertionError(f"schema.rs consts not extracted: {missing}")
    # A sliced fill (schema.rs `SLICE`) runs whole here: one slice of everything.
    return [consts[n].replace("{slice}", "1") for n in order]


def created_objects(statements: list[str]) -> dict[str, str]:
    """name -> 'TABLE' | 'VIEW' for the given DDL."""
    out = {}
    for s in statements:
        m = _CREATE_RE.search(s)
        if m:
            out[m.group(2)] = m.group(1)
    return out


def data_tables() -> list[str]:
    """The tables that hold data (what a fixture dumps), in DDL order."""
    return [n for n, k in created_objects(schema_statements()).items() if k == "TABLE"]


# --------------------------------------------------------------------------------------------
# Grafana + grafana-clickhouse-datasource v4 macro expansion
# --------------------------------------------------------------------------------------------


@dataclass
class GrafanaContext:
    """What Grafana hands a query: the time range (unix seconds), the panel interval, and the
    dashboard variables' current values (a str, or a list for multi-value; `$__all` for All)."""

    from_s: int
    to_s: int
    interval_s: float = 60.0
    variables: dict[str, object] = field(default_factory=dict)
    # For All: the values Grafana substitutes (every option of the variable).
    all_values: dict[str, list[str]] = field(default_factory=dict)


def _macro_args(sql: str, open_paren: int) -> tuple[list[str], int] | None:
    """The plugin frontend's getMacroArgs: split on top-level commas up to the matching `)`.
    Returns the raw args (not trimmed) and the index just past the `)`."""
    depth = 0
    args = []
    last = open_paren + 1
    for i in range(open_paren, len(sql)):
        c = sql[i]
        if c == "(":
            depth += 1
        elif c == ")":
            depth -= 1
        if c == "," and depth == 1:
            args.append(sql[last:i])
            last = i + 1
        if depth == 0:
            args.append(sql[last:i])
            return args, i + 1
    return None


def apply_conditional_all(sql: str, ctx: GrafanaContext) -> str:
    """`$__conditionalAll(condition, $var)`: the condition, or `1=1` when the variable is All or
    empty. Expanded in the plugin's frontend before variables, last occurrence first."""
    macro = "$__conditionalAll("
    idx = sql.rfind(macro)
    while idx != -1:
        parsed = _macro_args(sql, idx + len(macro) - 1)
        if parsed is None or len(parsed[0]) != 2:
            return sql
        (cond, var_arg), end = parsed
        m = re.search(r"(?<=\$\{)[\w\d]+(?=\})|(?<=\$)[\w\d]+", var_arg.strip())
        phrase = cond
        if m:
            value = ctx.variables.get(m.group(0))
            text = ",".join(value) if isinstance(value, list) else ("" if value is None else str(value))
            if text in ("", "$__all"):
                phrase = "1=1"
        sql = sql[:idx] + phrase + sql[end:]
        idx = sql.rfind(macro)
    return sql


# Grafana's variable syntax: $name, [[name:fmt]], ${name.field:fmt}.
_VAR_RE = re.compile(r"\$(\w+)|\[\[(\w+?)(?::(\w+))?\]\]|\$\{(\w+)(?:\.([^:^\}]+))?(?::([^\}]+))?\}")


def _format_value(value, fmt: str | None) -> str:
    values = value if isinstance(value, list) else [value]
    if fmt is None:
        # The plugin's own formatter (CHDatasource.format): arrays become 'a','b'; a single
        # value is substituted raw, so SQL quotes a single-value variable itself.
        if isinstance(value, list):
            return "'" + "','".join(values) + "'"
        return str(value)
    if fmt == "raw":
        return ",".join(values)
    if fmt == "singlequote":
        return ",".join("'" + v.replace("'", "\\'") + "'" for v in values)
    if fmt == "doublequote":
        return ",".join('"' + v.replace('"', '\\"') + '"' for v in values)
    if fmt == "sqlstring":
        return ",".join("'" + v.replace("'", "''") + "'" for v in values)
    if fmt == "csv":
        return ",".join(values)
    raise AssertionError(f"variable format :{fmt} is not handled by the test harness")


def replace_variables(sql: str, ctx: GrafanaContext) -> str:
    """Grafana's templateSrv.replace for the dashboard's own variables. Names Grafana does not
    know (the plugin's `$__` macros) are left for the backend."""

    def sub(m: re.Match) -> str:
        name = m.group(1) or m.group(2) or m.group(4)
        fmt = m.group(3) or m.group(6)
        if name not in ctx.variables:
            return m.group(0)
        value = ctx.variables[name]
        if value == "$__all" or value == ["$__all"]:
            value = list(ctx.all_values.get(name, []))
        return _format_value(value, fmt)

    return _VAR_RE.sub(sub, sql)


def _dt(s: int) -> str:
    return f"toDateTime({int(s)})"


def _dt64(s: int) -> str:
    return f"fromUnixTimestamp64Milli({int(s) * 1000})"


def _date(s: int) -> str:
    import datetime as _d

    return "toDate('" + _d.datetime.fromtimestamp(int(s), _d.timezone.utc).strftime("%Y-%m-%d") + "')"


def backend_macros(sql: str, ctx: GrafanaContext) -> str:
    """The plugin backend's macros (pkg/macros/macros.go of grafana/clickhouse-datasource
    v4.20.0, `ClickHouseMacros`), run after the frontend: each name, the text it becomes.
    The SDK defaults the plugin keeps as they are ($__interval, $__interval_ms, $__table,
    $__column) and the statement macros ($__columns, $__lttb, ...) are not modelled: expand()
    fails on a query that uses them. (The plugin also skips macros inside SQL comments; the
    dashboards put none there, and a test holds them to that.)"""
    f, t = ctx.from_s, ctx.to_s
    secs = max(int(ctx.interval_s), 1)
    ms = max(int(ctx.interval_s * 1000), 1)

    def one(col):
        return col[0]

    table = {
        "fromTime": lambda a: _dt(f),
        "toTime": lambda a: _dt(t),
        "fromTime_ms": lambda a: _dt64(f),
        "toTime_ms": lambda a: _dt64(t),
        "timeFilter": lambda a: f"{one(a)} >= {_dt(f)} AND {one(a)} <= {_dt(t)}",
        "timeFilter_ms": lambda a: f"{one(a)} >= {_dt64(f)} AND {one(a)} <= {_dt64(t)}",
        "dateFilter": lambda a: f"{one(a)} >= {_date(f)} AND {one(a)} <= {_date(t)}",
        "dateTimeFilter": lambda a: f"({a[0]} >= {_date(f)} AND {a[0]} <= {_date(t)}) AND "
        f"({a[1]} >= {_dt(f)} AND {a[1]} <= {_dt(t)})",
        "timeFrom": lambda a: f"{one(a)} >= {_dt(f)}",
        "timeTo": lambda a: f"{one(a)} <= {_dt(t)}",
        "timeGroup": lambda a: f"toStartOfInterval(toDateTime({a[0]}), INTERVAL {_go_duration_s(a[1])} second)",
        "timeInterval": lambda a: f"toStartOfInterval(toDateTime({one(a)}), INTERVAL {secs} second)",
        "timeInterval_ms": lambda a: f"toStartOfInterval(toDateTime64({one(a)}, 3), INTERVAL {ms} millisecond)",
        "interval_s": lambda a: str(secs),
    }
    table["dt"] = table["dateTimeFilter"]
    arg_counts = {"timeFilter": 1, "timeFilter_ms": 1, "dateFilter": 1, "dateTimeFilter": 2, "dt": 2,
                  "timeInterval": 1, "timeInterval_ms": 1, "timeFrom": 1, "timeTo": 1, "timeGroup": 2}
    # Longest names first, and a word boundary after the name, as sqlds matches them.
    for name in sorted(table, key=len, reverse=True):
        pat = re.compile(r"\$__" + re.escape(name) + r"\b")
        while True:
            m = pat.search(sql)
            if not m:
                break
            end = m.end()
            args: list[str] = []
            if end < len(sql) and sql[end] == "(":
                parsed = _macro_args(sql, end)
                if parsed is None:
                    raise AssertionError(f"unbalanced parentheses after $__{name}")
                args = [a.strip() for a in parsed[0]]
                end = parsed[1]
            want = arg_counts.get(name)
            if want is not None and len(args) != want:
                raise AssertionError(f"$__{name} expects {want} argument(s), got {args}")
            sql = sql[: m.start()] + table[name](args) + sql[end:]
    return sql


def _go_duration_s(arg: str) -> int:
    """$__timeGroup's period (Go's time.ParseDuration, quotes stripped) in whole seconds."""
    text = arg.strip().strip("'\"")
    units = {"ns": 1e-9, "us": 1e-6, "µs": 1e-6, "ms": 1e-3, "s": 1, "m": 60, "h": 3600}
    parts = re.findall(r"(\d+(?:\.\d+)?)(ns|us|µs|ms|s|m|h)", text)
    if not parts or "".join(n + u for n, u in parts) != text:
        raise AssertionError(f"$__timeGroup: invalid interval {arg!r}")
    secs = round(sum(float(n) * units[u] for n, u in parts))
    if secs <= 0:
        raise AssertionError(f"$__timeGroup: interval must be positive, got {arg!r}")
    return secs


def expand(sql: str, ctx: GrafanaContext) -> str:
    """A panel's rawSql as ClickHouse receives it. Fails on anything left unexpanded."""
    out = backend_macros(replace_variables(apply_conditional_all(sql, ctx), ctx), ctx)
    left = re.findall(r"\$\{?\w+", out)
    if left:
        raise AssertionError(f"unexpanded macros or variables {left} in:\n{out}")
    return out


# --------------------------------------------------------------------------------------------
# queries/*.sql headers
# --------------------------------------------------------------------------------------------


@dataclass
class QueryFile:
    path: Path
    sql: str
    question: str
    params: dict[str, str]  # name -> ClickHouse type, from the header
    portable: bool  # runs on 18.16 (with parameters as literals)
    columns: list[str]  # the result columns the header promises, in order


_PARAM_USE_RE = re.compile(r"\{(\w+):([\w()]+)\}")


def parse_query_file(path: Path) -> QueryFile:
    text = path.read_text()
    header = []
    for line in text.splitlines():
        if line.startswith("--"):
            header.append(line[2:].strip())
        elif line.strip():
            break
    h = "\n".join(header)
    q = re.search(r"^Question:\s*(.+)$", h, re.M)
    p = re.search(r"^Runs on ClickHouse 18\.16:\s*(yes|no)\b", h, re.M)
    c = re.search(r"^Columns:\s*(.+)$", h, re.M)
    params = {}
    for m in re.finditer(r"^\s*\{(\w+):([\w()]+)\}", h, re.M):
        params[m.group(1)] = m.group(2)
    return QueryFile(
        path=path,
        sql=text,
        question=q.group(1).strip() if q else "",
        params=params,
        portable=bool(p and p.group(1) == "yes"),
        columns=[x.strip() for x in c.group(1).split(",")] if c else [],
    )


def used_params(sql: str) -> dict[str, str]:
    body = "\n".join(l for l in sql.splitlines() if not l.lstrip().startswith("--"))
    return {m.group(1): m.group(2) for m in _PARAM_USE_RE.finditer(body)}


def bind_params(sql: str, values: dict[str, object]) -> str:
    """`{name:Type}` -> `CAST('value', 'Type')`-style literals. Both engines accept this, and 18.16
    predates server-side query parameters."""

    def sub(m: re.Match) -> str:
        name, typ = m.group(1), m.group(2)
        if name not in values:
            raise AssertionError(f"no test value for parameter {name}")
        v = str(values[name]).replace("\\", "\\\\").replace("'", "\\'")
        return f"CAST('{v}' AS {typ})"

    # Comment lines are left alone: the header names the parameters in the same syntax.
    return "\n".join(l if l.lstrip().startswith("--") else _PARAM_USE_RE.sub(sub, l) for l in sql.splitlines())


# --------------------------------------------------------------------------------------------
# Engines
# --------------------------------------------------------------------------------------------


@dataclass
class Result:
    names: list[str]
    types: list[str]
    rows: list[list]


def parse_json_compact(raw: bytes) -> Result:
    doc = json.loads(raw)
    return Result(
        names=[m["name"] for m in doc["meta"]],
        types=[m["type"] for m in doc["meta"]],
        rows=doc["data"],
    )


class ChdbEngine:
    """An in-process current ClickHouse (chDB) holding reckon's schema in one database."""

    def __init__(self, path: str, database: str):
        from chdb import session as chs

        self.s = chs.Session(path)
        self.database = database
        self.s.query(f"CREATE DATABASE IF NOT EXISTS {database}")
        # The session keeps its current database, so unqualified names (the DDL, the views,
        # every dashboard query) resolve as they do for the plugin's defaultDatabase.
        self.s.query(f"USE {database}")

    def run(self, sql: str) -> None:
        self.s.query(sql)

    def query(self, sql: str) -> Result:
        raw = self.s.query(sql.rstrip().rstrip(";"), "JSONCompact").bytes()
        return parse_json_compact(raw)

    def load(self, fixture: Path) -> None:
        for stmt in schema_statements():
            self.run(stmt)
        for table in data_tables():
            path = fixture / f"{table}.tsv"
            self.run(f"INSERT INTO {table} SELECT * FROM file('{path}', 'TabSeparatedWithNamesAndTypes')")

    def close(self) -> None:
        self.s.close()


class HttpEngine:
    """A ClickHouse server over HTTP (the 18.16 test server)."""

    def __init__(self, url: str, database: str | None = None, timeout: float = 60):
        self.url = url.rstrip("/")
        self.database = database
        self.timeout = timeout

    def _post(self, sql: str, body_fmt: str | None = None, data: bytes | None = None) -> bytes:
        params = {}
        if self.database:
            params["database"] = self.database
        if data is not None:
            params["query"] = sql
            body = data
        else:
            body = sql.encode()
        url = self.url + "/?" + urllib.parse.urlencode(params)
        req = urllib.request.Request(url, data=body, method="POST")
        try:
            with urllib.request.urlopen(req, timeout=self.timeout) as resp:
                return resp.read()
        except urllib.error.HTTPError as e:
            raise AssertionError(f"ClickHouse error: {e.read().decode(errors='replace')}\n--- query:\n{sql}") from None

    def run(self, sql: str) -> bytes:
        return self._post(sql)

    def insert(self, sql: str, data: bytes) -> None:
        self._post(sql, data=data)

    def query(self, sql: str) -> Result:
        return parse_json_compact(self._post(sql.rstrip().rstrip(";") + "\nFORMAT JSONCompact"))

    def load(self, fixture: Path) -> None:
        """Creates self.database with reckon's DDL and loads the fixture into it."""
        db, self.database = self.database, None
        self.run(f"CREATE DATABASE IF NOT EXISTS {db}")
        self.database = db
        for stmt in schema_statements():
            self.run(stmt)
        for table in data_tables():
            data = (fixture / f"{table}.tsv").read_bytes()
            self.insert(f"INSERT INTO {table} FORMAT TabSeparatedWithNamesAndTypes", data)

    def drop(self) -> None:
        db, self.database = self.database, None
        self.run(f"DROP DATABASE IF EXISTS {db}")
        self.database = db


# --------------------------------------------------------------------------------------------
# Comparing one query's rows from the two engines
# --------------------------------------------------------------------------------------------

# Columns computed from `now()`: the engines are asked one after the other, so across a
# second's boundary they differ by one (seen in CI).
NOW_DERIVED = {"age_s"}


def _cell(v) -> str:
    """A value as comparable text: the engines type equal results differently (18.16 quotes
    64-bit integers in JSON, chDB does not; Float64 beside UInt64), but must not disagree."""
    if isinstance(v, bool):
        v = int(v)
    if isinstance(v, (int, float)):
        return f"{float(v):.6g}"
    if isinstance(v, str):
        try:
            return f"{float(v):.6g}"
        except ValueError:
            return v
    if isinstance(v, list):
        return "[" + ",".join(_cell(x) for x in v) + "]"
    return str(v)


def disagreement(a: Result, b: Result, now_derived=NOW_DERIVED) -> str | None:
    """None when the two results hold the same columns and rows (rows in any order; columns
    computed from `now()` within a second of each other), else what differs."""
    if a.names != b.names:
        return f"columns differ: {a.names} != {b.names}"
    ages = [i for i, n in enumerate(a.names) if n in now_derived]

    def keyed(rows):
        return sorted(([_cell(v) for i, v in enumerate(r) if i not in ages], [int(r[i]) for i in ages])
                      for r in rows)

    ka, kb = keyed(a.rows), keyed(b.rows)
    ra, rb = [r for r, _ in ka], [r for r, _ in kb]
    if ra != rb:
        return (f"rows differ ({len(ra)} and {len(rb)}): only in the first {[r for r in ra if r not in rb][:5]}, "
                f"only in the second {[r for r in rb if r not in ra][:5]}")
    for (_, ta), (_, tb) in zip(ka, kb):
        if any(abs(x - y) > 1 for x, y in zip(ta, tb)):
            return f"columns computed from now() differ by more than a second: {ta} and {tb}"
    return None
