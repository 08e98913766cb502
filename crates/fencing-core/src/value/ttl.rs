//! A lease's time-to-live.

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
}
