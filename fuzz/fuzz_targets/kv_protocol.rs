#![no_main]

//! The key-value server's request parser and the load generator's reply parser
//! (napilab_lab::request::protocol) on arbitrary bytes: never panic, always consume a
//! non-empty prefix of the buffer, and a whole message parses the same with more bytes
//! behind it.

use libfuzzer_sys::fuzz_target;
use napilab_lab::request::protocol::{parse_request, parse_response};

fuzz_target!(|data: &[u8]| {
    let mut at = 0;
    // Bounded: every step consumes at least one byte.
    while let Ok(Some((req, used))) = parse_request(&data[at..]) {
        assert!(used > 0 && at + used <= data.len());
        let again = parse_request(&data[at..at + used]);
        assert_eq!(again, Ok(Some((req, used))));
        at += used;
    }
    let mut at = 0;
    while let Ok(Some((resp, used))) = parse_response(&data[at..]) {
        assert!(used > 0 && at + used <= data.len());
        let again = parse_response(&data[at..at + used]);
        assert_eq!(again, Ok(Some((resp, used))));
        at += used;
    }
});
