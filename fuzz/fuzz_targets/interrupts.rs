#![no_main]

use libfuzzer_sys::fuzz_target;
use napilab_probe::procfs::{parse_interrupts, Interrupts, InterruptsParser};

fuzz_target!(|data: &[u8]| {
    if let Ok(s) = std::str::from_utf8(data) {
        if let Ok(irqs) = parse_interrupts(s) {
            // The lookups index by position; exercise them on whatever parsed.
            for &cpu in &irqs.cpus {
                let _ = irqs.column(cpu);
            }
            if let Some(first) = irqs.lines.first() {
                let _ = irqs.line(&first.id);
                let _ = irqs.line_near(irqs.lines.len(), &first.id);
            }
        }
        // Successive samples (texts split at NUL): the parser that caches the layout
        // between them, filling recycled results, must agree with a fresh parse of each.
        let mut parser = InterruptsParser::default();
        let mut outs = [Interrupts::default(), Interrupts::default()];
        for (i, text) in s.split('\0').take(8).enumerate() {
            let out = &mut outs[i % 2];
            let cached = parser.parse_into(text, out).map(|()| out.clone());
            assert_eq!(cached.ok(), parse_interrupts(text).ok(), "{text:?}");
        }
    }
});
