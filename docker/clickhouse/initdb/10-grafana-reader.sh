#!/bin/bash
# Runs once, on the first start of an empty ClickHouse volume (the image's initdb hook), as the
# app user the image created from CLICKHOUSE_USER (with access management on).
#
# Grafana gets a user of its own that can only read reckon's database: a dashboard or an
# Explore query can then never write or drop anything, and reckon's password stays with reckon.
set -euo pipefail
clickhouse client --user "$CLICKHOUSE_USER" --password "$CLICKHOUSE_PASSWORD" --multiquery <<SQL
CREATE DATABASE IF NOT EXISTS ${CLICKHOUSE_DB};
CREATE USER IF NOT EXISTS ${GRAFANA_CLICKHOUSE_USER} IDENTIFIED WITH sha256_password BY '${GRAFANA_CLICKHOUSE_PASSWORD}';
GRANT SELECT ON ${CLICKHOUSE_DB}.* TO ${GRAFANA_CLICKHOUSE_USER};
SQL
