//! Human-readable sizes, durations and UTC times for the cache's knobs and its tool.

use std::time::Duration;

/// Splits "1.5 GiB" into the number and the lower-cased, trimmed unit ("gib").
fn split_number(text: &str) -> Option<(f64, String)> {
    let t = text.trim();
    let split = t.find(|c: char| !(c.is_ascii_digit() || c == '.')).unwrap_or(t.len());
    let (num, unit) = t.split_at(split);
    Some((num.parse().ok()?, unit.trim().to_ascii_lowercase()))
}

/// Parses a byte size: a number with an optional unit. `K`, `M`, `G`, `T` and `KiB`..`TiB`
/// are powers of 1024; `KB`..`TB` powers of 1000; `B` or no unit means bytes. Case and a
/// space before the unit do not matter; fractions are allowed ("1.5G").
pub fn parse_size(text: &str) -> Result<u64, String> {
    let (value, unit) =
        split_number(text).ok_or_else(|| format!("invalid size {text:?}: expected e.g. 500M, 2GiB or 1000000"))?;
    let multiplier: f64 = match unit.as_str() {
        "" | "b" => 1.0,
        "k" | "kib" => 1024.0,
        "m" | "mib" => 1024f64.powi(2),
        "g" | "gib" => 1024f64.powi(3),
        "t" | "tib" => 1024f64.powi(4),
        "kb" => 1e3,
        "mb" => 1e6,
        "gb" => 1e9,
        "tb" => 1e12,
        other => return Err(format!("invalid size {text:?}: unknown unit {other:?} (use B, K, M, G, T, KiB.., KB..)")),
    };
    let bytes = value * multiplier;
    if !bytes.is_finite() || bytes > u64::MAX as f64 {
        return Err(format!("invalid size {text:?}: too large"));
    }
    Ok(bytes.round() as u64)
}

/// Parses a duration: a number with a unit `s`, `m`, `h`, `d` or `w` ("30d", "1.5h");
/// a bare number is seconds.
pub fn parse_duration(text: &str) -> Result<Duration, String> {
    let (value, unit) =
        split_number(text).ok_or_else(|| format!("invalid duration {text:?}: expected e.g. 30d, 12h, 90m or 45s"))?;
    let seconds = match unit.as_str() {
        "" | "s" | "sec" | "secs" => 1.0,
        "m" | "min" | "mins" => 60.0,
        "h" | "hour" | "hours" => 3600.0,
        "d" | "day" | "days" => 86400.0,
        "w" | "week" | "weeks" => 7.0 * 86400.0,
        other => return Err(format!("invalid duration {text:?}: unknown unit {other:?} (use s, m, h, d or w)")),
    };
    Duration::try_from_secs_f64(value * seconds).map_err(|_| format!("invalid duration {text:?}: out of range"))
}

/// `1536` -> `"1.5 KiB"`; bytes below 1 KiB stay exact.
pub fn format_size(bytes: u64) -> String {
    const UNITS: [&str; 5] = ["B", "KiB", "MiB", "GiB", "TiB"];
    let mut value = bytes as f64;
    let mut unit = 0;
    while value >= 1024.0 && unit + 1 < UNITS.len() {
        value /= 1024.0;
        unit += 1;
    }
    if unit == 0 {
        format!("{bytes} B")
    } else {
        format!("{value:.1} {}", UNITS[unit])
    }
}

/// A short age: "12s", "5m", "3h", "2d".
pub fn format_age(age: Duration) -> String {
    let s = age.as_secs();
    match s {
        0..=59 => format!("{s}s"),
        60..=3599 => format!("{}m", s / 60),
        3600..=86399 => format!("{}h", s / 3600),
        _ => format!("{}d", s / 86400),
    }
}

/// Milliseconds since the Unix epoch as `YYYY-MM-DD HH:MM:SS UTC`.
pub fn format_unix_ms(ms: u64) -> String {
    let secs = ms / 1000;
    let (days, rem) = (secs / 86400, secs % 86400);
    // Civil date from days since 1970-01-01 (Howard Hinnant's algorithm).
    let z = days as i64 + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = doy - (153 * mp + 2) / 5 + 1;
    let month = if mp < 10 { mp + 3 } else { mp - 9 };
    let year = yoe + era * 400 + i64::from(month <= 2);
    format!("{year:04}-{month:02}-{day:02} {:02}:{:02}:{:02} UTC", rem / 3600, rem % 3600 / 60, rem % 60)
}

/// Now, in milliseconds since the Unix epoch.
pub fn now_unix_ms() -> u64 {
    std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_millis() as u64)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sizes() {
        assert_eq!(parse_size("2GiB"), Ok(2 << 30));
        assert_eq!(parse_size("2g"), Ok(2 << 30));
        assert_eq!(parse_size("1.5 K"), Ok(1536));
        assert_eq!(parse_size("500MB"), Ok(500_000_000));
        assert_eq!(parse_size("123"), Ok(123));
        assert_eq!(parse_size("0"), Ok(0));
        assert!(parse_size("").is_err());
        assert!(parse_size("-1G").is_err());
        assert!(parse_size("12 parsecs").unwrap_err().contains("unknown unit"));
        assert_eq!(format_size(1023), "1023 B");
        assert_eq!(format_size(1536), "1.5 KiB");
        assert_eq!(format_size(2 << 30), "2.0 GiB");
    }

    #[test]
    fn durations() {
        assert_eq!(parse_duration("30d"), Ok(Duration::from_secs(30 * 86400)));
        assert_eq!(parse_duration("1.5h"), Ok(Duration::from_secs(5400)));
        assert_eq!(parse_duration("45"), Ok(Duration::from_secs(45)));
        assert_eq!(parse_duration("2w"), Ok(Duration::from_secs(14 * 86400)));
        assert!(parse_duration("soon").is_err());
        assert!(parse_duration("3y").is_err());
        assert_eq!(format_age(Duration::from_secs(125)), "2m");
    }

    #[test]
    fn utc_times() {
        assert_eq!(format_unix_ms(0), "1970-01-01 00:00:00 UTC");
        assert_eq!(format_unix_ms(951_782_400_000), "2000-02-29 00:00:00 UTC");
        assert_eq!(format_unix_ms(1_798_761_599_000), "2026-12-31 23:59:59 UTC");
    }
}
