//! Small value types of experiment configs and command lines, each parsed with a clear error:
//! [`Amount`] (a fraction or a count), [`Initiators`] (`all` or a count), [`SeedRange`]
//! (`A..B`, half-open, or a single seed).

use serde::{Deserialize, Serialize};
use std::fmt;
use std::str::FromStr;

/// A number of processes given either as a fraction of N (`0.25`) or as a count (`3`).
/// A value with a decimal point is a fraction and must lie in `[0, 1]`.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Amount {
    Fraction(f64),
    Count(usize),
}

impl Default for Amount {
    fn default() -> Self {
        Amount::Count(0)
    }
}

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("bad amount {input:?}: {reason} (a fraction like 0.25 or a whole count like 3)")]
pub struct AmountError {
    pub input: String,
    pub reason: &'static str,
}

impl FromStr for Amount {
    type Err = AmountError;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let t = s.trim();
        let err = |reason| AmountError { input: s.to_string(), reason };
        if t.contains('.') {
            let f: f64 = t.parse().map_err(|_| err("not a number"))?;
            if !(0.0..=1.0).contains(&f) {
                return Err(err("a fraction must be between 0 and 1"));
            }
            Ok(Amount::Fraction(f))
        } else {
            t.parse::<usize>().map(Amount::Count).map_err(|_| err("not a whole non-negative number"))
        }
    }
}

impl fmt::Display for Amount {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Amount::Fraction(x) => write!(f, "{x:?}"),
            Amount::Count(c) => write!(f, "{c}"),
        }
    }
}

impl Amount {
    /// The count for a group of `n` (fractions round to nearest).
    pub fn of(&self, n: usize) -> usize {
        match *self {
            Amount::Fraction(f) => (f * n as f64).round() as usize,
            Amount::Count(c) => c,
        }
    }
}

/// Which processes start an election at time zero.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Initiators {
    #[default]
    All,
    Count(usize),
}

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("bad initiators {0:?}: expected `all` or a count of at least 1")]
pub struct InitiatorsError(pub String);

impl FromStr for Initiators {
    type Err = InitiatorsError;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let t = s.trim();
        if t.eq_ignore_ascii_case("all") {
            return Ok(Initiators::All);
        }
        match t.parse::<usize>() {
            Ok(k) if k >= 1 => Ok(Initiators::Count(k)),
            _ => Err(InitiatorsError(s.to_string())),
        }
    }
}

impl fmt::Display for Initiators {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Initiators::All => f.write_str("all"),
            Initiators::Count(k) => write!(f, "{k}"),
        }
    }
}

/// Seeds `start..end` (half-open); `S` alone is `S..S+1`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SeedRange {
    pub start: u64,
    pub end: u64,
}

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("bad seed range {0:?}: expected A..B with A < B, or one seed")]
pub struct SeedRangeError(pub String);

impl FromStr for SeedRange {
    type Err = SeedRangeError;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let err = || SeedRangeError(s.to_string());
        let t = s.trim();
        let (a, b) = match t.split_once("..") {
            Some((a, b)) => {
                let a: u64 = a.trim().parse().map_err(|_| err())?;
                let b: u64 = b.trim().parse().map_err(|_| err())?;
                (a, b)
            }
            None => {
                let a: u64 = t.parse().map_err(|_| err())?;
                (a, a.checked_add(1).ok_or_else(err)?)
            }
        };
        if a >= b {
            return Err(err());
        }
        Ok(SeedRange { start: a, end: b })
    }
}

impl fmt::Display for SeedRange {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}..{}", self.start, self.end)
    }
}

impl SeedRange {
    pub fn iter(&self) -> std::ops::Range<u64> {
        self.start..self.end
    }
    pub fn len(&self) -> u64 {
        self.end - self.start
    }
    pub fn is_empty(&self) -> bool {
        self.end <= self.start
    }
}

macro_rules! serde_via_str {
    ($t:ty) => {
        impl Serialize for $t {
            fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
                s.serialize_str(&self.to_string())
            }
        }
        impl<'de> Deserialize<'de> for $t {
            fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
                // Accept numbers as well as strings in config files.
                let v = serde_json::Value::deserialize(d)?;
                let s = match v {
                    serde_json::Value::String(s) => s,
                    serde_json::Value::Number(n) => n.to_string(),
                    other => return Err(serde::de::Error::custom(format!("unexpected {other}"))),
                };
                s.parse().map_err(serde::de::Error::custom)
            }
        }
    };
}
serde_via_str!(Amount);
serde_via_str!(Initiators);
serde_via_str!(SeedRange);

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn amounts() {
        assert_eq!("0.25".parse(), Ok(Amount::Fraction(0.25)));
        assert_eq!("3".parse(), Ok(Amount::Count(3)));
        assert_eq!(Amount::Fraction(0.25).of(10), 3);
        for bad in ["1.5", "-1", "x", "-0.5"] {
            assert!(bad.parse::<Amount>().is_err(), "{bad}");
        }
    }

    #[test]
    fn initiators_and_seeds() {
        assert_eq!("all".parse(), Ok(Initiators::All));
        assert_eq!("4".parse(), Ok(Initiators::Count(4)));
        assert!("0".parse::<Initiators>().is_err());
        assert_eq!("3..7".parse(), Ok(SeedRange { start: 3, end: 7 }));
        assert_eq!("9".parse(), Ok(SeedRange { start: 9, end: 10 }));
        assert!("7..3".parse::<SeedRange>().is_err());
        assert!("a..b".parse::<SeedRange>().is_err());
    }
}
