//! Validated names: what a lease protects, which record a write touches, which state it is in.
//!
//! Each is non-empty, bounded in length and free of control and format characters (general
//! categories Cc and Cf: NUL, zero-width spaces, bidirectional overrides), so every store can
//! hold it as text (Postgres `TEXT` refuses NUL, S3 keys stop at 1,024 bytes) and two names
//! that look alike in a log are the same name.

use std::borrow::Borrow;
use std::fmt;
use std::ops::Deref;
use std::str::FromStr;

use crate::value::input::{InputKind, InvalidInput, check_text};

macro_rules! validated_name {
    ($(#[$doc:meta])* $name:ident, $kind:expr, $max:expr) => {
        $(#[$doc])*
        #[derive(Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
        pub struct $name(String);

        impl $name {
            /// The longest accepted name, in bytes of UTF-8.
            pub const MAX_BYTES: usize = $max;

            /// Checks that `text` is non-empty, at most [`Self::MAX_BYTES`] long and free of
            /// control and format characters ([`crate::adapter::is_refused_char`]).
            pub fn new(text: impl Into<String>) -> Result<Self, InvalidInput> {
                let text = text.into();
                check_text($kind, &text, $max)?;
                Ok($name(text))
            }

            /// The name as text.
            pub fn as_str(&self) -> &str {
                &self.0
            }
        }

        /// `"r_815".parse::<RecordKey>()`: the same check as `new`.
        impl FromStr for $name {
            type Err = InvalidInput;

            fn from_str(text: &str) -> Result<Self, InvalidInput> {
                Self::new(text)
            }
        }

        impl fmt::Debug for $name {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                fmt::Debug::fmt(&self.0, f)
            }
        }

        impl fmt::Display for $name {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str(&self.0)
            }
        }

        impl Deref for $name {
            type Target = str;
            fn deref(&self) -> &str {
                &self.0
            }
        }

        impl Borrow<str> for $name {
            fn borrow(&self) -> &str {
                &self.0
            }
        }

        impl AsRef<str> for $name {
            fn as_ref(&self) -> &str {
                &self.0
            }
        }

        impl TryFrom<&str> for $name {
            type Error = InvalidInput;
            fn try_from(text: &str) -> Result<Self, Self::Error> {
                Self::new(text)
            }
        }

        impl TryFrom<String> for $name {
            type Error = InvalidInput;
            fn try_from(text: String) -> Result<Self, Self::Error> {
                Self::new(text)
            }
        }
    };
}

validated_name!(
    /// The name of what a lease protects, e.g. `settle:m_4471`.
    ResourceName,
    InputKind::ResourceName,
    200
);

validated_name!(
    /// The key of one fenced record, e.g. the refund id `r_815`.
    RecordKey,
    InputKind::RecordKey,
    1024
);

validated_name!(
    /// A record's state, e.g. `pending`, `sending`, `sent`.
    State,
    InputKind::State,
    64
);

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn empty_long_and_control_names_are_refused() {
        assert_eq!(
            ResourceName::new("").unwrap_err().kind(),
            InputKind::ResourceName
        );
        assert!(ResourceName::new("x".repeat(ResourceName::MAX_BYTES)).is_ok());
        assert!(ResourceName::new("x".repeat(ResourceName::MAX_BYTES + 1)).is_err());
        assert!(ResourceName::new("settle:\0m").is_err());
        assert!(RecordKey::new("r_815\n").is_err());
        assert!(RecordKey::new("x".repeat(RecordKey::MAX_BYTES + 1)).is_err());
        assert!(State::new("").is_err());
    }

    #[test]
    fn parsing_checks_as_new_does() {
        assert_eq!(
            "r_815".parse::<RecordKey>().unwrap(),
            RecordKey::new("r_815").unwrap()
        );
        assert_eq!("pending".parse::<State>().unwrap().as_str(), "pending");
        assert_eq!(
            "settle:\u{200B}m"
                .parse::<ResourceName>()
                .unwrap_err()
                .kind(),
            InputKind::ResourceName
        );
        assert_eq!(
            "".parse::<RecordKey>().unwrap_err().kind(),
            InputKind::RecordKey
        );
    }

    #[test]
    fn look_alikes_with_invisible_characters_are_refused() {
        for text in [
            "settle:\u{200B}m_4471",
            "settle:m_4471\u{200D}",
            "\u{202E}1744_m:eltteS",
            "\u{FEFF}settle:m_4471",
            "settle:m_\u{2066}4471",
        ] {
            let err = ResourceName::new(text).unwrap_err();
            assert_eq!(err.kind(), InputKind::ResourceName, "{text:?}");
            assert!(RecordKey::new(text).is_err(), "{text:?}");
            assert!(State::new(text).is_err(), "{text:?}");
        }
    }

    #[test]
    fn odd_but_printable_names_are_kept_verbatim() {
        for text in [
            "settle:m_4471",
            "a'; DROP TABLE refund; --",
            "{tag}",
            "ünï cødé",
            " ",
        ] {
            assert_eq!(ResourceName::new(text).unwrap().as_str(), text);
        }
    }
}
