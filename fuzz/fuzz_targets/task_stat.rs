#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    if let Ok(s) = std::str::from_utf8(data) {
        if let Ok(t) = napilab_probe::procfs::parse_task_stat(s) {
            let _ = t.policy.map(napilab_probe::procfs::policy_name);
        }
        let _ = napilab_probe::procfs::parse_status_cpus_allowed(s);
        let _ = napilab_probe::procfs::parse_schedstat(s, 1);
    }
});
