#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    if let Ok(s) = std::str::from_utf8(data) {
        if let Ok(softirqs) = napilab_probe::procfs::parse_softirqs(s) {
            for &cpu in &softirqs.cpus {
                let _ = softirqs.count("NET_RX", cpu);
            }
        }
    }
});
