//! Durations in reckon's one syntax, for contracts, the config file and the command line.

use crate::model::Dur;

/// Parses `90s`, `15m`, `24h`, `500ms`, `2d` and compounds such as `1h30m` (units largest first,
/// each at most once, so `30m1h` or `1h1h` are rejected as likely typos). Also `ns` and `us`.
/// Returns `None` for anything else, including a bare number: a contract window without a unit
/// is ambiguous, and guessing seconds vs. milliseconds is exactly the mistake to avoid.
pub fn parse_duration(s: &str) -> Option<Dur> {
    // Ordered largest first; the rank enforces "largest first, once each" in compounds.
    const UNITS: [(&str, i64); 7] = [
        ("d", 86_400_000_000_000),
        ("h", 3_600_000_000_000),
        ("m", 60_000_000_000),
        ("s", 1_000_000_000),
        ("ms", 1_000_000),
        ("us", 1_000),
        ("ns", 1),
    ];
    let s = s.trim();
    if s.is_empty() {
        return None;
    }
    let mut rest = s;
    let mut total: i64 = 0;
    let mut last_rank: Option<usize> = None;
    while !rest.is_empty() {
        let digits = rest.bytes().take_while(u8::is_ascii_digit).count();
        if digits == 0 {
            return None;
        }
        let n: i64 = rest[..digits].parse().ok()?;
        rest = &rest[digits..];
        let unit_len = rest.bytes().take_while(u8::is_ascii_alphabetic).count();
        let unit = &rest[..unit_len];
        rest = &rest[unit_len..];
        let rank = UNITS.iter().position(|(u, _)| *u == unit)?;
        if last_rank.is_some_and(|r| rank <= r) {
            return None;
        }
        last_rank = Some(rank);
        total = total.checked_add(n.checked_mul(UNITS[rank].1)?)?;
    }
    Some(Dur(total))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn durations() {
        assert_eq!(parse_duration("90s"), Some(Dur::secs(90)));
        assert_eq!(parse_duration("15m"), Some(Dur::minutes(15)));
        assert_eq!(parse_duration("24h"), Some(Dur::hours(24)));
        assert_eq!(parse_duration("500ms"), Some(Dur::millis(500)));
        assert_eq!(parse_duration("2d"), Some(Dur::hours(48)));
        assert_eq!(parse_duration("1h30m"), Some(Dur::minutes(90)));
        assert_eq!(parse_duration("1m30s500ms"), Some(Dur::millis(90_500)));
        assert_eq!(parse_duration(" 0s "), Some(Dur(0)));
        assert_eq!(parse_duration("250us"), Some(Dur(250_000)));
        for bad in [
            "",
            "90",
            "s",
            "1.5h",
            "-5m",
            "5 m",
            "30m1h",
            "1h1h",
            "5x",
            "1h30",
            "99999999999999999999d",
            "9999999999d",
        ] {
            assert_eq!(parse_duration(bad), None, "{bad:?}");
        }
    }
}
