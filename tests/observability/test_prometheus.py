"""prometheus/ and alertmanager/: checked and unit-tested with the real tools (Debian's
`prometheus` package ships promtool, `prometheus-alertmanager` ships amtool; .ci/run installs
them), plus the static facts the tools cannot know: every series a rule reads is one reckon
exposes, and every alert Alertmanager's config names exists."""

import os
import re
import shutil
import subprocess

import pytest
import yaml

import reckon_sql

ROOT = reckon_sql.ROOT
RULES = ROOT / "prometheus" / "rules.yml"


def _tool(name: str) -> str:
    path = shutil.which(name)
    if path:
        return path
    # A check that silently did not run is worse than a red one.
    if os.environ.get("RECKON_SKIP_PROMTOOL") == "1":
        pytest.skip("RECKON_SKIP_PROMTOOL=1")
    pytest.fail(f"{name} is not installed: apt-get install prometheus prometheus-alertmanager "
                "(or set RECKON_SKIP_PROMTOOL=1)")


def _run(*args: str) -> str:
    r = subprocess.run(args, capture_output=True, text=True, cwd=ROOT, timeout=120)
    assert r.returncode == 0, f"{' '.join(args)} failed:\n{r.stdout}\n{r.stderr}"
    return r.stdout + r.stderr


def test_promtool_checks_the_config_and_the_rules():
    promtool = _tool("promtool")
    out = _run(promtool, "check", "config", "prometheus/prometheus.yml")
    assert "SUCCESS" in out
    out = _run(promtool, "check", "rules", "prometheus/rules.yml")
    assert re.search(r"SUCCESS: \d+ rules found", out), out


def test_promtool_unit_tests_every_alert():
    promtool = _tool("promtool")
    _run(promtool, "test", "rules", "prometheus/tests.yml")
    # Every alert has at least one case where it must fire.
    alerts = {r["alert"] for g in yaml.safe_load(RULES.read_text())["groups"] for r in g["rules"] if "alert" in r}
    tested = set()
    for t in yaml.safe_load((ROOT / "prometheus" / "tests.yml").read_text())["tests"]:
        for case in t.get("alert_rule_test", []):
            if case.get("exp_alerts"):
                tested.add(case["alertname"])
    assert alerts == tested, f"alerts never seen firing in tests.yml: {sorted(alerts - tested)}"


def test_amtool_checks_the_alertmanager_config():
    amtool = _tool("amtool")
    out = _run(amtool, "check-config", "alertmanager/alertmanager.yml")
    assert "SUCCESS" in out


def test_rules_read_only_series_reckon_exposes():
    """A rule on a misspelt metric is silently never true: every reckon_* name in rules.yml must
    be one src/metrics.rs renders."""
    metrics_rs = (ROOT / "src" / "metrics.rs").read_text()
    exposed = set(re.findall(r'"(reckon_[a-z_]+)"', metrics_rs))
    used = set(re.findall(r"\b(reckon_[a-z_]+)", RULES.read_text()))
    assert used, "no reckon series in the rules"
    assert used <= exposed, f"not exposed by reckon: {sorted(used - exposed)}"
    assert "reckon_escalations_unresolved" in used


def test_alertmanager_names_only_existing_alerts():
    alerts = {r["alert"] for g in yaml.safe_load(RULES.read_text())["groups"] for r in g["rules"] if "alert" in r}
    config = yaml.safe_load((ROOT / "alertmanager" / "alertmanager.yml").read_text())
    named = set()
    for rule in config.get("inhibit_rules", []):
        for m in rule.get("source_matchers", []) + rule.get("target_matchers", []):
            key, op, value = re.fullmatch(r'(\w+)\s*(=~|!=|!~|=)\s*"(.*)"', m).groups()
            if key == "alertname":
                named |= set(value.split("|")) if op == "=~" else {value}
    assert named and named <= alerts, sorted(named - alerts)


def _github_slug(heading: str) -> str:
    """The anchor GitHub (and reckon's /runbook) gives a heading."""
    slug = re.sub(r"[^\w\- ]", "", heading.strip().lower())
    return slug.replace(" ", "-")


def test_every_alert_links_its_runbook_section():
    """Each alert's runbook_url is its own section of docs/runbook.md, under the `runbook`
    external label that prometheus.yml sets."""
    runbook = (ROOT / "docs" / "runbook.md").read_text()
    anchors = {_github_slug(h) for h in re.findall(r"^#+ (.+)$", runbook, re.M)}
    for group in yaml.safe_load(RULES.read_text())["groups"]:
        for rule in group["rules"]:
            if "alert" not in rule:
                continue
            url = rule["annotations"].get("runbook_url", "")
            assert url == "{{ $externalLabels.runbook }}#" + rule["alert"].lower(), (rule["alert"], url)
            assert rule["alert"].lower() in anchors, f"docs/runbook.md has no section {rule['alert']}"
    config = yaml.safe_load((ROOT / "prometheus" / "prometheus.yml").read_text())
    assert config["global"]["external_labels"]["runbook"].endswith("/runbook")
