# reckon as a container: built in a Rust image, run in a slim Debian with only what it needs.
#
#   docker build -t reckon .          (BuildKit, Docker's default builder since 23.0)
#   docker run -p 4317:4317 -p 4318:4318 -p 8080:8080 reckon serve
#
# docker-compose.yml builds this and points it at ClickHouse (RECKON_STORE).

FROM rust:1.95-bookworm AS build
WORKDIR /src
# What cargo reads to build the binary: the manifest (it names the bench, so benches/ too), the
# sources, and what they compile in (the demo's contract, the runbook page).
COPY Cargo.toml Cargo.lock ./
COPY benches ./benches
COPY contracts ./contracts
COPY docs/runbook.md ./docs/runbook.md
COPY src ./src
# BuildKit cache mounts keep the crate registry and the compiled dependencies between builds,
# so a source edit rebuilds only reckon itself, whatever targets the manifest declares: no
# stub sources to keep in step with Cargo.toml (a stub list broke the build once a bench was
# declared). tests/observability/test_dockerfile.py runs these steps without a Docker engine.
RUN --mount=type=cache,target=/usr/local/cargo/registry \
    --mount=type=cache,target=/src/target \
    cargo build --release --locked --bin reckon \
    && cp target/release/reckon /usr/local/bin/reckon

FROM debian:bookworm-slim
# curl for the health check; ca-certificates for an https ClickHouse behind a proxy.
RUN apt-get update \
    && apt-get install -y --no-install-recommends ca-certificates curl \
    && rm -rf /var/lib/apt/lists/* \
    && useradd --system --home-dir /var/lib/reckon --create-home reckon
COPY --from=build /usr/local/bin/reckon /usr/local/bin/reckon
COPY contracts /etc/reckon/contracts
USER reckon
WORKDIR /var/lib/reckon
ENV RECKON_CONTRACTS_DIR=/etc/reckon/contracts \
    RECKON_DATA_DIR=/var/lib/reckon/data \
    RECKON_GRPC_ADDR=0.0.0.0:4317 \
    RECKON_HTTP_ADDR=0.0.0.0:4318 \
    RECKON_API_ADDR=0.0.0.0:8080 \
    RECKON_LOG_FORMAT=json
EXPOSE 4317 4318 8080
# /healthz: the process serves; /readyz (used by compose's depends_on) also needs the store.
HEALTHCHECK --interval=10s --timeout=3s --start-period=20s --retries=3 \
    CMD curl -fsS http://127.0.0.1:8080/healthz || exit 1
ENTRYPOINT ["reckon"]
CMD ["serve"]
