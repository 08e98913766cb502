//! The JSON codec on any body: it never panics, and a body it accepts (a record or a
//! tombstone), written again, reads back as the same contents and write id.
#![no_main]

use fencing_core::RecordKey;
use fencing_core::adapter::{JsonCodec, ObjectCodec};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|body: &[u8]| {
    let key = RecordKey::new("r_815").expect("a key");
    let codec = JsonCodec::new();
    if let Ok((contents, write_id)) = codec.decode(&key, body) {
        let written = codec
            .encode(&contents, write_id)
            .expect("what it read can be written");
        let (again, again_id) = codec
            .decode(&key, &written)
            .expect("what it wrote reads back");
        assert_eq!(again, contents);
        assert_eq!(again_id, write_id);
    }
});
