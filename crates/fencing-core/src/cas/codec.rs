//! How a fenced record (or the tombstone a delete leaves) is kept in an object's body: the
//! envelope, the fields of the team's own JSON object, or a format of the caller's own.
//!
//! Whatever the format, every write's body must differ from every other write's, even when a
//! newer holder writes a byte-identical payload: an object store compares ETags, which cover
//! the body alone, and a stale holder's `If-Match` must never land on a newer holder's
//! object. Both codecs here put the fence and a fresh per-write id in the body.

use std::fmt;

use crate::cas::envelope;
use crate::cas::object::{Contents, WriteId};
use crate::contract::store::Record;
use crate::value::input::{InputKind, InvalidInput};
use crate::value::name::{RecordKey, State};
use crate::value::token::FencingToken;

/// Why a body is not a record this codec can read. A store never writes over such an object.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct CodecError(pub String);

/// How what an object holds (a record or a tombstone) becomes its body and back.
///
/// # Contract
///
/// * `decode(key, encode(contents, id))` is `(contents, id)` for every record `encode` accepts
///   and for every tombstone (a store checks it before every write: [`encode_checked`]);
/// * two writes with different write ids never share a body;
/// * `decode` refuses, never guesses at, a body it did not write; it never panics.
pub trait ObjectCodec: Send + Sync + fmt::Debug {
    /// The `Content-Type` of the bodies it writes.
    fn content_type(&self) -> &str;

    /// The body of `contents`, written by `write_id`; a record the format cannot hold (a
    /// payload that is not a JSON object, for JSON) is refused as [`InputKind::Write`].
    fn encode(&self, contents: &Contents, write_id: WriteId) -> Result<Vec<u8>, InvalidInput>;

    /// What `key`'s object holds in `body`, and the id of the write that stored it.
    fn decode(&self, key: &RecordKey, body: &[u8]) -> Result<(Contents, WriteId), CodecError>;
}

/// `codec`'s body for `contents` of record `key`, checked to read back as exactly `contents`
/// and `write_id`: a codec that breaks its contract is refused before anything is written.
pub fn encode_checked(
    codec: &dyn ObjectCodec,
    key: &RecordKey,
    contents: &Contents,
    write_id: WriteId,
) -> Result<Vec<u8>, InvalidInput> {
    let body = codec.encode(contents, write_id)?;
    match codec.decode(key, &body) {
        Ok((back, id)) if back == *contents && id == write_id => Ok(body),
        Ok((back, id)) => Err(InvalidInput::new(
            InputKind::Write,
            format!(
                "{codec:?} reads back other contents than it wrote for {key:?} ({}, {id:?} \
                 instead of {}, {write_id:?}); nothing was written",
                described(&back),
                described(contents),
            ),
        )),
        Err(e) => Err(InvalidInput::new(
            InputKind::Write,
            format!(
                "{codec:?} cannot read back its own body for {key:?} ({e}); nothing was written"
            ),
        )),
    }
}

/// `contents` in a refusal, without the payload's bytes.
fn described(contents: &Contents) -> String {
    match contents {
        Contents::Record(record) => format!(
            "fence {:?}, state {:?}, {} payload bytes",
            record.fence,
            record.state,
            record.payload.len()
        ),
        Contents::Tombstone(kept) => format!("a tombstone keeping fence {kept:?}"),
    }
}

/// The envelope ([`crate::adapter::envelope`]): fence, state and write id ahead of the
/// payload, any payload bytes. The default.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct EnvelopeCodec;

impl ObjectCodec for EnvelopeCodec {
    fn content_type(&self) -> &str {
        "application/vnd.fencing.envelope"
    }

    fn encode(&self, contents: &Contents, write_id: WriteId) -> Result<Vec<u8>, InvalidInput> {
        Ok(match contents {
            Contents::Record(record) => envelope::encode(record, write_id),
            Contents::Tombstone(kept) => envelope::encode_tombstone(*kept, write_id),
        })
    }

    fn decode(&self, key: &RecordKey, body: &[u8]) -> Result<(Contents, WriteId), CodecError> {
        envelope::decode_contents(key, body).map_err(|e| CodecError(e.to_string()))
    }
}

/// The team's own JSON object as the body, with the fence, the state and the write id as
/// three more fields of it, first: `{"_fence":34,"_state":"sent","_write":"<32 hex>", …the
/// payload's own members, byte for byte…}`. A plain JSON reader needs nothing from this
/// library to read one.
///
/// A deleted record leaves a tombstone of the same three fields and a fourth, last:
/// `{"_fence":34,"_state":null,"_write":"<32 hex>","_deleted":true}` (the fence kept, so that
/// a stale holder cannot write the record back).
///
/// The payload must be a JSON object without members of those four names, or empty (a
/// record without payload is an object of the three fields alone); anything else is refused
/// as [`InputKind::Write`] with nothing written. The payload's own text follows the three
/// fields unchanged, so it reads back byte for byte. The write id changes with every write,
/// so a newer holder's byte-identical payload still changes the body (and its ETag).
///
/// Only bodies in this exact shape are read (the three fields first, in this order, the
/// fence a plain number or `null`, the state a string whose only escapes are `\"` and `\\`,
/// or `null`): an object written otherwise is refused and never written over.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct JsonCodec {
    fence: String,
    state: String,
    write_id: String,
    deleted: String,
}

impl Default for JsonCodec {
    fn default() -> Self {
        JsonCodec {
            fence: "_fence".into(),
            state: "_state".into(),
            write_id: "_write".into(),
            deleted: "_deleted".into(),
        }
    }
}

impl JsonCodec {
    /// Fields `_fence`, `_state` and `_write`, and `_deleted` in a tombstone.
    pub fn new() -> Self {
        JsonCodec::default()
    }

    /// Other names for the four fields: 1 to 64 characters of `A-Z a-z 0-9 _ . -` each (no
    /// escaping needed), all different.
    pub fn with_fields(
        fence: &str,
        state: &str,
        write_id: &str,
        deleted: &str,
    ) -> Result<Self, InvalidInput> {
        let names = [fence, state, write_id, deleted];
        let plain = |name: &str| {
            (1..=64).contains(&name.len())
                && name
                    .bytes()
                    .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'_' | b'.' | b'-'))
        };
        let distinct = names
            .iter()
            .enumerate()
            .all(|(i, name)| !names[..i].contains(name));
        if !names.into_iter().all(plain) || !distinct {
            return Err(InvalidInput::new(
                InputKind::Identifier,
                format!(
                    "JSON fields {fence:?}, {state:?}, {write_id:?}, {deleted:?}: four different \
                     names of 1 to 64 characters of A-Z, a-z, 0-9, '_', '.' and '-'"
                ),
            ));
        }
        Ok(JsonCodec {
            fence: fence.into(),
            state: state.into(),
            write_id: write_id.into(),
            deleted: deleted.into(),
        })
    }

    fn names(&self) -> [&str; 4] {
        [&self.fence, &self.state, &self.write_id, &self.deleted]
    }

    /// What follows the write id in a tombstone, and nothing else.
    fn tombstone_end(&self) -> String {
        format!(",\"{}\":true}}", self.deleted)
    }

    /// The payload's members as a JSON object, refused if it is not one or uses a field name
    /// of the codec's.
    fn payload_object(&self, payload: &[u8]) -> Result<(), String> {
        let object: serde_json::Map<String, serde_json::Value> = serde_json::from_slice(payload)
            .map_err(|e| format!("the payload is not a JSON object ({e})"))?;
        match self
            .names()
            .into_iter()
            .find(|name| object.contains_key(*name))
        {
            Some(name) => Err(format!(
                "the payload has a member {name:?}, which the codec's own field takes"
            )),
            None => Ok(()),
        }
    }
}

/// A state as a JSON string: it holds no control characters, so `"` and `\` are the only
/// characters to escape.
fn json_string(text: &str) -> String {
    let mut quoted = String::with_capacity(text.len() + 2);
    quoted.push('"');
    for c in text.chars() {
        if matches!(c, '"' | '\\') {
            quoted.push('\\');
        }
        quoted.push(c);
    }
    quoted.push('"');
    quoted
}

/// Reads the text `json_string` writes at the start of `text`: the string and what follows.
fn read_json_string(text: &str) -> Option<(String, &str)> {
    let mut chars = text.strip_prefix('"')?.char_indices();
    let mut value = String::new();
    while let Some((_, c)) = chars.next() {
        match c {
            '"' => return Some((value, chars.as_str())),
            '\\' => match chars.next()? {
                (_, escaped @ ('"' | '\\')) => value.push(escaped),
                _ => return None,
            },
            other => value.push(other),
        }
    }
    None
}

impl ObjectCodec for JsonCodec {
    fn content_type(&self) -> &str {
        "application/json"
    }

    fn encode(&self, contents: &Contents, write_id: WriteId) -> Result<Vec<u8>, InvalidInput> {
        let record = match contents {
            Contents::Record(record) => record,
            Contents::Tombstone(kept) => {
                let fence = kept.map_or("null".into(), |f| f.to_string());
                return Ok(format!(
                    "{{\"{}\":{fence},\"{}\":null,\"{}\":\"{:032x}\"{}",
                    self.fence,
                    self.state,
                    self.write_id,
                    write_id.0,
                    self.tombstone_end()
                )
                .into_bytes());
            }
        };
        let refused = |why: String| {
            InvalidInput::new(
                InputKind::Write,
                format!("{:?} cannot be kept as JSON: {why}", record.key),
            )
        };
        let payload = if record.payload.is_empty() {
            "}"
        } else {
            self.payload_object(&record.payload).map_err(refused)?;
            let text = std::str::from_utf8(&record.payload).map_err(|e| refused(e.to_string()))?;
            // The body starts with the codec's own `{`: what precedes the payload's cannot be
            // kept, and an empty object would read back as no payload.
            let members = text.strip_prefix('{').ok_or_else(|| {
                refused("whitespace before the payload's '{' cannot be kept".into())
            })?;
            if members.starts_with('}') {
                return Err(refused(
                    "an empty object `{}` reads back as no payload: write none instead".into(),
                ));
            }
            members
        };
        let fence = record.fence.map_or("null".into(), |f| f.to_string());
        let state = record
            .state
            .as_ref()
            .map_or("null".into(), |s| json_string(s));
        let separator = if payload.trim_start().starts_with('}') {
            ""
        } else {
            ","
        };
        Ok(format!(
            "{{\"{}\":{fence},\"{}\":{state},\"{}\":\"{:032x}\"{separator}{payload}",
            self.fence, self.state, self.write_id, write_id.0
        )
        .into_bytes())
    }

    fn decode(&self, key: &RecordKey, body: &[u8]) -> Result<(Contents, WriteId), CodecError> {
        let refused = |why: &str| CodecError(format!("not a fenced JSON record: {why}"));
        let text = std::str::from_utf8(body).map_err(|_| refused("not UTF-8"))?;
        let rest = text
            .strip_prefix(&format!("{{\"{}\":", self.fence))
            .ok_or_else(|| refused("it does not start with the fence field"))?;
        let digits = rest.bytes().take_while(u8::is_ascii_digit).count();
        let (fence, rest) = if let Some(rest) = rest.strip_prefix("null") {
            (None, rest)
        } else if digits > 0 && !rest.starts_with('0') {
            let token = rest[..digits]
                .parse::<u64>()
                .ok()
                .and_then(|n| FencingToken::new(n).ok())
                .ok_or_else(|| refused("the fence is not a fencing token"))?;
            (Some(token), &rest[digits..])
        } else {
            return Err(refused("the fence is neither a token nor null"));
        };
        let rest = rest
            .strip_prefix(&format!(",\"{}\":", self.state))
            .ok_or_else(|| refused("the state field does not follow the fence"))?;
        let (state, rest) = if let Some(rest) = rest.strip_prefix("null") {
            (None, rest)
        } else {
            let (text, rest) =
                read_json_string(rest).ok_or_else(|| refused("the state is not a string"))?;
            let state = State::new(text).map_err(|e| refused(&e.to_string()))?;
            (Some(state), rest)
        };
        let rest = rest
            .strip_prefix(&format!(",\"{}\":\"", self.write_id))
            .ok_or_else(|| refused("the write id field does not follow the state"))?;
        let hex = rest
            .get(..32)
            .filter(|hex| hex.bytes().all(|b| matches!(b, b'0'..=b'9' | b'a'..=b'f')))
            .ok_or_else(|| refused("the write id is not 32 lowercase hex digits"))?;
        let write_id = WriteId(u128::from_str_radix(hex, 16).map_err(|_| refused("write id"))?);
        let rest = rest[32..]
            .strip_prefix('"')
            .ok_or_else(|| refused("the write id is not 32 lowercase hex digits"))?;
        if rest == self.tombstone_end() {
            if state.is_some() {
                return Err(refused("a tombstone with a state"));
            }
            return Ok((Contents::Tombstone(fence), write_id));
        }
        let payload = if rest == "}" {
            Vec::new()
        } else if let Some(members) = rest.strip_prefix(',') {
            // `,}` would read as an empty object, but it is no JSON a plain reader takes.
            if members.trim_start().starts_with('}') {
                return Err(refused("a comma before the object's closing brace"));
            }
            format!("{{{members}").into_bytes()
        } else if rest.trim_start().starts_with('}') && rest.starts_with(char::is_whitespace) {
            format!("{{{rest}").into_bytes()
        } else {
            return Err(refused("the payload's members do not follow the write id"));
        };
        if !payload.is_empty() {
            self.payload_object(&payload).map_err(|why| refused(&why))?;
        }
        let record = Record {
            key: key.clone(),
            fence,
            state,
            payload,
        };
        Ok((Contents::Record(record), write_id))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_codec_names_its_content_type() {
        assert_eq!(
            EnvelopeCodec.content_type(),
            "application/vnd.fencing.envelope"
        );
        assert_eq!(JsonCodec::new().content_type(), "application/json");
    }

    #[test]
    fn the_four_json_fields_must_all_differ() {
        assert!(JsonCodec::with_fields("fence", "status", "write", "gone").is_ok());
        for names in [
            ["fence", "fence", "write", "gone"],
            ["fence", "status", "status", "gone"],
            ["fence", "status", "write", "fence"],
            ["fence", "status", "write", "write"],
        ] {
            let [fence, state, write_id, deleted] = names;
            let err = JsonCodec::with_fields(fence, state, write_id, deleted).unwrap_err();
            assert_eq!(err.kind(), InputKind::Identifier, "{names:?}");
        }
    }

    fn record(fence: Option<u64>, state: Option<&str>, payload: &[u8]) -> Contents {
        Contents::Record(Record {
            key: key(),
            fence: fence.map(|n| FencingToken::new(n).unwrap()),
            state: state.map(|s| State::new(s).unwrap()),
            payload: payload.to_vec(),
        })
    }

    fn key() -> RecordKey {
        RecordKey::new("r_0815").unwrap()
    }

    fn token(n: u64) -> FencingToken {
        FencingToken::new(n).unwrap()
    }

    #[test]
    fn the_fields_lead_the_teams_own_object_which_reads_back_byte_for_byte() {
        let codec = JsonCodec::new();
        let receipt = record(
            Some(34),
            Some("sent"),
            br#"{"refund":"r_0815", "cents": 1250}"#,
        );
        let body = codec.encode(&receipt, WriteId(0xab)).unwrap();
        assert_eq!(
            String::from_utf8(body.clone()).unwrap(),
            r#"{"_fence":34,"_state":"sent","_write":"000000000000000000000000000000ab","refund":"r_0815", "cents": 1250}"#
        );
        let plain: serde_json::Value = serde_json::from_slice(&body).unwrap();
        assert_eq!(plain["cents"], 1250);
        assert_eq!(plain["_fence"], 34);
        assert_eq!(
            codec.decode(&key(), &body).unwrap(),
            (receipt, WriteId(0xab))
        );
    }

    #[test]
    fn every_shape_of_record_round_trips() {
        let codec = JsonCodec::with_fields("fence", "status", "write.id", "gone").unwrap();
        for sample in [
            record(None, None, b""),
            record(Some(1), None, b"{\"a\":1} "),
            record(Some(i64::MAX as u64), Some("en \"cours\" \\ é"), b"{ }"),
            record(
                Some(7),
                Some("sending"),
                b"{\n  \"a\": [1, {\"b\": null}]\n}",
            ),
        ] {
            let body = encode_checked(&codec, &key(), &sample, WriteId(u128::MAX)).unwrap();
            serde_json::from_slice::<serde_json::Value>(&body).unwrap();
            assert_eq!(codec.decode(&key(), &body).unwrap().0, sample);
        }
    }

    #[test]
    fn a_newer_holders_identical_payload_still_changes_the_body() {
        let codec = JsonCodec::new();
        let older = record(Some(33), Some("sent"), br#"{"cents":1250}"#);
        let newer = record(Some(34), Some("sent"), br#"{"cents":1250}"#);
        let id = WriteId(1);
        assert_ne!(
            codec.encode(&older, id).unwrap(),
            codec.encode(&newer, id).unwrap()
        );
        assert_ne!(
            codec.encode(&older, WriteId(1)).unwrap(),
            codec.encode(&older, WriteId(2)).unwrap()
        );
    }

    #[test]
    fn payloads_json_cannot_hold_are_refused() {
        let codec = JsonCodec::new();
        for payload in [
            &b"[1, 2]"[..],
            b"\"text\"",
            b"70.25",
            b"{\"a\":1",
            b"\xff",
            br#"{"_fence": 1}"#,
            br#"{"_deleted": true}"#,
            b" {\"a\":1}",
            b"{}",
        ] {
            let err = codec
                .encode(&record(Some(1), None, payload), WriteId(1))
                .unwrap_err();
            assert_eq!(err.kind(), InputKind::Write, "{payload:?}");
        }
        assert!(JsonCodec::with_fields("a", "a", "b", "c").is_err());
        assert!(JsonCodec::with_fields("a\"", "b", "c", "d").is_err());
    }

    #[test]
    fn bodies_it_did_not_write_are_refused() {
        let codec = JsonCodec::new();
        let key = key();
        let id = r#""_write":"000000000000000000000000000000ab""#;
        for body in [
            r#"{"cents":1250}"#.to_owned(),
            format!(r#"{{"_fence":034,"_state":null,{id}}}"#),
            format!(r#"{{"_fence":-1,"_state":null,{id}}}"#),
            format!(r#"{{"_fence":9223372036854775808,"_state":null,{id}}}"#),
            format!(r#"{{"_fence":1,"_state":"a\nb",{id}}}"#),
            format!(r#"{{"_fence":1,"_state":"\u0041",{id}}}"#),
            format!(r#"{{"_fence":1,"_state":"",{id}}}"#),
            format!(r#"{{"_fence":1,"_state":null,{id},"_fence":2}}"#),
            format!(r#"{{"_fence":1,"_state":null,{id},"a":}}"#),
            format!(r#"{{"_fence":1,"_state":null,{id}"#),
            r#"{"_fence":1,"_state":null,"_write":"AB"}"#.to_owned(),
            format!(r#"{{"_fence":1,"_state":"sent",{id},"_deleted":true}}"#),
            format!(r#"{{"_fence":1,"_state":null,{id},"_deleted":false}}"#),
            format!(r#"{{"_fence":1,"_state":null,{id},"_deleted":true,"a":1}}"#),
        ] {
            assert!(codec.decode(&key, body.as_bytes()).is_err(), "{body}");
        }
        // Found by the fuzzer (fuzz/seeds/json_codec/trailing_comma): read as the payload `{}`
        // before, though no JSON reader takes them.
        for body in [
            format!(r#"{{"_fence":34,"_state":"sent",{id},}}"#),
            format!(r#"{{"_fence":34,"_state":"sent",{id}, }}"#),
        ] {
            assert!(serde_json::from_str::<serde_json::Value>(&body).is_err());
            assert!(codec.decode(&key, body.as_bytes()).is_err(), "{body}");
        }
    }

    #[test]
    fn a_refusal_says_where_the_body_went_wrong() {
        let codec = JsonCodec::new();
        let key = key();
        let id = r#""_write":"000000000000000000000000000000ab""#;
        for (body, why) in [
            (
                format!(r#"{{"_fence":true,"_state":null,{id}}}"#),
                "the fence is neither a token nor null",
            ),
            (
                format!(r#"{{"_fence":34,"_state":null,{id} "cents":1250}}"#),
                "the payload's members do not follow the write id",
            ),
        ] {
            let err = codec.decode(&key, body.as_bytes()).unwrap_err();
            assert!(err.to_string().ends_with(why), "{body}: {err}");
        }
    }

    /// A codec that writes one fence and reads back another.
    #[derive(Debug)]
    struct Forgetful;

    impl ObjectCodec for Forgetful {
        fn content_type(&self) -> &str {
            "application/octet-stream"
        }

        fn encode(&self, contents: &Contents, write_id: WriteId) -> Result<Vec<u8>, InvalidInput> {
            EnvelopeCodec.encode(contents, write_id)
        }

        fn decode(&self, key: &RecordKey, body: &[u8]) -> Result<(Contents, WriteId), CodecError> {
            let (contents, id) = EnvelopeCodec.decode(key, body)?;
            let forgotten = match contents {
                Contents::Record(record) => Contents::Record(Record {
                    fence: None,
                    ..record
                }),
                Contents::Tombstone(_) => Contents::Tombstone(None),
            };
            Ok((forgotten, id))
        }
    }

    #[test]
    fn a_codec_that_reads_back_another_fence_is_refused_before_writing() {
        for contents in [
            record(Some(34), None, b""),
            Contents::Tombstone(Some(token(34))),
        ] {
            let err = encode_checked(&Forgetful, &key(), &contents, WriteId(1)).unwrap_err();
            assert_eq!(err.kind(), InputKind::Write);
            assert!(err.to_string().contains("nothing was written"), "{err}");
            assert!(encode_checked(&EnvelopeCodec, &key(), &contents, WriteId(1)).is_ok());
        }
    }

    #[test]
    fn a_tombstone_keeps_its_fence_in_either_codec_and_is_no_record() {
        let json = JsonCodec::new();
        for kept in [Some(token(34)), None] {
            let tombstone = Contents::Tombstone(kept);
            for codec in [&json as &dyn ObjectCodec, &EnvelopeCodec] {
                let body = encode_checked(codec, &key(), &tombstone, WriteId(7)).unwrap();
                assert_eq!(
                    codec.decode(&key(), &body).unwrap(),
                    (tombstone.clone(), WriteId(7))
                );
            }
        }
        let body = json
            .encode(&Contents::Tombstone(Some(token(34))), WriteId(0xab))
            .unwrap();
        assert_eq!(
            String::from_utf8(body).unwrap(),
            r#"{"_fence":34,"_state":null,"_write":"000000000000000000000000000000ab","_deleted":true}"#
        );
    }
}
