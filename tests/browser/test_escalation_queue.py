"""The escalation queue in a real browser, paging through real Prometheus and Alertmanager.

A real `reckon serve` (SQLite, free loopback ports) gets a duplicate refund from
`reckon demo --only ...` (the seed note's careless resend under a new key). Debian's Prometheus
scrapes it every second with prometheus/rules.yml and alerts Debian's Alertmanager, configured by
alertmanager/alertmanager.yml; reckon itself also pushes the escalation there (`[[notify]] kind =
"alertmanager"`, the ReckonEscalation alert). Debian's chromium, driven through chromedriver (WebDriver) by
selenium, then does what the person on call does: loads the queue, opens the escalation, reads its
evidence, claims it, resolves it, and sees it leave the queue, the gauge fall to zero, the
ReckonDuplicateEffect alert end in Prometheus and in Alertmanager, and reckon's own
ReckonEscalation alert (whose link is the page the person worked) end in Alertmanager.

Screenshots go to $RECKON_BROWSER_ARTIFACTS (default: a fresh temporary directory, printed),
never into the repository.

    RECKON_BIN=target/debug/reckon python3 -m pytest tests/browser
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import tempfile
import time
import urllib.error
import urllib.parse
import urllib.request
from datetime import datetime
from pathlib import Path

import pytest

import sys

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "pysupport"))
from procs import Proc, free_port, reckon_bin, wait_for  # noqa: E402

ROOT = Path(__file__).resolve().parents[2]
SCENARIO = "original still running, resent under a new key after the empty read-back"
TOOL = "demo_issue_refund"
GAUGE = f'reckon_escalations_unresolved{{tool="{TOOL}",finding="duplicate_effect",severity="critical"}}'

from selenium import webdriver
from selenium.webdriver.chrome.service import Service
from selenium.webdriver.common.by import By
from selenium.webdriver.support import expected_conditions as EC
from selenium.webdriver.support.ui import WebDriverWait


def need(path: str, package: str) -> str:
    found = shutil.which(path) or (path if os.path.exists(path) else None)
    if not found:
        # A browser test that silently did not run is worse than a red one.
        pytest.fail(f"{path} is missing: apt-get install {package}")
    return found


def http_get(url: str, timeout: float = 5) -> tuple[int, str]:
    try:
        with urllib.request.urlopen(url, timeout=timeout) as r:
            return r.status, r.read().decode()
    except urllib.error.HTTPError as e:
        return e.code, e.read().decode()


@pytest.fixture(scope="module")
def artifacts() -> Path:
    out = Path(os.environ.get("RECKON_BROWSER_ARTIFACTS") or tempfile.mkdtemp(prefix="reckon-browser-"))
    out.mkdir(parents=True, exist_ok=True)
    assert ROOT not in out.resolve().parents, "screenshots stay out of the repository"
    print(f"\nbrowser test screenshots: {out}")
    return out


@pytest.fixture(scope="module")
def stack(tmp_path_factory):
    """reckon, Alertmanager and Prometheus, started in that order; their addresses."""
    prometheus = need("/usr/bin/prometheus", "prometheus")
    alertmanager = need("/usr/bin/prometheus-alertmanager", "prometheus-alertmanager")
    work = tmp_path_factory.mktemp("stack")
    env = {k: v for k, v in os.environ.items() if not k.startswith("RECKON_")}
    grpc, http, api, prom, am = (free_port() for _ in range(5))
    # reckon pages through the same Alertmanager (started next; pushes before it is up are retried).
    (work / "reckon.toml").write_text(f'[[notify]]\nkind = "alertmanager"\nurl = "http://127.0.0.1:{am}"\n')
    procs = []
    try:
        reckon = Proc("reckon", [str(reckon_bin()), "serve", "--config", str(work / "reckon.toml"),
                                 "--grpc-addr", f"127.0.0.1:{grpc}", "--http-addr", f"127.0.0.1:{http}",
                                 "--api-addr", f"127.0.0.1:{api}", "--data-dir", str(work / "data"),
                                 "--contracts", str(ROOT / "contracts"), "--log-filter", "warn"],
                      work, env)
        procs.append(reckon)
        base = f"http://127.0.0.1:{api}"
        wait_for("reckon /readyz", lambda: reckon.alive() and http_get(base + "/readyz")[0] == 200)

        # The repository's Alertmanager config as it is, clustering off.
        am_proc = Proc("alertmanager", [alertmanager,
                                        f"--config.file={ROOT / 'alertmanager' / 'alertmanager.yml'}",
                                        f"--storage.path={work / 'am'}",
                                        f"--web.listen-address=127.0.0.1:{am}",
                                        "--cluster.listen-address="], work)
        procs.append(am_proc)
        am_url = f"http://127.0.0.1:{am}"
        wait_for("alertmanager ready", lambda: am_proc.alive() and http_get(am_url + "/-/ready")[0] == 200)

        # The repository's rules, a config like prometheus/prometheus.yml at a test's pace.
        (work / "prometheus.yml").write_text(json.dumps({
            "global": {"scrape_interval": "1s", "evaluation_interval": "1s"},
            "rule_files": [str(ROOT / "prometheus" / "rules.yml")],
            "alerting": {"alertmanagers": [{"static_configs": [{"targets": [f"127.0.0.1:{am}"]}]}]},
            "scrape_configs": [{"job_name": "reckon", "metrics_path": "/metrics",
                                "static_configs": [{"targets": [f"127.0.0.1:{api}"]}]}],
        }))
        prom_proc = Proc("prometheus", [prometheus, f"--config.file={work / 'prometheus.yml'}",
                                        f"--storage.tsdb.path={work / 'tsdb'}",
                                        f"--web.listen-address=127.0.0.1:{prom}"], work)
        procs.append(prom_proc)
        prom_url = f"http://127.0.0.1:{prom}"
        wait_for("prometheus ready", lambda: prom_proc.alive() and http_get(prom_url + "/-/ready")[0] == 200)

        # A demo duplicate: two refunds for one intent.
        demo = subprocess.run([str(reckon_bin()), "demo", "--once", "--target", base,
                               "--otlp", f"http://127.0.0.1:{grpc}", "--only", SCENARIO],
                              cwd=work, env=env, capture_output=True, text=True, timeout=120,
                              stdin=subprocess.DEVNULL)
        assert demo.returncode == 0, demo.stdout + demo.stderr
        assert "1/1 scenarios pass" in demo.stdout, demo.stdout
        yield {"reckon": base, "prometheus": prom_url, "alertmanager": am_url, "procs": procs}
    finally:
        for p in reversed(procs):
            p.stop()


@pytest.fixture(scope="module")
def browser(tmp_path_factory):
    chromium = need("/usr/bin/chromium", "chromium")
    chromedriver = need("/usr/bin/chromedriver", "chromium-driver")
    opts = webdriver.ChromeOptions()
    opts.binary_location = chromium
    for arg in ("--headless", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage",
                "--disable-background-networking", "--disable-component-update", "--disable-sync",
                "--no-first-run", "--window-size=1400,1000",
                f"--user-data-dir={tmp_path_factory.mktemp('chromium-profile')}"):
        opts.add_argument(arg)
    opts.set_capability("goog:loggingPrefs", {"browser": "ALL"})
    driver = webdriver.Chrome(service=Service(executable_path=chromedriver), options=opts)
    driver.set_page_load_timeout(30)
    try:
        yield driver
    finally:
        driver.quit()


def prometheus_alerts(prom: str) -> list[dict]:
    status, body = http_get(prom + "/api/v1/alerts")
    assert status == 200, body
    return [a for a in json.loads(body)["data"]["alerts"]
            if a["labels"].get("alertname") == "ReckonDuplicateEffect" and a["labels"].get("tool") == TOOL]


def alertmanager_active(am: str) -> list[dict]:
    """The ReckonDuplicateEffect alerts Alertmanager holds for the demo tool that have not ended."""
    query = urllib.parse.urlencode({"filter": 'alertname="ReckonDuplicateEffect"'})
    status, body = http_get(f"{am}/api/v2/alerts?{query}")
    assert status == 200, body
    now = time.time()

    def ends(a) -> float:
        return datetime.fromisoformat(a["endsAt"].replace("Z", "+00:00")).timestamp()

    return [a for a in json.loads(body) if a["labels"].get("tool") == TOOL and ends(a) > now]


def escalation_alerts(am: str, escalation_id: str) -> list[dict]:
    """reckon's own alert for one escalation, while Alertmanager holds it active."""
    query = urllib.parse.urlencode([("filter", 'alertname="ReckonEscalation"'),
                                    ("filter", f'escalation_id="{escalation_id}"'), ("active", "true")])
    status, body = http_get(f"{am}/api/v2/alerts?{query}")
    assert status == 200, body
    return json.loads(body)


def gauge(base: str) -> float | None:
    status, text = http_get(base + "/metrics")
    assert status == 200
    for line in text.splitlines():
        if line.startswith(GAUGE + " "):
            return float(line.rsplit(" ", 1)[1])
    return None


def full_page_screenshot(driver, path: Path):
    height = driver.execute_script("return document.documentElement.scrollHeight")
    driver.set_window_size(1400, max(1000, min(int(height) + 40, 6000)))
    driver.save_screenshot(str(path))
    driver.set_window_size(1400, 1000)
    assert path.stat().st_size > 10_000, path


def no_console_errors(driver):
    severe = [e for e in driver.get_log("browser") if e["level"] == "SEVERE"]
    assert not severe, f"browser console errors (a CSP violation, a missing file, ...): {severe}"


def only_own_origin(driver, base: str):
    """Nothing is fetched from anywhere but reckon: the page works with no internet."""
    urls = driver.execute_script("return performance.getEntriesByType('resource').map(e => e.name)")
    assert urls, "the stylesheet was not loaded"
    for u in urls:
        assert u.startswith(base + "/"), f"fetched from elsewhere: {u}"


def test_person_works_a_duplicate_refund_to_the_end_of_the_alert(stack, browser, artifacts):
    base, prom, am = stack["reckon"], stack["prometheus"], stack["alertmanager"]
    wait = WebDriverWait(browser, 15)

    # The duplicate pages: the gauge is 1, Prometheus fires at once, Alertmanager has it.
    assert gauge(base) == 1.0
    firing = wait_for("ReckonDuplicateEffect firing in Prometheus",
                      lambda: [a for a in prometheus_alerts(prom) if a["state"] == "firing"])
    assert firing[0]["labels"]["severity"] == "critical"
    wait_for("ReckonDuplicateEffect in Alertmanager", lambda: alertmanager_active(am))

    # The queue.
    browser.get(base + "/")
    wait.until(EC.presence_of_element_located((By.ID, "queue")))
    no_console_errors(browser)
    only_own_origin(browser, base)
    assert browser.find_element(By.ID, "count-open").text == "1"
    rows = browser.find_elements(By.CSS_SELECTOR, "#queue tbody tr")
    dup = [r for r in rows if "duplicate_effect" in r.text]
    assert len(dup) == 1, [r.text for r in rows]
    row = dup[0]
    esc_id = row.get_attribute("data-escalation")
    assert "CRITICAL" in row.text.upper() and TOOL in row.text
    # reckon's own alert for it links to the page the person is about to open.
    pushed = wait_for("ReckonEscalation in Alertmanager", lambda: escalation_alerts(am, esc_id))
    assert pushed[0]["labels"]["tool"] == TOOL and pushed[0]["labels"]["finding"] == "duplicate_effect"
    assert pushed[0]["generatorURL"] == f"{base}/escalations/{esc_id}"
    full_page_screenshot(browser, artifacts / "1-queue.png")

    # One escalation: its evidence on a time axis, both sets of findings, the contract.
    row.find_element(By.CSS_SELECTOR, "a.esc-link").click()
    wait.until(EC.presence_of_element_located((By.ID, "escalation-id")))
    assert browser.current_url == f"{base}/escalations/{esc_id}"
    assert browser.find_element(By.ID, "escalation-id").text == esc_id
    timeline = browser.find_element(By.CSS_SELECTOR, "#timeline svg.timeline")
    assert timeline.size["width"] > 600 and timeline.size["height"] > 150, timeline.size
    lanes = [t.text for t in browser.find_elements(By.CSS_SELECTOR, "svg.timeline .lane-name")]
    assert lanes[:2] == ["attempt 1", "attempt 2"] and "read-backs" in lanes and "findings" in lanes, lanes
    assert sum(1 for name in lanes if name.startswith("re_")) == 2, f"two refund objects: {lanes}"
    marks = browser.find_elements(By.CSS_SELECTOR, "svg.timeline g.mark")
    assert len(marks) >= 7, len(marks)
    kept = browser.find_element(By.ID, "escalation-findings").text
    assert "duplicate_effect" in kept and "new_key_retry" in kept
    now = browser.find_element(By.ID, "verdict-findings").text
    assert "inconclusive_readback_acted_on" in now
    contract = browser.find_element(By.ID, "contract").text
    assert "demo.refund" in contract and "replay" in contract
    objects = browser.find_element(By.ID, "objects").text
    assert objects.count("succeeded") >= 2
    no_console_errors(browser)
    full_page_screenshot(browser, artifacts / "2-escalation.png")

    # Claim.
    browser.find_element(By.CSS_SELECTOR, "#claim-form input[name=by]").send_keys("ana")
    browser.find_element(By.ID, "claim").click()
    wait.until(EC.presence_of_element_located((By.ID, "notice")))
    assert browser.current_url.endswith(f"/escalations/{esc_id}?done=claimed")
    assert browser.find_element(By.CSS_SELECTOR, "h1 .status").text == "claimed"
    assert "by ana" in browser.find_element(By.CSS_SELECTOR, ".facts").text
    assert not browser.find_elements(By.ID, "claim-form")
    # Claimed is still unresolved: still paging.
    assert gauge(base) == 1.0

    # Resolve.
    by = browser.find_element(By.CSS_SELECTOR, "#resolve-form input[name=by]")
    assert by.get_attribute("value") == "ana", "the claimant is the default resolver"
    browser.find_element(By.CSS_SELECTOR, "#resolve-form input[name=resolution]").send_keys("reversed_extra_effect")
    browser.find_element(By.CSS_SELECTOR, "#resolve-form textarea[name=note]").send_keys(
        "voided the second refund <b>re_2</b> in the payment console")
    browser.find_element(By.ID, "resolve").click()
    wait.until(EC.text_to_be_present_in_element((By.CSS_SELECTOR, "h1 .status"), "resolved"))
    page = browser.find_element(By.TAG_NAME, "main").text
    assert "reversed_extra_effect" in page
    assert "voided the second refund <b>re_2</b> in the payment console" in page, "the note shows as text"
    lanes = [t.text for t in browser.find_elements(By.CSS_SELECTOR, "svg.timeline .moment text")]
    assert any(t.startswith("claimed by ana") for t in lanes) and any(t.startswith("resolved by ana") for t in lanes), lanes
    no_console_errors(browser)
    full_page_screenshot(browser, artifacts / "3-resolved.png")

    # It has left the queue.
    browser.find_element(By.LINK_TEXT, "← Queue").click()
    wait.until(EC.presence_of_element_located((By.ID, "count-open")))
    assert browser.find_element(By.ID, "count-open").text == "0"
    assert browser.find_element(By.ID, "count-resolved").text == "1"
    assert not browser.find_elements(By.CSS_SELECTOR, f'tr[data-escalation="{esc_id}"]')
    assert browser.find_element(By.ID, "queue-empty").text == "Nothing waits for a person."
    full_page_screenshot(browser, artifacts / "4-queue-after.png")
    browser.get(base + "/?status=resolved")
    assert browser.find_elements(By.CSS_SELECTOR, f'tr[data-escalation="{esc_id}"]')

    # The gauge fell to zero and the alert ends, in Prometheus and in Alertmanager.
    assert gauge(base) == 0.0
    wait_for("ReckonDuplicateEffect to end in Prometheus", lambda: prometheus_alerts(prom) == [])
    wait_for("ReckonDuplicateEffect to end in Alertmanager", lambda: alertmanager_active(am) == [])
    wait_for("ReckonEscalation to end in Alertmanager", lambda: escalation_alerts(am, esc_id) == [])
