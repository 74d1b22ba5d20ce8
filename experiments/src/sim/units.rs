//! Parsing human durations for configs and command lines: `250us`, `5ms`, `1.5s`, `2m`.
//!
//! A bare number is refused (the unit must be explicit, so `5` is never silently 5 µs or 5 s).

use std::time::Duration;

/// Why a duration did not parse.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("bad duration {input:?}: {reason} (write e.g. 250us, 5ms, 1.5s, 2m)")]
pub struct DurationError {
    pub input: String,
    pub reason: &'static str,
}

/// Parse `<number><unit>` with unit `us`, `ms`, `s` or `m`.
pub fn parse_duration(s: &str) -> Result<Duration, DurationError> {
    let t = s.trim();
    let err = |reason| DurationError { input: s.to_string(), reason };
    let split = t.find(|c: char| !(c.is_ascii_digit() || c == '.')).ok_or_else(|| err("missing unit"))?;
    let (num, unit) = t.split_at(split);
    if num.is_empty() {
        return Err(err("missing number"));
    }
    let v: f64 = num.parse().map_err(|_| err("not a number"))?;
    let scale_us = match unit.trim() {
        "us" | "µs" => 1.0,
        "ms" => 1e3,
        "s" => 1e6,
        "m" | "min" => 60e6,
        _ => return Err(err("unknown unit")),
    };
    let us = v * scale_us;
    if !us.is_finite() || !(0.0..=1e15).contains(&us) {
        return Err(err("out of range"));
    }
    Ok(Duration::from_micros(us.round() as u64))
}

/// Format a duration compactly for tables (`12.345ms`, `1.200s`).
pub fn fmt_duration(d: Duration) -> String {
    let us = d.as_micros();
    if us < 1_000 {
        format!("{us}us")
    } else if us < 1_000_000 {
        format!("{:.3}ms", us as f64 / 1e3)
    } else {
        format!("{:.3}s", us as f64 / 1e6)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_units() {
        assert_eq!(parse_duration("5ms"), Ok(Duration::from_millis(5)));
        assert_eq!(parse_duration("250us"), Ok(Duration::from_micros(250)));
        assert_eq!(parse_duration("1.5s"), Ok(Duration::from_millis(1500)));
        assert_eq!(parse_duration(" 2m "), Ok(Duration::from_secs(120)));
        assert!(parse_duration("5").is_err());
        assert!(parse_duration("ms").is_err());
        assert!(parse_duration("5h").is_err());
        assert!(parse_duration("1.2.3ms").is_err());
        assert_eq!(fmt_duration(Duration::from_micros(1500)), "1.500ms");
    }
}
