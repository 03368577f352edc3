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
    assert {"clickhouse", "grafana", "reckon"} <= set(c["services"])
    for name, s in c["services"].items():
        if "build" in s:
            continue  # built from this repository; its base images are checked below
        assert _pinned(s["image"]), f"{name}: image {s['image']!r} is not pinned to a version"
    assert c["services"]["clickhouse"]["image"].startswith("clickhouse/clickhouse-server:")
    assert c["services"]["grafana"]["image"].startswith("grafana/grafana:12.")


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
    for name in ("clickhouse", "reckon", "grafana"):
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
