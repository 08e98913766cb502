//! A lease's time-to-live.

use std::fmt;
use std::str::FromStr;
use std::time::Duration;

use crate::value::input::{InputKind, InvalidInput};

/// A lease's time-to-live: whole milliseconds, at least 1 ms and at most [`Ttl::MAX`].
///
/// The TTL is how long a crashed holder blocks the resource. It is not how long a live holder
/// may safely write: only the fence says that.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Ttl(Duration);

impl Ttl {
    /// The longest TTL, one day: a longer one is a crash-recovery time nobody wants, and it
    /// fits every store's expiry arithmetic.
    pub const MAX: Ttl = Ttl(Duration::from_secs(24 * 60 * 60));

    /// Rounds `duration` down to whole milliseconds (what stores keep) and checks the range.
    pub fn new(duration: Duration) -> Result<Self, InvalidInput> {
        let millis = duration.as_millis();
        if millis == 0 {
            return Err(InvalidInput::new(
                InputKind::Ttl,
                format!("{duration:?} is less than the shortest TTL of 1 ms"),
            ));
        }
        if duration > Self::MAX.0 {
            return Err(InvalidInput::new(
                InputKind::Ttl,
                format!("{duration:?} is longer than the longest TTL of one day"),
            ));
        }
        Ok(Ttl(Duration::from_millis(millis as u64)))
    }

    /// A TTL of `millis` milliseconds.
    pub fn from_millis(millis: u64) -> Result<Self, InvalidInput> {
        Self::new(Duration::from_millis(millis))
    }

    /// A TTL of `secs` seconds.
    pub fn from_secs(secs: u64) -> Result<Self, InvalidInput> {
        Self::new(Duration::from_secs(secs))
    }

    /// The TTL as a duration.
    pub const fn duration(self) -> Duration {
        self.0
    }

    /// The TTL in whole milliseconds.
    pub fn as_millis(self) -> u64 {
        self.0.as_millis() as u64
    }
}

/// The units a TTL is written in, largest first (the order [`Ttl`]'s `Display` tries them).
const UNITS: [(&str, u64); 4] = [("h", 3_600_000), ("min", 60_000), ("s", 1_000), ("ms", 1)];

/// A TTL as written in a configuration file: whole digits and one unit, no space, no sign:
/// `1500ms`, `30s`, `5min`, `1h`. Anything else, or a value out of range, is
/// [`InputKind::Ttl`].
impl FromStr for Ttl {
    type Err = InvalidInput;

    fn from_str(text: &str) -> Result<Self, InvalidInput> {
        let invalid = |why: &str| InvalidInput::new(InputKind::Ttl, format!("{text:?} {why}"));
        let digits = text.bytes().take_while(u8::is_ascii_digit).count();
        let (number, unit) = text.split_at(digits);
        if number.is_empty() {
            return Err(invalid("does not start with a whole number (e.g. 30s)"));
        }
        let Some(&(_, millis_per_unit)) = UNITS.iter().find(|(name, _)| *name == unit) else {
            return Err(invalid("does not end in one of the units h, min, s, ms"));
        };
        let millis = number
            .parse::<u64>()
            .ok()
            .and_then(|n| n.checked_mul(millis_per_unit))
            .ok_or_else(|| invalid("is longer than the longest TTL of one day"))?;
        Self::from_millis(millis)
    }
}

/// The TTL in the largest unit that writes it whole, as [`Ttl`]'s `FromStr` reads it.
impl fmt::Display for Ttl {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let millis = self.as_millis();
        let (unit, per_unit) = UNITS
            .iter()
            .find(|(_, per_unit)| millis.is_multiple_of(*per_unit))
            .expect("every whole number of milliseconds is whole in ms");
        write!(f, "{}{unit}", millis / per_unit)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ttl_is_whole_milliseconds_within_range() {
        assert_eq!(Ttl::new(Duration::ZERO).unwrap_err().kind(), InputKind::Ttl);
        assert!(Ttl::new(Duration::from_micros(999)).is_err());
        assert_eq!(
            Ttl::new(Duration::from_micros(1500)).unwrap().as_millis(),
            1
        );
        assert!(Ttl::new(Ttl::MAX.duration()).is_ok());
        assert!(Ttl::new(Ttl::MAX.duration() + Duration::from_millis(1)).is_err());
    }

    #[test]
    fn the_longest_ttl_is_one_day_and_millis_are_whole() {
        assert_eq!(Ttl::MAX.duration(), Duration::from_secs(86_400));
        assert_eq!(Ttl::MAX.as_millis(), 86_400_000);
        assert_eq!(Ttl::from_millis(1_500).unwrap().as_millis(), 1_500);
    }

    #[test]
    fn a_ttl_reads_digits_and_one_unit_and_writes_itself_back() {
        assert_eq!("30s".parse::<Ttl>().unwrap(), Ttl::from_secs(30).unwrap());
        assert_eq!("1500ms".parse::<Ttl>().unwrap().as_millis(), 1_500);
        assert_eq!("5min".parse::<Ttl>().unwrap().as_millis(), 300_000);
        assert_eq!("24h".parse::<Ttl>().unwrap(), Ttl::MAX);
        for ttl in ["1ms", "1500ms", "30s", "90s", "5min", "1h", "24h"] {
            assert_eq!(ttl.parse::<Ttl>().unwrap().to_string(), ttl);
        }
        assert_eq!(Ttl::from_millis(60_000).unwrap().to_string(), "1min");
    }

    #[test]
    fn a_ttl_that_is_not_digits_and_a_unit_or_out_of_range_is_refused() {
        for bad in [
            "",
            "30",
            "s",
            "-30s",
            "+30s",
            " 30s",
            "30 s",
            "30S",
            "30sec",
            "3.5s",
            "0s",
            "0ms",
            "25h",
            "1441min",
            "99999999999999999999s",
            "18446744073709551615h",
            "٣s",
        ] {
            let err = bad.parse::<Ttl>().unwrap_err();
            assert_eq!(err.kind(), InputKind::Ttl, "{bad:?}");
        }
    }
}
