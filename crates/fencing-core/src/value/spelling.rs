//! The one spelling of a key that a typed key column holds: a store whose key column is an
//! integer or a uuid takes a record key only in the spelling that value reads back as, so
//! that two distinct keys (`7` and `007`, a uuid in two cases) never name one row.

/// The integer `text` spells in canonical decimal (no `+`, no leading zeros, `-0` is not
/// one), if it spells one within `i64`.
pub fn canonical_integer(text: &str) -> Option<i64> {
    let n: i64 = text.parse().ok()?;
    (n.to_string() == text).then_some(n)
}

/// The 16 bytes of the uuid `text` spells in lower-case hyphenated form (8-4-4-4-12 hex
/// digits), if it is one.
pub fn canonical_uuid(text: &str) -> Option<[u8; 16]> {
    let hyphens_in_place = text.len() == 36
        && text.char_indices().all(|(i, c)| match i {
            8 | 13 | 18 | 23 => c == '-',
            _ => c.is_ascii_digit() || ('a'..='f').contains(&c),
        });
    if !hyphens_in_place {
        return None;
    }
    let digits: Vec<u8> = text
        .bytes()
        .filter(|b| *b != b'-')
        .map(|b| match b {
            b'0'..=b'9' => b - b'0',
            _ => b - b'a' + 10,
        })
        .collect();
    let mut bytes = [0u8; 16];
    for (byte, pair) in bytes.iter_mut().zip(digits.chunks(2)) {
        *byte = pair[0] << 4 | pair[1];
    }
    Some(bytes)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_integer_has_one_spelling() {
        assert_eq!(canonical_integer("7"), Some(7));
        assert_eq!(canonical_integer("-7"), Some(-7));
        assert_eq!(canonical_integer("0"), Some(0));
        for other in ["007", "+7", "-0", "7.0", " 7", "", "9223372036854775808"] {
            assert_eq!(canonical_integer(other), None, "{other:?}");
        }
    }

    #[test]
    fn a_uuid_has_one_spelling() {
        assert_eq!(
            canonical_uuid("0f8fad5b-d9cb-469f-a165-70867728950e"),
            Some([
                0x0f, 0x8f, 0xad, 0x5b, 0xd9, 0xcb, 0x46, 0x9f, 0xa1, 0x65, 0x70, 0x86, 0x77, 0x28,
                0x95, 0x0e
            ])
        );
        for other in [
            "0F8FAD5B-D9CB-469F-A165-70867728950E",
            "{0f8fad5b-d9cb-469f-a165-70867728950e}",
            "0f8fad5bd9cb469fa16570867728950e",
            "0f8fad5b-d9cb-469f-a165-70867728950",
            "0f8fad5b-d9cb-469f-a165-70867728950g",
        ] {
            assert_eq!(canonical_uuid(other), None, "{other:?}");
        }
    }
}
