#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| dagr_props::fields::check(data));
