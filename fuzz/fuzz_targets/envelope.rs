//! The envelope decoder on any bytes: it never panics, and what it accepts it writes back
//! byte for byte (one record, one spelling).
#![no_main]

use fencing_core::RecordKey;
use fencing_core::adapter::Contents;
use fencing_core::adapter::envelope::{decode_contents, encode, encode_tombstone};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|bytes: &[u8]| {
    let key = RecordKey::new("r_815").expect("a key");
    if let Ok((contents, write_id)) = decode_contents(&key, bytes) {
        let again = match &contents {
            Contents::Record(record) => encode(record, write_id),
            Contents::Tombstone(fence) => encode_tombstone(*fence, write_id),
        };
        assert_eq!(again, bytes, "{contents:?} has a second spelling");
    }
});
