//! Human-friendly durations in the config: `"250ms"`, `"5s"`, `"2m"`, `"1h"`, or a bare
//! integer meaning milliseconds.

use serde::{Deserialize, Deserializer, Serialize, Serializer};
use std::fmt;
use std::time::Duration;

/// A duration written as `"250ms"`, `"5s"`, `"2m"`, `"1h"` or as integer milliseconds.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub struct HumanDuration(pub Duration);

impl HumanDuration {
    /// A duration of `ms` milliseconds.
    pub const fn from_millis(ms: u64) -> Self {
        HumanDuration(Duration::from_millis(ms))
    }
    /// The wrapped [`Duration`].
    pub fn get(self) -> Duration {
        self.0
    }
}

/// Parses `"250ms"`, `"5s"`, `"1.5s"`, `"2m"`, `"1h"` or `"300"` (milliseconds).
pub fn parse_duration(s: &str) -> Result<Duration, String> {
    let s = s.trim();
    let split = s
        .find(|c: char| !(c.is_ascii_digit() || c == '.'))
        .unwrap_or(s.len());
    let (num, unit) = s.split_at(split);
    let value: f64 = num
        .parse()
        .map_err(|_| format!("invalid duration {s:?}: expected e.g. \"500ms\", \"5s\", \"2m\""))?;
    let scale_ms = match unit.trim() {
        "" | "ms" => 1.0,
        "s" => 1_000.0,
        "m" => 60_000.0,
        "h" => 3_600_000.0,
        other => {
            return Err(format!(
                "invalid duration unit {other:?} in {s:?}: use ms, s, m or h"
            ))
        }
    };
    let ms = value * scale_ms;
    if !ms.is_finite() || !(0.0..=1e12).contains(&ms) {
        return Err(format!("duration {s:?} is out of range"));
    }
    Ok(Duration::from_micros((ms * 1000.0).round() as u64))
}

impl fmt::Display for HumanDuration {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let ms = self.0.as_millis();
        if ms.is_multiple_of(3_600_000) && ms > 0 {
            write!(f, "{}h", ms / 3_600_000)
        } else if ms.is_multiple_of(60_000) && ms > 0 {
            write!(f, "{}m", ms / 60_000)
        } else if ms.is_multiple_of(1000) && ms > 0 {
            write!(f, "{}s", ms / 1000)
        } else {
            write!(f, "{ms}ms")
        }
    }
}

impl<'de> Deserialize<'de> for HumanDuration {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        #[derive(Deserialize)]
        #[serde(untagged)]
        enum Raw {
            Int(u64),
            Str(String),
        }
        match Raw::deserialize(d)? {
            Raw::Int(ms) => Ok(HumanDuration(Duration::from_millis(ms))),
            Raw::Str(s) => parse_duration(&s)
                .map(HumanDuration)
                .map_err(serde::de::Error::custom),
        }
    }
}

impl Serialize for HumanDuration {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(&self.to_string())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_units() {
        assert_eq!(parse_duration("250ms").unwrap(), Duration::from_millis(250));
        assert_eq!(parse_duration("5s").unwrap(), Duration::from_secs(5));
        assert_eq!(parse_duration("1.5s").unwrap(), Duration::from_millis(1500));
        assert_eq!(parse_duration("2m").unwrap(), Duration::from_secs(120));
        assert_eq!(parse_duration("300").unwrap(), Duration::from_millis(300));
        assert!(parse_duration("5 parsecs").is_err());
        assert!(parse_duration("").is_err());
    }

    #[test]
    fn displays_round_trip() {
        for s in ["250ms", "5s", "2m", "1h"] {
            let d = HumanDuration(parse_duration(s).unwrap());
            assert_eq!(d.to_string(), s);
        }
    }
}
