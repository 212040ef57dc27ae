#![no_main]
//! See `flotilla_core::fuzzing::parqdb_metadata` for what this target checks.

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    flotilla_core::fuzzing::parqdb_metadata(data);
});
