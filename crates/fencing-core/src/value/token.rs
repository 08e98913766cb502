//! The fencing token: a number that rises with every acquisition of a resource.

use std::fmt;
use std::num::NonZeroU64;
use std::str::FromStr;

use crate::value::input::{InputKind, InvalidInput};

/// A fencing token: issued with a lease, strictly increasing per resource, never reused.
///
/// The range is `1 ..= i64::MAX`, so a token maps losslessly onto a Postgres `BIGINT`,
/// a DynamoDB Number and a decimal string. `0` means "no fence yet" and is never a token.
/// Every constructor checks the range; a `FencingToken` in hand is always valid.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct FencingToken(NonZeroU64);

impl FencingToken {
    /// The lowest token, `1`.
    pub const MIN: FencingToken = FencingToken(NonZeroU64::MIN);
    /// The highest token, `i64::MAX`.
    pub const MAX: FencingToken = match NonZeroU64::new(i64::MAX as u64) {
        Some(max) => FencingToken(max),
        None => unreachable!(),
    };

    /// Checks that `value` lies in `1 ..= i64::MAX`.
    pub fn new(value: u64) -> Result<Self, InvalidInput> {
        match NonZeroU64::new(value) {
            Some(nz) if value <= Self::MAX.get() => Ok(FencingToken(nz)),
            _ => Err(out_of_range(value)),
        }
    }

    /// Checks that a signed value (as stored in a `BIGINT`) lies in `1 ..= i64::MAX`.
    pub fn from_i64(value: i64) -> Result<Self, InvalidInput> {
        u64::try_from(value)
            .map_err(|_| out_of_range(value))
            .and_then(Self::new)
    }

    /// The token as an unsigned number.
    pub fn get(self) -> u64 {
        self.0.get()
    }

    /// The token as a signed number; lossless because tokens never exceed `i64::MAX`.
    pub fn as_i64(self) -> i64 {
        self.0.get() as i64
    }

    /// The token after this one, or `None` when this is [`FencingToken::MAX`].
    pub fn next(self) -> Option<Self> {
        Self::new(self.get() + 1).ok()
    }
}

fn out_of_range(value: impl fmt::Display) -> InvalidInput {
    InvalidInput::new(
        InputKind::Token,
        format!(
            "{value} is not a fencing token: tokens lie in 1..={}",
            i64::MAX
        ),
    )
}

impl fmt::Display for FencingToken {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Display::fmt(&self.0, f)
    }
}

impl FromStr for FencingToken {
    type Err = InvalidInput;

    /// Parses the canonical decimal form only: ASCII digits, no sign, no spaces, no leading
    /// zero (`"033"` is refused: a token has one spelling, so two texts never name one token).
    fn from_str(text: &str) -> Result<Self, Self::Err> {
        let canonical = text.bytes().all(|b| b.is_ascii_digit()) && !text.starts_with('0');
        if text.is_empty() || !canonical {
            return Err(InvalidInput::new(
                InputKind::Token,
                format!("{text:?} is not a decimal fencing token"),
            ));
        }
        let value: u64 = text.parse().map_err(|_| out_of_range(text))?;
        Self::new(value)
    }
}

impl TryFrom<u64> for FencingToken {
    type Error = InvalidInput;
    fn try_from(value: u64) -> Result<Self, Self::Error> {
        Self::new(value)
    }
}

impl TryFrom<i64> for FencingToken {
    type Error = InvalidInput;
    fn try_from(value: i64) -> Result<Self, Self::Error> {
        Self::from_i64(value)
    }
}

impl From<FencingToken> for u64 {
    fn from(token: FencingToken) -> u64 {
        token.get()
    }
}

impl From<FencingToken> for i64 {
    fn from(token: FencingToken) -> i64 {
        token.as_i64()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn zero_is_never_a_token() {
        assert!(FencingToken::new(0).is_err());
        assert!(FencingToken::from_i64(0).is_err());
        assert!("0".parse::<FencingToken>().is_err());
        assert!("01".parse::<FencingToken>().is_err());
    }

    #[test]
    fn range_ends_at_i64_max() {
        assert_eq!(
            FencingToken::new(i64::MAX as u64).unwrap(),
            FencingToken::MAX
        );
        assert!(FencingToken::new(i64::MAX as u64 + 1).is_err());
        assert!(FencingToken::new(u64::MAX).is_err());
        assert!(FencingToken::from_i64(-1).is_err());
        assert!(FencingToken::from_i64(i64::MIN).is_err());
        assert_eq!(FencingToken::MAX.next(), None);
        assert_eq!(FencingToken::MIN.next().unwrap().get(), 2);
    }

    #[test]
    fn parsing_accepts_only_plain_digits() {
        assert_eq!("34".parse::<FencingToken>().unwrap().get(), 34);
        assert_eq!(
            "9223372036854775807".parse::<FencingToken>().unwrap(),
            FencingToken::MAX
        );
        for bad in [
            "",
            "-1",
            "+1",
            " 1",
            "1 ",
            "1e3",
            "033",
            "00",
            "0034",
            "0x10",
            "9223372036854775808",
            "99999999999999999999999",
        ] {
            let err = bad.parse::<FencingToken>().unwrap_err();
            assert_eq!(err.kind(), InputKind::Token, "{bad:?}");
        }
    }

    #[test]
    fn round_trips_through_signed_and_text() {
        let token = FencingToken::new(33).unwrap();
        assert_eq!(FencingToken::from_i64(token.as_i64()).unwrap(), token);
        assert_eq!(token.to_string().parse::<FencingToken>().unwrap(), token);
        assert!(token < token.next().unwrap());
    }

    #[test]
    fn a_token_converts_to_its_number() {
        let token = FencingToken::new(34).unwrap();
        assert_eq!(u64::from(token), 34);
        assert_eq!(i64::from(token), 34);
        assert_eq!(i64::from(FencingToken::MAX), i64::MAX);
    }
}
