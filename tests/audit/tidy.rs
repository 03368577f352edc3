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
    let root = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("src")
        .join(module);
    let mut files = Vec::new();
    sources(&root, &mut files);
    assert!(!files.is_empty(), "no sources under {}", root.display());
    for (path, text) in files {
        for (n, line) in text.lines().enumerate() {
            let code = line.split("//").next().unwrap_or("");
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
