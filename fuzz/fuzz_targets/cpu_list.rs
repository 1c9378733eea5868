#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    if let Ok(s) = std::str::from_utf8(data) {
        let _ = napilab_probe::procfs::parse_cpu_list(s);
        let _ = napilab_probe::procfs::parse_cpu_mask(s);
    }
});
