#!/usr/bin/env python3
"""Produce the SQL fixture: the data of one `reckon demo` run, as reckon wrote it to ClickHouse.

    make_fixture.py --out DIR [--clickhouse URL] [--reckon BIN]

1. uses the ClickHouse server at URL (default: $RECKON_TEST_CLICKHOUSE, else starts a throwaway
   one with scripts/clickhouse-test-server) and creates a database of its own there;
2. runs `reckon serve --store clickhouse://...` on free loopback ports;
3. runs `reckon demo --once --target ...` against it (every scenario, ~30 s);
4. stops the server (so everything is flushed) and dumps every reckon table, all rows including
   superseded versions, as TabSeparatedWithNamesAndTypes into DIR/<table>.tsv, plus
   DIR/meta.json (counts, versions, the demo's exit code and table);
5. drops its database.

The tests load DIR into chDB (a current engine) and the 18.16 server. The fixture is generated
at test time rather than committed, so it always reflects what this reckon writes.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import reckon_sql  # noqa: E402

ROOT = reckon_sql.ROOT


def free_port() -> int:
    """A loopback port free now, below the kernel's ephemeral range (32768-60999 on Linux). A
    port bind(0) handed out is back in that range once released, and the kernel may give it to
    any outgoing connection before the server it was meant for binds it (seen in CI: an
    Alertmanager's bind refused). A random port below the range is not handed out that way."""
    for _ in range(200):
        port = random.randrange(20000, 32000)
        with socket.socket() as s:
            try:
                s.bind(("127.0.0.1", port))
            except OSError:
                continue
            return port
    raise RuntimeError("no free loopback port in 20000-32000")


def find_reckon() -> Path:
    """$RECKON_BIN, else the newest reckon `cargo build` made (debug or release; `cargo test` in
    .ci/run builds the debug one)."""
    if os.environ.get("RECKON_BIN"):
        return Path(os.environ["RECKON_BIN"])
    target = Path(os.environ.get("CARGO_TARGET_DIR") or ROOT / "target")
    found = [p for p in (target / "debug" / "reckon", target / "release" / "reckon") if p.exists()]
    if not found:
        raise SystemExit(f"no reckon binary under {target}: run `cargo build` first or pass --reckon")
    return max(found, key=lambda p: p.stat().st_mtime)


def wait_ready(url: str, proc: subprocess.Popen, log: Path, seconds: float = 60) -> None:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise SystemExit(f"reckon serve exited with {proc.returncode}:\n{log.read_text()[-4000:]}")
        try:
            with urllib.request.urlopen(url + "/readyz", timeout=2) as r:
                if r.status == 200:
                    return
        except OSError:
            pass
        time.sleep(0.2)
    raise SystemExit(f"reckon serve not ready within {seconds}s:\n{log.read_text()[-4000:]}")


def stop(proc: subprocess.Popen, seconds: float = 20) -> None:
    if proc.poll() is None:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(seconds)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


def make(out: Path, ch_url: str, reckon: Path) -> dict:
    out.mkdir(parents=True, exist_ok=True)
    db = f"reckon_fixture_{os.getpid()}_{int(time.time())}"
    ch = reckon_sql.HttpEngine(ch_url)
    ch.run(f"CREATE DATABASE IF NOT EXISTS {db}")
    work = Path(tempfile.mkdtemp(prefix="reckon-fixture-"))
    grpc, http, api = free_port(), free_port(), free_port()
    host_port = ch_url.split("://", 1)[1].rstrip("/")
    env = {k: v for k, v in os.environ.items() if not k.startswith("RECKON_")}
    serve_log = work / "serve.log"
    started = time.monotonic()
    try:
        with open(serve_log, "w") as log:
            serve = subprocess.Popen(
                [str(reckon), "serve",
                 "--store", f"clickhouse://default:@{host_port}/{db}",
                 "--grpc-addr", f"127.0.0.1:{grpc}",
                 "--http-addr", f"127.0.0.1:{http}",
                 "--api-addr", f"127.0.0.1:{api}",
                 "--data-dir", str(work / "data"),
                 "--contracts", str(ROOT / "contracts"),
                 "--log-filter", "warn"],
                cwd=work, env=env, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
            )
        try:
            wait_ready(f"http://127.0.0.1:{api}", serve, serve_log)
            demo = subprocess.run(
                [str(reckon), "demo", "--once", "--target", f"http://127.0.0.1:{api}"],
                cwd=work, env={**env, "RECKON_DEMO_OTLP": f"http://127.0.0.1:{grpc}"},
                capture_output=True, text=True, timeout=300, stdin=subprocess.DEVNULL,
            )
        finally:
            stop(serve)
        (out / "demo.txt").write_text(demo.stdout + demo.stderr)
        counts = {}
        for table in reckon_sql.data_tables():
            # Every row, superseded versions included: the views and FINAL must do the collapsing
            # in the engine under test, as they do in production before merges have run.
            raw = ch.run(f"SELECT * FROM {db}.{table} FORMAT TabSeparatedWithNamesAndTypes")
            (out / f"{table}.tsv").write_bytes(raw)
            counts[table] = max(raw.count(b"\n") - 2, 0)
        meta = {
            "clickhouse_version": ch.query("SELECT version() AS v").rows[0][0],
            "reckon": str(reckon),
            "demo_exit_code": demo.returncode,
            "seconds": round(time.monotonic() - started, 1),
            "generated_at": int(time.time()),
            "rows": counts,
        }
        (out / "meta.json").write_text(json.dumps(meta, indent=2) + "\n")
        return meta
    finally:
        try:
            ch.run(f"DROP DATABASE IF EXISTS {db}")
        finally:
            shutil.rmtree(work, ignore_errors=True)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", required=True, type=Path)
    ap.add_argument("--clickhouse", default=os.environ.get("RECKON_TEST_CLICKHOUSE"))
    ap.add_argument("--reckon", type=Path)
    a = ap.parse_args()
    reckon = a.reckon or find_reckon()
    own_dir = None
    url = a.clickhouse
    if not url:
        own_dir = tempfile.mkdtemp(prefix="reckon-fixture-ch-")
        url = subprocess.run([str(ROOT / "scripts" / "clickhouse-test-server"), "start", own_dir],
                             check=True, capture_output=True, text=True).stdout.strip()
    try:
        meta = make(a.out, url, reckon)
    finally:
        if own_dir:
            subprocess.run([str(ROOT / "scripts" / "clickhouse-test-server"), "stop", own_dir], check=False)
    print(json.dumps(meta, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
