//! The JSON codec on any body: it never panics, and a body it accepts, written again, reads
//! back as the same record and write id.
#![no_main]

use fencing_core::RecordKey;
use fencing_core::adapter::{JsonCodec, ObjectCodec};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|body: &[u8]| {
    let key = RecordKey::new("r_815").expect("a key");
    let codec = JsonCodec::new();
    if let Ok((record, write_id)) = codec.decode(&key, body) {
        let written = codec
            .encode(&record, write_id)
            .expect("a record it read can be written");
        let (again, again_id) = codec
            .decode(&key, &written)
            .expect("what it wrote reads back");
        assert_eq!(again, record);
        assert_eq!(again_id, write_id);
    }
});
