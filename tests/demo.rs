//! `reckon demo --once`, the README's main command, run as a user runs it: every scenario of
//! the seed notes must pass, and the run must say so.

use std::process::Command;

#[test]
fn demo_once_passes_every_scenario() {
    let data = tempfile::tempdir().unwrap();
    let out = Command::new(env!("CARGO_BIN_EXE_reckon"))
        .args(["demo", "--once"])
        .current_dir(data.path())
        .env_remove("RECKON_DEMO_ONLY")
        .output()
        .expect("reckon demo runs");
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "demo failed:\n{stdout}\n{stderr}");
    let summary = stdout
        .lines()
        .find(|l| l.ends_with("scenarios pass"))
        .unwrap_or_else(|| panic!("no summary line:\n{stdout}"));
    let (passed, total) = summary
        .split_once(' ')
        .and_then(|(n, _)| n.split_once('/'))
        .expect("N/M scenarios pass");
    assert_eq!(passed, total, "{summary}");
    assert!(
        total.parse::<u32>().unwrap() >= 20,
        "the issue asks for at least 20 scenarios: {summary}"
    );
    assert!(!stdout.contains("FAIL"), "{stdout}");
}
