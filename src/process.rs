//! Settings of the process itself, made once at start-up before any thread is spawned.

/// Transparent huge pages off for this process (Linux; elsewhere nothing to do).
///
/// mimalloc commits its arenas eagerly and asks the kernel for huge pages there; with the
/// kernel's THP in its common `madvise` mode, every first touch of a 2 MiB region is then
/// zeroed (and, with `defrag = madvise`, compacted for) at once. The engine's memory grows
/// with the intents it holds, so under load that was the largest single cost in the audit
/// core's profile (a third of its samples in `cargo bench --bench ingest`). Off, the core runs
/// 1.2-1.27x as fast, SQLite's p99 verdict latency at the maximum rate fell from 325-452 ms to
/// 243-270 ms, and the drop path's RSS from ~175 to ~97 MiB (BENCHMARKS.md, "Transparent huge
/// pages").
pub fn disable_transparent_huge_pages() -> std::io::Result<()> {
    #[cfg(target_os = "linux")]
    {
        // SAFETY: prctl with PR_SET_THP_DISABLE reads its integer arguments only.
        let rc = unsafe { libc::prctl(libc::PR_SET_THP_DISABLE, 1, 0, 0, 0) };
        if rc != 0 {
            return Err(std::io::Error::last_os_error());
        }
    }
    Ok(())
}

/// The soft limit on open files raised to the hard limit (Linux), as Go's runtime does: the
/// common soft default of 1024 is below what three listeners at `max_connections` (1024 each by
/// default) hold, and a process out of descriptors stops answering everyone. The limit in force
/// afterwards, to say at start-up.
pub fn raise_open_file_limit() -> std::io::Result<u64> {
    #[cfg(target_os = "linux")]
    {
        let mut lim = libc::rlimit {
            rlim_cur: 0,
            rlim_max: 0,
        };
        // SAFETY: getrlimit and setrlimit read and write the one struct passed.
        if unsafe { libc::getrlimit(libc::RLIMIT_NOFILE, &mut lim) } != 0 {
            return Err(std::io::Error::last_os_error());
        }
        if lim.rlim_cur < lim.rlim_max {
            let raised = libc::rlimit {
                rlim_cur: lim.rlim_max,
                rlim_max: lim.rlim_max,
            };
            // SAFETY: as above.
            if unsafe { libc::setrlimit(libc::RLIMIT_NOFILE, &raised) } != 0 {
                return Err(std::io::Error::last_os_error());
            }
            lim = raised;
        }
        // `rlim_t` is not u64 on every Linux target.
        #[allow(clippy::unnecessary_cast)]
        Ok(lim.rlim_cur as u64)
    }
    #[cfg(not(target_os = "linux"))]
    Ok(u64::MAX)
}

#[cfg(all(test, target_os = "linux"))]
mod tests {
    /// The kernel reports the setting back: `THP_enabled: 0` in `/proc/self/status`.
    #[test]
    fn huge_pages_are_off_after_the_call() {
        super::disable_transparent_huge_pages().expect("prctl");
        let status = std::fs::read_to_string("/proc/self/status").expect("status");
        let line = status
            .lines()
            .find(|l| l.starts_with("THP_enabled:"))
            .expect("THP_enabled in /proc/self/status");
        assert_eq!(line.split_whitespace().nth(1), Some("0"), "{line}");
    }
}
