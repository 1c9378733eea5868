#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    if let Ok(s) = std::str::from_utf8(data) {
        if let Ok(stat) = napilab_probe::procfs::parse_stat(s) {
            // total() sums kernel-supplied counters; it must not overflow.
            let _ = stat.total.map(|t| t.total());
            for (_, times) in &stat.cpus {
                let _ = times.total();
            }
        }
    }
});
