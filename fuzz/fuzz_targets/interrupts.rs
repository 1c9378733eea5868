#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    if let Ok(s) = std::str::from_utf8(data) {
        if let Ok(irqs) = napilab_probe::procfs::parse_interrupts(s) {
            // The lookups index by position; exercise them on whatever parsed.
            for &cpu in &irqs.cpus {
                let _ = irqs.column(cpu);
            }
            if let Some(first) = irqs.lines.first() {
                let _ = irqs.line(&first.id);
            }
        }
    }
});
