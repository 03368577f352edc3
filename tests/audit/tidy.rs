//! The audit core must stay pure: no async runtime, no database, no clock, no I/O. These checks
//! read the source so a violation fails the build's tests, not a review.

use std::path::Path;

fn sources(dir: &Path, out: &mut Vec<(String, String)>) {
    for entry in std::fs::read_dir(dir).unwrap() {
        let path = entry.unwrap().path();
        if path.is_dir() {
            sources(&path, out);
        } else if path.extension().is_some_and(|e| e == "rs") {
            out.push((
                path.display().to_string(),
                std::fs::read_to_string(&path).unwrap(),
            ));
        }
    }
}

const FORBIDDEN: [&str; 14] = [
    "tokio",
    "async ",
    "await",
    "rusqlite",
    "clickhouse",
    "SystemTime",
    "Instant::now",
    "Utc::now",
    "Local::now",
    "std::fs",
    "std::net",
    "std::thread",
    "reqwest",
    "tonic",
];

fn check_pure(module: &str) {
    check_pure_but(module, &[]);
}

/// [`check_pure`], except for lines that name one of `allowed` (the OTLP decoders read
/// `opentelemetry_proto::tonic`'s generated types, which are plain data, not the gRPC runtime).
fn check_pure_but(module: &str, allowed: &[&str]) {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("src")
        .join(module);
    let mut files = Vec::new();
    if root.is_dir() {
        sources(&root, &mut files);
    } else {
        files.push((
            root.display().to_string(),
            std::fs::read_to_string(&root).unwrap_or_else(|e| panic!("{}: {e}", root.display())),
        ));
    }
    assert!(!files.is_empty(), "no sources under {}", root.display());
    for (path, text) in files {
        for (n, line) in text.lines().enumerate() {
            let code = line.split("//").next().unwrap_or("");
            let mut code = code.to_string();
            for a in allowed {
                code = code.replace(a, "");
            }
            for word in FORBIDDEN {
                assert!(
                    !code.contains(word),
                    "{path}:{}: `{word}` has no place in the pure core: {line}",
                    n + 1
                );
            }
        }
    }
}

#[test]
fn audit_core_is_pure() {
    check_pure("audit");
}

#[test]
fn escalation_book_is_pure() {
    check_pure("escalation");
}

#[test]
fn model_is_plain_data() {
    let text = std::fs::read_to_string(Path::new(env!("CARGO_MANIFEST_DIR")).join("src/model.rs"))
        .unwrap();
    for word in FORBIDDEN {
        assert!(!text.contains(word), "src/model.rs mentions `{word}`");
    }
}

/// Imports that point the wrong way (rust-analyzer's tidy tests are the model): each part of the
/// crate, and the paths it must not name, as ARCHITECTURE.md's "must not know" column says.
/// Comments are skipped; test modules are not (a test that needs a higher layer belongs in
/// `tests/`).
const LAYERS: &[(&str, &[&str])] = &[
    // The pure core and the pure decoders: no I/O, no clock, nothing above them.
    (
        "engine/core.rs",
        &[
            "crate::store",
            "crate::ingest",
            "crate::api",
            "crate::notify",
            "crate::clock",
            "crate::config",
        ],
    ),
    (
        "bloom.rs",
        &[
            "crate::engine",
            "crate::store",
            "crate::ingest",
            "crate::api",
            "crate::clock",
            "crate::config",
        ],
    ),
    (
        "ingest/otlp",
        &[
            "crate::engine",
            "crate::store",
            "crate::api",
            "crate::clock",
            "crate::config",
        ],
    ),
    (
        "ingest/records.rs",
        &[
            "crate::engine",
            "crate::store",
            "crate::api",
            "crate::clock",
            "crate::config",
        ],
    ),
    (
        "ingest/stripe.rs",
        &[
            "crate::engine",
            "crate::store",
            "crate::api",
            "crate::clock",
            "crate::config",
        ],
    ),
    (
        "contract",
        &[
            "crate::audit",
            "crate::engine",
            "crate::store",
            "crate::ingest",
        ],
    ),
    // The store knows its own formats and nothing that drives it.
    (
        "store",
        &[
            "crate::engine",
            "crate::ingest",
            "crate::api",
            "crate::audit",
            "crate::config",
            "crate::app",
        ],
    ),
    // Transports decode and answer; the service does the rest.
    (
        "ingest/grpc.rs",
        &["crate::store", "crate::audit", "crate::engine"],
    ),
    (
        "ingest/http.rs",
        &["crate::store", "crate::audit", "crate::engine"],
    ),
    // Connection limits: sockets and time, nothing of what the requests carry.
    (
        "listen.rs",
        &[
            "crate::store",
            "crate::audit",
            "crate::engine",
            "crate::ingest",
        ],
    ),
    (
        "api",
        &[
            "rusqlite",
            "clickhouse::",
            "crate::audit::",
            "crate::ingest::grpc",
        ],
    ),
    (
        "notify",
        &["axum", "crate::audit", "crate::api", "crate::ingest"],
    ),
    // Clients of reckon's public interfaces only.
    (
        "demo",
        &[
            "crate::engine",
            "crate::store",
            "crate::audit",
            "crate::ingest",
            "crate::escalation",
        ],
    ),
    (
        "loadgen",
        &[
            "crate::engine",
            "crate::store",
            "crate::audit",
            "crate::ingest",
            "crate::escalation",
        ],
    ),
];

#[test]
fn imports_point_one_way() {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    for (part, forbidden) in LAYERS {
        let path = src.join(part);
        let mut files = Vec::new();
        if path.is_dir() {
            sources(&path, &mut files);
        } else {
            files.push((
                path.display().to_string(),
                std::fs::read_to_string(&path)
                    .unwrap_or_else(|e| panic!("{}: {e}", path.display())),
            ));
        }
        assert!(!files.is_empty(), "no sources for {part}");
        for (file, text) in files {
            for (n, line) in text.lines().enumerate() {
                let code = line.split("//").next().unwrap_or("");
                for word in *forbidden {
                    assert!(
                        !code.contains(word),
                        "{file}:{}: {part} must not know `{word}`: {line}",
                        n + 1
                    );
                }
            }
        }
    }
}

/// The wall clock is read in `src/clock.rs` only (durations use `Instant`); the clients of
/// reckon (`demo`, `loadgen`) keep their own.
#[test]
fn the_wall_clock_is_read_in_one_place() {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let mut files = Vec::new();
    sources(&src, &mut files);
    for (file, text) in files {
        if file.ends_with("clock.rs") || file.contains("/demo/") || file.contains("/loadgen/") {
            continue;
        }
        for (n, line) in text.lines().enumerate() {
            let code = line.split("//").next().unwrap_or("");
            assert!(
                !code.contains("SystemTime::now"),
                "{file}:{}: read the clock through crate::clock::wall_now: {line}",
                n + 1
            );
        }
    }
}

#[test]
fn pure_decoders_and_engine_core_are_pure() {
    for part in [
        "engine/core.rs",
        "bloom.rs",
        "ingest/records.rs",
        "ingest/stripe.rs",
        "ingest/bounds.rs",
    ] {
        check_pure(part);
    }
    check_pure_but("ingest/otlp", &["opentelemetry_proto::tonic"]);
}
