//! Values written into a statement's text, for the statements a write sends in one packet
//! (several statements cannot be prepared as one): every byte as hex, so no value is ever
//! read as SQL, whatever it holds.

use std::fmt::Write;

use fencing_core::adapter::refused_char_ranges;

/// Bytes as a hex literal, `X'…'` (a binary string).
pub(crate) fn bytes(value: &[u8]) -> String {
    let mut literal = String::with_capacity(3 + 2 * value.len());
    literal.push_str("X'");
    for byte in value {
        write!(literal, "{byte:02x}").expect("writing to a String");
    }
    literal.push('\'');
    literal
}

/// Text as a `utf8mb4` string, from its bytes in hex.
pub(crate) fn text(value: &str) -> String {
    format!("CONVERT({} USING utf8mb4)", bytes(value.as_bytes()))
}

/// A regular expression (as text, from hex) that matches a stored state holding a character
/// no state may contain (control and format characters, as the core refuses them).
pub(crate) fn refused_in_state() -> String {
    let escape = |c: char| format!("\\x{{{:x}}}", (c as u32).max(1));
    let mut class = String::from("[");
    for &(low, high) in refused_char_ranges() {
        class.push_str(&escape(low));
        if high != low {
            class.push('-');
            class.push_str(&escape(high));
        }
    }
    class.push(']');
    text(&class)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_value_is_hex_or_digits() {
        assert_eq!(bytes(b""), "X''");
        assert_eq!(bytes(b"';--\\\0"), "X'273b2d2d5c00'");
        assert_eq!(text("é'"), "CONVERT(X'c3a927' USING utf8mb4)");
    }
}
