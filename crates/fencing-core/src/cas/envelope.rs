//! The envelope: how a fenced record is kept in an object store, fence inside the body.
//!
//! An object store compares ETags, and an ETag covers the body alone. With the fence only in
//! metadata, a newer holder that writes a byte-identical body gets the same ETag, and a stale
//! holder's `If-Match` on that ETag would succeed and lower the fence. The envelope puts the
//! fence, the state and a per-write id in the body, ahead of the payload, so every write's body
//! differs from every other's.
//!
//! Format version 1 (`docs/envelope.md` says the same for other languages); integers are
//! unsigned big-endian:
//!
//! | offset | size | field |
//! | ---: | ---: | --- |
//! | 0 | 4 | magic `FNCE` |
//! | 4 | 1 | format version, `1` |
//! | 5 | 1 | flags: bit 0 the record has a fence, bit 1 it has a state, bit 2 it is a tombstone (no state, no payload); other bits 0 |
//! | 6 | 8 | fence, `1 ..= 2^63 − 1` when flagged, else 0 |
//! | 14 | 16 | write id |
//! | 30 | 1 | state length `n`, `0 ..= 64` (0 when not flagged) |
//! | 31 | `n` | state, UTF-8, a valid state name |
//! | 31 + `n` | 8 | payload length `m`, equal to the bytes that follow |
//! | 39 + `n` | `m` | payload |
//!
//! [`decode`] is total: it never panics and never allocates more than the input it was given.

use std::fmt;

use crate::cas::object::{Contents, WriteId};
use crate::contract::store::Record;
use crate::value::name::{RecordKey, State};
use crate::value::token::FencingToken;

/// The first four bytes of every envelope.
pub const MAGIC: [u8; 4] = *b"FNCE";

/// The format version this crate writes.
pub const FORMAT_VERSION: u8 = 1;

const HAS_FENCE: u8 = 0b001;
const HAS_STATE: u8 = 0b010;
const TOMBSTONE: u8 = 0b100;
const HEADER: usize = 4 + 1 + 1 + 8 + 16 + 1;

/// Why bytes are not an envelope this crate can read.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum EnvelopeError {
    /// Fewer bytes than the fields need.
    Truncated {
        /// What was being read.
        field: &'static str,
    },
    /// The first bytes are not [`MAGIC`]: not an envelope at all.
    NotAnEnvelope,
    /// A format version this crate does not know.
    UnknownVersion(u8),
    /// Flag bits this version does not define.
    UnknownFlags(u8),
    /// A fence of 0 flagged present, or above `i64::MAX`, or non-zero flagged absent.
    BadFence(u64),
    /// A state that is not a valid state name, or longer than allowed.
    BadState(String),
    /// A tombstone with a state or a payload.
    BadTombstone,
    /// A tombstone where a record was expected: the record was deleted by a store that keeps
    /// tombstones ([`decode_contents`] reads them).
    Tombstone,
    /// The payload length disagrees with the bytes that follow.
    LengthMismatch {
        /// The length the envelope declares.
        declared: u64,
        /// The bytes that follow it.
        actual: usize,
    },
}

impl fmt::Display for EnvelopeError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            EnvelopeError::Truncated { field } => write!(f, "envelope truncated in its {field}"),
            EnvelopeError::NotAnEnvelope => f.write_str("not a fenced-record envelope"),
            EnvelopeError::UnknownVersion(v) => write!(f, "unknown envelope version {v}"),
            EnvelopeError::UnknownFlags(flags) => write!(f, "unknown envelope flags {flags:#04x}"),
            EnvelopeError::BadFence(fence) => write!(f, "envelope fence {fence} is not a token"),
            EnvelopeError::BadState(why) => write!(f, "envelope state: {why}"),
            EnvelopeError::BadTombstone => {
                f.write_str("a tombstone envelope with a state or payload")
            }
            EnvelopeError::Tombstone => f.write_str("a tombstone, not a record"),
            EnvelopeError::LengthMismatch { declared, actual } => write!(
                f,
                "envelope payload declares {declared} bytes but {actual} follow"
            ),
        }
    }
}

impl std::error::Error for EnvelopeError {}

/// The body of `record`, written by `write_id`.
pub fn encode(record: &Record, write_id: WriteId) -> Vec<u8> {
    let state = record.state.as_ref().map_or("", |s| s.as_str()).as_bytes();
    let state_flag = if record.state.is_some() { HAS_STATE } else { 0 };
    encode_parts(state_flag, record.fence, write_id, state, &record.payload)
}

/// The body of a tombstone for a record whose fence was `fence`, written by `write_id`.
pub fn encode_tombstone(fence: Option<FencingToken>, write_id: WriteId) -> Vec<u8> {
    encode_parts(TOMBSTONE, fence, write_id, b"", b"")
}

fn encode_parts(
    flags: u8,
    fence: Option<FencingToken>,
    write_id: WriteId,
    state: &[u8],
    payload: &[u8],
) -> Vec<u8> {
    let mut body = Vec::with_capacity(HEADER + state.len() + 8 + payload.len());
    body.extend_from_slice(&MAGIC);
    body.push(FORMAT_VERSION);
    let fence_flag = if fence.is_some() { HAS_FENCE } else { 0 };
    body.push(flags | fence_flag);
    body.extend_from_slice(&fence.map_or(0, FencingToken::get).to_be_bytes());
    body.extend_from_slice(&write_id.0.to_be_bytes());
    // A state is at most 64 bytes (`State::MAX_BYTES`), so its length fits one byte.
    body.push(state.len() as u8);
    body.extend_from_slice(state);
    body.extend_from_slice(&(payload.len() as u64).to_be_bytes());
    body.extend_from_slice(payload);
    body
}

/// The record `key` an envelope holds, and the id of the write that stored it; a tombstone is
/// [`EnvelopeError::Tombstone`].
pub fn decode(key: &RecordKey, bytes: &[u8]) -> Result<(Record, WriteId), EnvelopeError> {
    match decode_contents(key, bytes)? {
        (Contents::Record(record), write_id) => Ok((record, write_id)),
        (Contents::Tombstone(_), _) => Err(EnvelopeError::Tombstone),
    }
}

/// What the envelope of record `key` holds, and the id of the write that stored it.
pub fn decode_contents(
    key: &RecordKey,
    bytes: &[u8],
) -> Result<(Contents, WriteId), EnvelopeError> {
    let mut reader = Reader(bytes);
    if reader.take(4, "magic")? != MAGIC {
        return Err(EnvelopeError::NotAnEnvelope);
    }
    let version = reader.byte("version")?;
    if version != FORMAT_VERSION {
        return Err(EnvelopeError::UnknownVersion(version));
    }
    let flags = reader.byte("flags")?;
    if flags & !(HAS_FENCE | HAS_STATE | TOMBSTONE) != 0 {
        return Err(EnvelopeError::UnknownFlags(flags));
    }
    let fence_value = u64::from_be_bytes(reader.array("fence")?);
    let fence = match (flags & HAS_FENCE != 0, fence_value) {
        (false, 0) => None,
        (true, value) => {
            Some(FencingToken::new(value).map_err(|_| EnvelopeError::BadFence(value))?)
        }
        (false, value) => return Err(EnvelopeError::BadFence(value)),
    };
    let write_id = WriteId(u128::from_be_bytes(reader.array("write id")?));
    let state_len = usize::from(reader.byte("state length")?);
    if state_len > State::MAX_BYTES {
        return Err(EnvelopeError::BadState(format!(
            "{state_len} bytes, over the {} allowed",
            State::MAX_BYTES
        )));
    }
    let state_bytes = reader.take(state_len, "state")?;
    let state = match (flags & HAS_STATE != 0, state_bytes) {
        (false, []) => None,
        (false, _) => return Err(EnvelopeError::BadState("present but not flagged".into())),
        (true, bytes) => {
            let text = std::str::from_utf8(bytes)
                .map_err(|_| EnvelopeError::BadState("not UTF-8".into()))?;
            Some(State::new(text).map_err(|e| EnvelopeError::BadState(e.to_string()))?)
        }
    };
    let declared = u64::from_be_bytes(reader.array("payload length")?);
    let rest = reader.0;
    if u64::try_from(rest.len()).ok() != Some(declared) {
        return Err(EnvelopeError::LengthMismatch {
            declared,
            actual: rest.len(),
        });
    }
    if flags & TOMBSTONE != 0 {
        if state.is_some() || !rest.is_empty() {
            return Err(EnvelopeError::BadTombstone);
        }
        return Ok((Contents::Tombstone(fence), write_id));
    }
    let record = Record {
        key: key.clone(),
        fence,
        state,
        payload: rest.to_vec(),
    };
    Ok((Contents::Record(record), write_id))
}

/// Reads fields off the front of the input, never past its end.
struct Reader<'a>(&'a [u8]);

impl<'a> Reader<'a> {
    fn take(&mut self, n: usize, field: &'static str) -> Result<&'a [u8], EnvelopeError> {
        if self.0.len() < n {
            return Err(EnvelopeError::Truncated { field });
        }
        let (taken, rest) = self.0.split_at(n);
        self.0 = rest;
        Ok(taken)
    }

    fn byte(&mut self, field: &'static str) -> Result<u8, EnvelopeError> {
        Ok(self.take(1, field)?[0])
    }

    fn array<const N: usize>(&mut self, field: &'static str) -> Result<[u8; N], EnvelopeError> {
        let mut array = [0; N];
        array.copy_from_slice(self.take(N, field)?);
        Ok(array)
    }
}

#[cfg(test)]
mod tests {
    use rand::rngs::StdRng;
    use rand::{Rng, RngCore, SeedableRng};

    use super::*;

    fn key() -> RecordKey {
        RecordKey::new("r_815").unwrap()
    }

    #[test]
    fn the_header_is_magic_version_flags_fence_write_id_and_state_length() {
        let empty = encode(&samples()[0], WriteId(7));
        // The header, an empty state, and the payload's eight-byte length.
        assert_eq!(empty.len(), HEADER + 8);
        assert_eq!(HEADER, 31);
    }

    #[test]
    fn a_tombstone_with_a_state_or_a_payload_is_refused() {
        let fence = Some(FencingToken::new(34).unwrap());
        for body in [
            encode_parts(TOMBSTONE | HAS_STATE, fence, WriteId(7), b"sent", b""),
            encode_parts(TOMBSTONE, fence, WriteId(7), b"", b"70.25"),
        ] {
            assert_eq!(
                decode_contents(&key(), &body).unwrap_err(),
                EnvelopeError::BadTombstone
            );
        }
        let tombstone = encode_tombstone(fence, WriteId(7));
        assert!(matches!(
            decode_contents(&key(), &tombstone),
            Ok((Contents::Tombstone(f), _)) if f == fence
        ));
    }

    #[test]
    fn each_error_says_what_is_wrong() {
        assert_eq!(
            EnvelopeError::UnknownVersion(9).to_string(),
            "unknown envelope version 9"
        );
        assert_eq!(
            EnvelopeError::Truncated { field: "fence" }.to_string(),
            "envelope truncated in its fence"
        );
    }

    fn samples() -> Vec<Record> {
        let state = |s: &str| Some(State::new(s).unwrap());
        vec![
            Record {
                key: key(),
                fence: None,
                state: None,
                payload: Vec::new(),
            },
            Record {
                key: key(),
                fence: Some(FencingToken::new(34).unwrap()),
                state: state("sending"),
                payload: b"70.25 EUR".to_vec(),
            },
            Record {
                key: key(),
                fence: Some(FencingToken::MAX),
                state: state(&"ü".repeat(32)),
                payload: vec![0, 255, 0, 7],
            },
        ]
    }

    #[test]
    fn every_record_round_trips_with_its_write_id() {
        for record in samples() {
            let id = WriteId::random();
            let (back, back_id) = decode(&key(), &encode(&record, id)).unwrap();
            assert_eq!((back, back_id), (record, id));
        }
    }

    /// The example of docs/envelope.md, byte for byte, so the page's decoder is checked
    /// against what this crate writes.
    #[test]
    fn the_documented_example_is_what_encode_writes() {
        let receipt = Record {
            key: key(),
            fence: Some(FencingToken::new(34).unwrap()),
            state: Some(State::new("sent").unwrap()),
            payload: br#"{"refund":"r_0815","cents":1250}"#.to_vec(),
        };
        let id = WriteId(0x0001_0203_0405_0607_0809_0a0b_0c0d_0e0f);
        let hex: String = encode(&receipt, id)
            .iter()
            .map(|b| format!("{b:02x}"))
            .collect();
        assert_eq!(
            hex,
            "464e434501030000000000000022000102030405060708090a0b0c0d0e0f0473656e74\
             00000000000000207b22726566756e64223a22725f30383135222c2263656e7473223a313235307d"
        );
    }

    #[test]
    fn the_fence_is_in_the_body_so_identical_payloads_differ() {
        let [_, a, _] = <[Record; 3]>::try_from(samples()).unwrap();
        let b = Record {
            fence: Some(FencingToken::new(35).unwrap()),
            ..a.clone()
        };
        let id = WriteId(7);
        assert_ne!(encode(&a, id), encode(&b, id));
        assert_ne!(encode(&a, WriteId(1)), encode(&a, WriteId(2)));
    }

    #[test]
    fn a_tombstone_keeps_its_fence_and_is_no_record() {
        let fence = FencingToken::new(34).unwrap();
        let id = WriteId::random();
        let body = encode_tombstone(Some(fence), id);
        assert_eq!(
            decode_contents(&key(), &body),
            Ok((Contents::Tombstone(Some(fence)), id))
        );
        assert_eq!(decode(&key(), &body), Err(EnvelopeError::Tombstone));
        // Two deletes under one fence still differ: the write id is in the body.
        assert_ne!(body, encode_tombstone(Some(fence), WriteId::random()));
        let record = &samples()[1];
        let (decoded, _) = decode_contents(&key(), &encode(record, id)).unwrap();
        assert_eq!(decoded, Contents::Record(record.clone()));
    }

    #[test]
    fn known_defects_are_named() {
        let good = encode(&samples()[1], WriteId(1));
        let with = |at: usize, byte: u8| {
            let mut bytes = good.clone();
            bytes[at] = byte;
            decode(&key(), &bytes).unwrap_err()
        };
        assert_eq!(with(0, b'X'), EnvelopeError::NotAnEnvelope);
        assert_eq!(with(4, 2), EnvelopeError::UnknownVersion(2));
        assert_eq!(with(5, 0b1011), EnvelopeError::UnknownFlags(0b1011));
        assert_eq!(with(5, 0b111), EnvelopeError::BadTombstone);
        assert!(matches!(with(6, 0x80), EnvelopeError::BadFence(_)));
        assert!(matches!(with(30, 65), EnvelopeError::BadState(_)));
        let mut longer = good.clone();
        longer.push(0);
        assert!(matches!(
            decode(&key(), &longer),
            Err(EnvelopeError::LengthMismatch { .. })
        ));
        let mut huge = good[..good.len() - 9 - 8].to_vec();
        huge.extend_from_slice(&u64::MAX.to_be_bytes());
        assert!(matches!(
            decode(&key(), &huge),
            Err(EnvelopeError::LengthMismatch {
                declared: u64::MAX,
                ..
            })
        ));
        assert_eq!(
            decode(&key(), b"plain text, not an envelope"),
            Err(EnvelopeError::NotAnEnvelope)
        );
    }

    /// Every truncation and every single-bit flip of valid envelopes, and a million random
    /// inputs (half of them starting with the magic and version): the decoder returns, never
    /// panics, and anything it accepts re-encodes to the same bytes.
    #[test]
    fn the_decoder_is_total() {
        let mut decoded = 0u64;
        let mut check = |bytes: &[u8]| {
            decoded += 1;
            let reencoded = match decode_contents(&key(), bytes) {
                Ok((Contents::Record(record), id)) => encode(&record, id),
                Ok((Contents::Tombstone(fence), id)) => encode_tombstone(fence, id),
                Err(_) => return,
            };
            assert_eq!(reencoded, bytes, "accepted bytes must be canonical");
        };
        let tombstones = [
            encode_tombstone(None, WriteId::random()),
            encode_tombstone(Some(FencingToken::new(34).unwrap()), WriteId::random()),
        ];
        let bodies = samples()
            .into_iter()
            .map(|record| encode(&record, WriteId::random()))
            .chain(tombstones);
        for good in bodies {
            for len in 0..=good.len() {
                check(&good[..len]);
            }
            for bit in 0..good.len() * 8 {
                let mut flipped = good.clone();
                flipped[bit / 8] ^= 1 << (bit % 8);
                check(&flipped);
            }
        }
        let mut rng = StdRng::seed_from_u64(0xfe1ce);
        let mut buffer = [0u8; 128];
        for i in 0..1_000_000 {
            let len = rng.random_range(0..buffer.len());
            rng.fill_bytes(&mut buffer[..len]);
            if i % 2 == 0 && len >= 5 {
                buffer[..4].copy_from_slice(&MAGIC);
                buffer[4] = FORMAT_VERSION;
            }
            check(&buffer[..len]);
        }
        assert!(decoded > 1_000_000, "{decoded}");
        println!("decoder fed {decoded} inputs");
    }
}
