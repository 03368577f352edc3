"""Someone gets paged: reckon's own notifications against real receivers.

- Debian's Alertmanager (`prometheus-alertmanager`, the repository's alertmanager/alertmanager.yml,
  a free loopback port, storage in a temporary directory) and a real `reckon serve` configured
  with `[[notify]] kind = "alertmanager"`: a demo duplicate refund appears in Alertmanager's
  `/api/v2/alerts` with the labels DESIGN.md pins, is re-sent while open (it outlives the end
  it was first sent with), and ends when a person resolves the escalation through the API.
- The same reckon also has a `[[notify]] kind = "webhook"` pointing at a receiver here: every
  delivery verifies with the Python verifier printed in the README (extracted from it, so the
  README cannot drift from what reckon sends).
- `reckon demo --alertmanager URL` (what README tells a person to run from a fresh clone): the
  in-process reckon's duplicate refund is an alert in the local Alertmanager, and resolving the
  escalation at the address the demo prints ends it.

    RECKON_BIN=target/debug/reckon python3 -m pytest tests/paging
"""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
import subprocess
import threading
import time
import urllib.error
import urllib.parse
import urllib.request
from datetime import datetime
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

import sys

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "pysupport"))
from procs import Proc, free_port, reckon_bin, wait_for  # noqa: E402

ROOT = Path(__file__).resolve().parents[2]
SCENARIO = "original still running, resent under a new key after the empty read-back"
TOOL = "demo_issue_refund"
SECRET = "whsec_paging_test"


def http(method: str, url: str, body: dict | None = None, timeout: float = 10) -> tuple[int, str]:
    data = json.dumps(body).encode() if body is not None else None
    req = urllib.request.Request(url, data=data, method=method,
                                 headers={"content-type": "application/json"} if data else {})
    try:
        with urllib.request.urlopen(req, timeout=timeout) as r:
            return r.status, r.read().decode()
    except urllib.error.HTTPError as e:
        return e.code, e.read().decode()


def clean_env() -> dict:
    return {k: v for k, v in os.environ.items() if not k.startswith("RECKON_")}


@pytest.fixture
def alertmanager(tmp_path):
    """Debian's Alertmanager with the repository's config, clustering off; its base URL."""
    binary = shutil.which("prometheus-alertmanager") or "/usr/bin/prometheus-alertmanager"
    if not os.path.exists(binary):
        pytest.fail("prometheus-alertmanager is missing: apt-get install prometheus-alertmanager")
    port = free_port()
    proc = Proc("alertmanager", [binary, f"--config.file={ROOT / 'alertmanager' / 'alertmanager.yml'}",
                                 f"--storage.path={tmp_path / 'am'}",
                                 f"--web.listen-address=127.0.0.1:{port}", "--cluster.listen-address="],
                tmp_path)
    url = f"http://127.0.0.1:{port}"
    try:
        wait_for("alertmanager ready", lambda: proc.alive() and http("GET", url + "/-/ready")[0] == 200)
        yield url
    finally:
        proc.stop()


def reckon_alerts(am: str, escalation_id: str | None = None) -> list[dict]:
    """ReckonEscalation alerts Alertmanager holds and has not ended (it leaves ended ones out)."""
    filters = ['alertname="ReckonEscalation"']
    if escalation_id:
        filters.append(f'escalation_id="{escalation_id}"')
    query = urllib.parse.urlencode([("filter", f) for f in filters] + [("active", "true")])
    status, body = http("GET", f"{am}/api/v2/alerts?{query}")
    assert status == 200, body
    return json.loads(body)


def ends(alert: dict) -> float:
    return datetime.fromisoformat(alert["endsAt"].replace("Z", "+00:00")).timestamp()


def check_alert(alert: dict, escalation: dict, base: str):
    labels = alert["labels"]
    assert labels == {
        "alertname": "ReckonEscalation",
        "severity": "critical",
        "tool": TOOL,
        "finding": "duplicate_effect",
        "intent_id": escalation["intent_id"],
        "escalation_id": escalation["id"],
    }, labels
    assert "duplicate_effect" in alert["annotations"]["summary"], alert
    assert escalation["id"] in alert["annotations"]["description"], alert
    assert alert["generatorURL"] == f"{base}/escalations/{escalation['id']}", alert
    assert alert["status"]["state"] == "active", alert
    # The link opens the escalation's page.
    status, page = http("GET", alert["generatorURL"])
    assert status == 200 and escalation["id"] in page


def readme_verifier():
    """The README's Reckon-Signature verifier, as printed there."""
    text = (ROOT / "README.md").read_text()
    m = re.search(r"<!-- reckon-signature-verifier -->\s*```python\n(.*?)```", text, re.S)
    assert m, "README.md has no Python verifier after <!-- reckon-signature-verifier -->"
    code = m.group(1)
    body = [line for line in code.splitlines() if line.strip() and not line.startswith(("import", "from"))]
    assert len(body) <= 5, f"the README promises a five-line verifier:\n{code}"
    scope: dict = {}
    exec(compile(code, "README.md", "exec"), scope)
    return scope["verify"]


class Hooks:
    """A webhook receiver: records every POST and answers 200."""

    def __init__(self):
        self.got: list[tuple[dict, bytes]] = []
        hooks = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self):
                body = self.rfile.read(int(self.headers.get("content-length", 0)))
                hooks.got.append(({k.lower(): v for k, v in self.headers.items()}, body))
                self.send_response(200)
                self.end_headers()

            def log_message(self, *args):
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}/hook"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def close(self):
        self.server.shutdown()


def test_serve_pages_through_alertmanager_until_resolved(alertmanager, tmp_path):
    hooks = Hooks()
    grpc, otlp_http, api = free_port(), free_port(), free_port()
    base = f"http://127.0.0.1:{api}"
    (tmp_path / "reckon.toml").write_text(f"""
[[notify]]
kind = "alertmanager"
url = "{alertmanager}"
resend_interval = "1s"

[[notify]]
kind = "webhook"
url = "{hooks.url}"
secret = "{SECRET}"
name = "hooks"
""")
    env = clean_env()
    reckon = Proc("reckon", [str(reckon_bin()), "serve", "--config", str(tmp_path / "reckon.toml"),
                             "--grpc-addr", f"127.0.0.1:{grpc}", "--http-addr", f"127.0.0.1:{otlp_http}",
                             "--api-addr", f"127.0.0.1:{api}", "--data-dir", str(tmp_path / "data"),
                             "--contracts", str(ROOT / "contracts"), "--log-filter", "warn"],
                  tmp_path, env)
    try:
        wait_for("reckon /readyz", lambda: reckon.alive() and http("GET", base + "/readyz")[0] == 200)
        demo = subprocess.run([str(reckon_bin()), "demo", "--once", "--target", base,
                               "--otlp", f"http://127.0.0.1:{grpc}", "--only", SCENARIO],
                              cwd=tmp_path, env=env, capture_output=True, text=True, timeout=120,
                              stdin=subprocess.DEVNULL)
        assert demo.returncode == 0, demo.stdout + demo.stderr
        status, body = http("GET", base + "/api/v1/escalations?status=open")
        assert status == 200, body
        open_ = [e for e in json.loads(body)["items"] if any(f["kind"] == "duplicate_effect" for f in e["findings"])]
        assert len(open_) == 1, body
        escalation = open_[0]

        # The duplicate pages: one alert, with the pinned labels and a link to its page.
        alerts = wait_for("the escalation's alert in Alertmanager",
                          lambda: reckon_alerts(alertmanager, escalation["id"]))
        assert len(alerts) == 1, alerts
        check_alert(alerts[0], escalation, base)

        # Re-sent while open: it outlives the end it was first sent with (4 intervals ahead).
        first_end = ends(alerts[0])
        assert first_end > time.time(), alerts[0]
        wait_for("the alert re-sent past its first end",
                 lambda: time.time() > first_end + 1
                 and [a for a in reckon_alerts(alertmanager, escalation["id"]) if ends(a) > first_end])

        # A person works it through the API; the alert ends.
        status, body = http("POST", f"{base}/api/v1/escalations/{escalation['id']}/claim", {"by": "ana"})
        assert status == 200, body
        claimed = wait_for("the claim in the alert's description",
                           lambda: [a for a in reckon_alerts(alertmanager, escalation["id"])
                                    if "claimed by ana" in a["annotations"]["description"]])
        check_alert(claimed[0], escalation, base)
        status, body = http("POST", f"{base}/api/v1/escalations/{escalation['id']}/resolve",
                            {"by": "ana", "resolution": "reversed_extra_effect"})
        assert status == 200, body
        wait_for("the alert to end in Alertmanager",
                 lambda: reckon_alerts(alertmanager, escalation["id"]) == [])
        assert reckon_alerts(alertmanager) == [], "no other ReckonEscalation alert"

        # Every webhook delivery verifies with the README's verifier; the escalation's life is there.
        verify = readme_verifier()
        types = wait_for("the webhook's escalation.resolved",
                         lambda: (t := [json.loads(b)["type"] for h, b in hooks.got
                                        if json.loads(b)["escalation"]["id"] == escalation["id"]])
                         and t[-1] == "escalation.resolved" and t)
        assert types[0] == "escalation.opened" and "escalation.updated" in types, types
        for headers, body in hooks.got:
            assert verify(SECRET, headers["reckon-signature"], body), headers
            assert not verify("not-the-secret", headers["reckon-signature"], body)
            assert not verify(SECRET, headers["reckon-signature"], body + b" ")
            assert json.loads(body)["id"] == headers["reckon-delivery"]

        # The metrics say so too.
        status, text = http("GET", base + "/metrics")
        delivered = {k: float(v) for k, v in re.findall(
            r'^reckon_notifications_total\{kind="(\w+)",outcome="delivered"\} (\S+)$', text, re.M)}
        assert delivered.get("alertmanager", 0) >= 3 and delivered.get("webhook", 0) >= 3, delivered
    finally:
        reckon.stop()
        hooks.close()


def test_demo_pages_a_local_alertmanager(alertmanager, tmp_path):
    """`reckon demo --alertmanager URL`, as the README says to run it next to a local Alertmanager."""
    demo = subprocess.Popen([str(reckon_bin()), "demo", "--alertmanager", alertmanager, "--only", SCENARIO],
                            cwd=tmp_path, env=clean_env(), stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                            stdin=subprocess.DEVNULL, text=True)
    lines: list[str] = []
    try:
        # The demo prints the table, then where the queue is, and stays up until Ctrl-C.
        base = None
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline:
            line = demo.stdout.readline()
            if not line:
                pytest.fail(f"the demo exited ({demo.wait()}):\n{''.join(lines)}")
            lines.append(line)
            m = re.search(r"the escalation queue is (http://127\.0\.0\.1:\d+)/", line)
            if m:
                base = m.group(1)
            if line.startswith("Ctrl-C to stop"):
                break
        assert base, "".join(lines)
        out = "".join(lines)
        assert "1/1 scenarios pass" in out, out
        assert f"Alertmanager at {alertmanager}" in out, out

        status, body = http("GET", base + "/api/v1/escalations?status=open")
        assert status == 200, body
        dup = [e for e in json.loads(body)["items"] if any(f["kind"] == "duplicate_effect" for f in e["findings"])]
        assert len(dup) == 1, body
        escalation = dup[0]
        alerts = wait_for("the demo's duplicate refund in Alertmanager",
                          lambda: reckon_alerts(alertmanager, escalation["id"]))
        check_alert(alerts[0], escalation, base)

        status, body = http("POST", f"{base}/api/v1/escalations/{escalation['id']}/resolve",
                            {"by": "ana", "resolution": "reversed_extra_effect"})
        assert status == 200, body
        wait_for("the alert to end", lambda: reckon_alerts(alertmanager, escalation["id"]) == [])
    finally:
        if demo.poll() is None:
            demo.send_signal(signal.SIGINT)
            try:
                demo.wait(20)
            except subprocess.TimeoutExpired:
                demo.kill()
                demo.wait()
    assert demo.returncode == 0, "".join(lines) + (demo.stdout.read() if demo.stdout else "")
