#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    if let Ok(s) = std::str::from_utf8(data) {
        let (cpu, _flag) = napilab_probe::host_identity::parse_cpuinfo(s);
        // The summary formats every parsed field; it must not panic either.
        let identity = napilab_core::HostIdentity {
            cpu,
            ..Default::default()
        };
        let _ = identity.summary();
        let _ = identity.differences(&napilab_core::HostIdentity::default());
    }
});
