#![no_main]
//! See `flotilla_core::fuzzing::namespace_segment` for what this target checks.

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    flotilla_core::fuzzing::namespace_segment(data);
});
