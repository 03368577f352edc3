"""docker-compose.yml and the Dockerfile, checked without a Docker engine: they parse, every
image is pinned, every mounted path exists, every service that matters has a health check."""

import re

import yaml

import reckon_sql

ROOT = reckon_sql.ROOT


def compose():
    return yaml.safe_load((ROOT / "docker-compose.yml").read_text())


def _pinned(image: str) -> bool:
    """A version (26.8, 12.4.0, 1.95-bookworm) or a distribution release (bookworm-slim): never
    absent, never a moving channel name."""
    name, _, tag = image.rpartition(":")
    moving = {"", "latest", "stable", "slim", "edge", "nightly", "head", "main", "master"}
    return bool(name) and "/" not in tag and tag not in moving and not tag.startswith("latest")


def test_compose_parses_and_pins_every_image():
    c = compose()
    assert {"clickhouse", "grafana", "reckon", "prometheus", "alertmanager"} <= set(c["services"])
    for name, s in c["services"].items():
        if "build" in s:
            continue  # built from this repository; its base images are checked below
        assert _pinned(s["image"]), f"{name}: image {s['image']!r} is not pinned to a version"
    assert c["services"]["clickhouse"]["image"].startswith("clickhouse/clickhouse-server:")
    assert c["services"]["grafana"]["image"].startswith("grafana/grafana:12.")
    assert c["services"]["prometheus"]["image"].startswith("prom/prometheus:v3.")
    assert c["services"]["alertmanager"]["image"].startswith("prom/alertmanager:v0.")


def test_grafana_plugin_is_preinstalled_at_a_pinned_v4():
    env = compose()["services"]["grafana"]["environment"]
    plugins = env.get("GF_PLUGINS_PREINSTALL_SYNC") or env.get("GF_PLUGINS_PREINSTALL") or env.get("GF_INSTALL_PLUGINS")
    assert re.search(r"grafana-clickhouse-datasource@4\.\d+\.\d+", plugins or ""), plugins


def test_every_mounted_path_exists():
    c = compose()
    checked = 0
    for name, s in c["services"].items():
        for v in s.get("volumes", []):
            src = v.split(":")[0] if isinstance(v, str) else v.get("source", "")
            if src.startswith((".", "/")):
                assert (ROOT / src).exists(), f"{name}: {src} does not exist"
                checked += 1
        build = s.get("build")
        if build:
            ctx = build if isinstance(build, str) else build.get("context", ".")
            assert (ROOT / ctx / "Dockerfile").exists()
    assert checked >= 4


def test_services_have_health_checks_and_wait_for_clickhouse():
    s = compose()["services"]
    for name in ("clickhouse", "reckon", "grafana", "prometheus", "alertmanager"):
        assert s[name].get("healthcheck", {}).get("test"), name
    assert s["reckon"]["depends_on"]["clickhouse"]["condition"] == "service_healthy"
    store = s["reckon"]["environment"]["RECKON_STORE"]
    assert store.startswith("clickhouse://") and "@clickhouse:8123/" in store
    ch = s["clickhouse"]["environment"]
    assert ch.get("CLICKHOUSE_USER") and ch.get("CLICKHOUSE_PASSWORD"), "an app user, not 'default'"


def test_dockerfile_is_multi_stage_pinned_and_healthchecked():
    text = (ROOT / "Dockerfile").read_text()
    froms = re.findall(r"^FROM\s+(\S+)", text, re.M)
    assert len(froms) >= 2, "multi-stage build"
    for image in froms:
        assert _pinned(image), image
    assert froms[0].startswith("rust:") and froms[-1].startswith("debian:")
    assert "HEALTHCHECK" in text and "/healthz" in text
    for src in re.findall(r"^COPY\s+(?!--from)(.+)\s+\S+$", text, re.M):
        for part in src.split():
            assert (ROOT / part).exists(), f"COPY source {part} does not exist"
    assert re.search(r"^COPY\s+contracts\s", text, re.M), "contracts go into the image"


def _mounts(service: dict) -> dict:
    """Container path -> host path of a service's bind mounts."""
    out = {}
    for v in service.get("volumes", []):
        src, dst = v.split(":")[:2]
        out[dst] = src
    return out


def _flag(service: dict, name: str) -> str:
    for arg in service.get("command", []):
        if arg.startswith(f"--{name}="):
            return arg.split("=", 1)[1]
    raise AssertionError(f"no --{name} in {service.get('command')}")


def test_prometheus_scrapes_reckon_loads_the_rules_and_alerts_to_alertmanager():
    s = compose()["services"]
    prom = s["prometheus"]
    config_path = _flag(prom, "config.file")
    mounts = _mounts(prom)
    config_dir = config_path.rsplit("/", 1)[0]
    assert mounts.get(config_dir) == "./prometheus", mounts
    config = yaml.safe_load((ROOT / "prometheus" / config_path.rsplit("/", 1)[1]).read_text())
    # The rules the promtool tests cover are the ones loaded.
    assert config["rule_files"] == ["rules.yml"]
    assert (ROOT / "prometheus" / "rules.yml").exists()
    jobs = {j["job_name"]: j for j in config["scrape_configs"]}
    reckon = jobs["reckon"]  # rules.yml matches up{job="reckon"}
    assert reckon.get("metrics_path", "/metrics") == "/metrics"
    targets = [t for sc in reckon["static_configs"] for t in sc["targets"]]
    assert targets == ["reckon:8080"]
    assert "8080:8080" in s["reckon"]["ports"], "reckon's API (and /metrics) listens on 8080"
    am_targets = [t for a in config["alerting"]["alertmanagers"] for sc in a["static_configs"] for t in sc["targets"]]
    assert am_targets == ["alertmanager:9093"]
    assert {"reckon", "alertmanager"} <= set(prom.get("depends_on", []))
    assert any(dst == "/prometheus" for dst in mounts), "TSDB on a volume"


def test_alertmanager_has_its_config_mounted():
    am = compose()["services"]["alertmanager"]
    config_path = _flag(am, "config.file")
    config_dir, name = config_path.rsplit("/", 1)
    assert _mounts(am).get(config_dir) == "./alertmanager"
    config = yaml.safe_load((ROOT / "alertmanager" / name).read_text())
    receivers = {r["name"] for r in config["receivers"]}
    assert config["route"]["receiver"] in receivers
    for route in config["route"].get("routes", []):
        assert route["receiver"] in receivers
