//! Human-friendly durations (`5s`, `1m30s`, `250ms`) and sizes (`64MiB`).

use std::time::Duration;

/// Parses `250ms`, `5s`, `2m`, `1h`, `1d` and sums like `1m30s`. A bare
/// number is seconds.
pub fn parse_duration(text: &str) -> Result<Duration, String> {
    let text = text.trim();
    if text.is_empty() {
        return Err("empty duration".into());
    }
    if let Ok(secs) = text.parse::<f64>() {
        return seconds(secs, text);
    }
    let mut total = Duration::ZERO;
    let mut rest = text;
    while !rest.is_empty() {
        let digits = rest.find(|c: char| !(c.is_ascii_digit() || c == '.')).unwrap_or(rest.len());
        if digits == 0 {
            return Err(format!("bad duration `{text}`: expected a number before `{rest}`"));
        }
        let (number, tail) = rest.split_at(digits);
        let unit_len = tail.find(|c: char| c.is_ascii_digit()).unwrap_or(tail.len());
        let (unit, tail) = tail.split_at(unit_len);
        let value: f64 = number.parse().map_err(|_| format!("bad duration `{text}`: `{number}` is not a number"))?;
        let scale = match unit.trim() {
            "ms" => 0.001,
            "s" | "sec" | "secs" => 1.0,
            "m" | "min" | "mins" => 60.0,
            "h" | "hr" | "hrs" => 3600.0,
            "d" | "day" | "days" => 86400.0,
            "" => {
                return Err(format!("bad duration `{text}`: `{number}` needs a unit (ms, s, m, h, d)"));
            }
            other => {
                return Err(format!("bad duration `{text}`: unknown unit `{other}` (use ms, s, m, h or d)"));
            }
        };
        total += seconds(value * scale, text)?;
        rest = tail;
    }
    Ok(total)
}

fn seconds(secs: f64, text: &str) -> Result<Duration, String> {
    if !secs.is_finite() || !(0.0..=1e12).contains(&secs) {
        return Err(format!("bad duration `{text}`: out of range"));
    }
    Ok(Duration::from_secs_f64(secs))
}

/// Formats a duration the way [`parse_duration`] reads it.
pub fn format_duration(d: Duration) -> String {
    let ms = d.as_millis();
    if ms == 0 {
        "0s".into()
    } else if !ms.is_multiple_of(1000) {
        format!("{ms}ms")
    } else {
        let s = ms / 1000;
        if s.is_multiple_of(3600) {
            format!("{}h", s / 3600)
        } else if s.is_multiple_of(60) {
            format!("{}m", s / 60)
        } else {
            format!("{s}s")
        }
    }
}

/// Parses sizes: `512`, `64KiB`, `64MiB`, `1GiB`, `10MB` (decimal), `1k`.
pub fn parse_bytes(text: &str) -> Result<u64, String> {
    let text = text.trim();
    let split = text.find(|c: char| !(c.is_ascii_digit() || c == '.')).unwrap_or(text.len());
    let (number, unit) = text.split_at(split);
    if number.is_empty() {
        return Err(format!("bad size `{text}`: expected a number"));
    }
    let value: f64 = number.parse().map_err(|_| format!("bad size `{text}`: `{number}` is not a number"))?;
    let scale: u64 = match unit.trim().to_ascii_lowercase().as_str() {
        "" | "b" => 1,
        "k" | "kib" => 1 << 10,
        "m" | "mib" => 1 << 20,
        "g" | "gib" => 1 << 30,
        "kb" => 1_000,
        "mb" => 1_000_000,
        "gb" => 1_000_000_000,
        other => {
            return Err(format!("bad size `{text}`: unknown unit `{other}` (use B, KiB, MiB, GiB, KB, MB or GB)"));
        }
    };
    let bytes = value * scale as f64;
    if !bytes.is_finite() || bytes < 0.0 || bytes > u64::MAX as f64 {
        return Err(format!("bad size `{text}`: out of range"));
    }
    Ok(bytes as u64)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn durations() {
        assert_eq!(parse_duration("5s"), Ok(Duration::from_secs(5)));
        assert_eq!(parse_duration("250ms"), Ok(Duration::from_millis(250)));
        assert_eq!(parse_duration("1m30s"), Ok(Duration::from_secs(90)));
        assert_eq!(parse_duration("2"), Ok(Duration::from_secs(2)));
        assert_eq!(parse_duration("1.5h"), Ok(Duration::from_secs(5400)));
        assert!(parse_duration("5 parsecs").unwrap_err().contains("unknown unit"));
        assert!(parse_duration("ms").is_err());
        assert_eq!(format_duration(Duration::from_secs(90)), "90s");
        assert_eq!(format_duration(Duration::from_millis(1500)), "1500ms");
        assert_eq!(format_duration(Duration::from_secs(7200)), "2h");
    }

    #[test]
    fn sizes() {
        assert_eq!(parse_bytes("64MiB"), Ok(64 << 20));
        assert_eq!(parse_bytes("1GiB"), Ok(1 << 30));
        assert_eq!(parse_bytes("10MB"), Ok(10_000_000));
        assert_eq!(parse_bytes("512"), Ok(512));
        assert!(parse_bytes("lots").is_err());
        assert!(parse_bytes("5 furlongs").unwrap_err().contains("unknown unit"));
    }
}
