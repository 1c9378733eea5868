#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    if let Ok(s) = std::str::from_utf8(data) {
        // Both row-to-CPU fallbacks: online CPUs given, and none.
        let _ = napilab_probe::procfs::parse_softnet(s, &[0, 1, 3]);
        let _ = napilab_probe::procfs::parse_softnet(s, &[]);
    }
});
