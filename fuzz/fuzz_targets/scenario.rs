#![no_main]

use libfuzzer_sys::fuzz_target;

// Scenario files come from users: parsing and validation must return an error naming
// the field, never panic, whatever the text.
fuzz_target!(|data: &[u8]| {
    if let Ok(s) = std::str::from_utf8(data) {
        let _ = napilab_core::scenario::parse(s, "fuzz.toml", Some(2));
    }
});
