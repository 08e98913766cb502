//! The `fencing` command's usage checks on any command line: they never panic, and every
//! refusal says something (the message the command would print). The store specs reached here
//! go through the same parsers the command connects with.
#![no_main]

use std::ffi::OsString;

use libfuzzer_sys::fuzz_target;

fuzz_target!(|args: Vec<&str>| {
    let argv = std::iter::once(OsString::from("fencing")).chain(args.iter().map(OsString::from));
    if let Err(message) = fencing_cli::check_usage(argv) {
        assert!(!message.trim().is_empty(), "a silent refusal of {args:?}");
    }
});
