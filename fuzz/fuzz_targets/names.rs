//! The name and token parsers on any text: they never panic, and what they accept they keep
//! exactly (a key, a resource, a state is its text; a token prints as it was parsed).
#![no_main]

use fencing_core::{FencingToken, RecordKey, ResourceName, State};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|text: &str| {
    if let Ok(key) = RecordKey::new(text) {
        assert_eq!(key.as_str(), text);
    }
    if let Ok(resource) = ResourceName::new(text) {
        assert_eq!(resource.as_str(), text);
    }
    if let Ok(state) = State::new(text) {
        assert_eq!(state.as_str(), text);
    }
    if let Ok(token) = text.parse::<FencingToken>() {
        assert_eq!(token.to_string().parse::<FencingToken>().ok(), Some(token));
    }
});
