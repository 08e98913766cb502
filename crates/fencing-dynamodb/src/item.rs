//! Items read back from the table, checked: what the store may rely on, and what it reports as
//! corrupt.

use std::collections::HashMap;

use aws_sdk_dynamodb::types::AttributeValue;
use fencing_core::FencingToken;

use crate::error::DynamoFailure;

/// An item as the SDK returns it.
pub(crate) type Item = HashMap<String, AttributeValue>;

/// A DynamoDB Number by its value, as the service compares it: `1e3`, `1000` and `1000.0` are
/// one number (the service stores numbers normalised; an emulator may keep the text as sent).
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Number {
    negative: bool,
    /// The significant digits, without leading or trailing zeros (empty for zero).
    digits: Vec<u8>,
    /// The value is `digits × 10^exponent`.
    exponent: i64,
}

impl Number {
    /// The number `text` stands for, or `None` when it is not a number's text.
    pub(crate) fn parse(text: &str) -> Option<Number> {
        let (negative, rest) = match text.as_bytes().first()? {
            b'-' => (true, &text[1..]),
            b'+' => (false, &text[1..]),
            _ => (false, text),
        };
        let (mantissa, exponent) = match rest.find(['e', 'E']) {
            Some(at) => (&rest[..at], rest[at + 1..].parse::<i64>().ok()?),
            None => (rest, 0),
        };
        let (whole, fraction) = mantissa.split_once('.').unwrap_or((mantissa, ""));
        let all_digits = |part: &str| part.bytes().all(|b| b.is_ascii_digit());
        if whole.is_empty() && fraction.is_empty() || !all_digits(whole) || !all_digits(fraction) {
            return None;
        }
        let mut digits: Vec<u8> = whole
            .bytes()
            .chain(fraction.bytes())
            .map(|b| b - b'0')
            .collect();
        let mut exponent = exponent.checked_sub(i64::try_from(fraction.len()).ok()?)?;
        let leading = digits.iter().take_while(|&&d| d == 0).count();
        digits.drain(..leading);
        while digits.last() == Some(&0) {
            digits.pop();
            exponent = exponent.checked_add(1)?;
        }
        Some(Number {
            negative,
            digits,
            exponent,
        })
    }

    /// Below zero.
    pub(crate) fn is_negative(&self) -> bool {
        self.negative && !self.digits.is_empty()
    }

    /// A whole number.
    pub(crate) fn is_integer(&self) -> bool {
        self.digits.is_empty() || self.exponent >= 0
    }

    /// The smallest whole number at or above this one, for a number that is not negative;
    /// `None` past `u64::MAX`.
    pub(crate) fn ceil(&self) -> Option<u64> {
        if self.is_negative() {
            return None;
        }
        let whole_digits = i64::try_from(self.digits.len()).ok()? + self.exponent;
        let mut value: u64 = 0;
        for i in 0..whole_digits.max(0) {
            let digit = usize::try_from(i)
                .ok()
                .and_then(|i| self.digits.get(i))
                .copied()
                .unwrap_or(0);
            value = value.checked_mul(10)?.checked_add(u64::from(digit))?;
        }
        if self.is_integer() {
            Some(value)
        } else {
            value.checked_add(1)
        }
    }
}

/// How a stored Number that is not a whole number is read.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Fractions {
    /// As the next whole number: a fence, which the claim's condition compares by value
    /// (`fence <= token` holds for a fraction exactly when it holds for the next whole number),
    /// so what is read agrees with what the service decided.
    RoundUp,
    /// As corrupt: a counter, whose every update is conditioned on the exact whole number read
    /// before, so the service never updates a fraction.
    Refuse,
}

/// A stored Number read as a token: absent or `0` is "none"; a negative number, one above
/// `i64::MAX`, or anything but a Number is corrupt. Any notation of a number is read by its
/// value (`1e3` is 1000), as the service compares it.
pub(crate) fn token_from(
    what: &str,
    value: Option<&AttributeValue>,
    fractions: Fractions,
) -> Result<Option<FencingToken>, DynamoFailure> {
    let corrupt = |shown: String| {
        DynamoFailure::Corrupt(format!(
            "stored {what} {shown} is not a fencing token (a whole number in 0..={})",
            i64::MAX
        ))
    };
    let text = match value {
        None => return Ok(None),
        Some(AttributeValue::N(text)) => text,
        Some(other) => return Err(corrupt(format!("{other:?}"))),
    };
    let number = Number::parse(text).ok_or_else(|| corrupt(text.clone()))?;
    if !number.is_integer() && fractions == Fractions::Refuse {
        return Err(corrupt(text.clone()));
    }
    match number.ceil() {
        Some(0) => Ok(None),
        Some(n) => FencingToken::new(n)
            .map(Some)
            .map_err(|_| corrupt(text.clone())),
        None => Err(corrupt(text.clone())),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn numbers_are_read_by_their_value_in_any_notation() {
        let n = |text: &str| AttributeValue::N(text.into());
        let read = |text: &str, fractions| token_from("fence", Some(&n(text)), fractions);
        assert_eq!(token_from("fence", None, Fractions::Refuse).unwrap(), None);
        for zero in ["0", "-0", "0.000", "0e5"] {
            assert_eq!(read(zero, Fractions::Refuse).unwrap(), None, "{zero}");
        }
        for thousand in ["1000", "1e3", "1E+3", "1000.0", "01000", "0.1e4", "+1000"] {
            assert_eq!(
                read(thousand, Fractions::Refuse).unwrap(),
                Some(FencingToken::new(1000).unwrap()),
                "{thousand}"
            );
        }
        assert_eq!(
            read("9223372036854775807", Fractions::Refuse).unwrap(),
            Some(FencingToken::MAX)
        );
        for bad in [
            "-7",
            "-0.5",
            "9223372036854775808",
            "1e19",
            "abc",
            "",
            "1e",
            ".",
            "1.2.3",
        ] {
            assert!(read(bad, Fractions::RoundUp).is_err(), "{bad}");
        }
        assert!(read("1.5", Fractions::Refuse).is_err());
        assert_eq!(
            read("1.5", Fractions::RoundUp).unwrap(),
            Some(FencingToken::new(2).unwrap())
        );
        assert_eq!(
            read("0.001", Fractions::RoundUp).unwrap(),
            Some(FencingToken::MIN)
        );
        assert!(
            token_from(
                "fence",
                Some(&AttributeValue::S("34".into())),
                Fractions::RoundUp
            )
            .is_err()
        );
    }
}
