//! `/proc/interrupts`: hard IRQ counts per CPU, with the chip and the handlers' names
//! that let napilab tie an IRQ line to a device queue.
//!
//! Layouts seen in the wild, after the `ID:` and one count per online CPU:
//!
//! ```text
//!  36:   0  29692  PCI-MSIX-0000:00:02.0   1-edge      virtio1-req.0       x86, 4.x+
//!   0:  45      0  IO-APIC-edge                timer                     x86, 3.x
//!  11: 123    456  GICv3  27 Level     arch_timer                          arm64
//!  18: 981      0  GIC-0  91 Level     eth0                                OpenWrt
//! LOC: 367  390    Local timer interrupts                                  named
//! ERR:   0                                                                 one total
//! ```
//!
//! The kernel (`show_interrupts()`) prints the chip name, then the hwirq number if the
//! IRQ has a domain, then `Level`/`Edge` on `GENERIC_IRQ_SHOW_LEVEL` architectures,
//! then `-<flow name>` (glued to the hwirq on x86: `1-edge`), then the action names
//! joined by `", "`. Any of these may be absent, so the name is found by skipping what
//! looks like them rather than by column position.

use std::path::Path;

use serde::{Deserialize, Serialize};

use super::ProcError;
use super::{content_lines, is_decimal, next_token, parse_cpu_header, parse_dec, read_text};

const FILE: &str = "/proc/interrupts";

/// A parsed `/proc/interrupts`.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Interrupts {
    /// CPU numbers of the count columns, from the `CPU0 CPU1 CPU3` header. Offline CPUs
    /// have no column, so this is not always `0..n`.
    pub cpus: Vec<u32>,
    /// Every line after the header, in file order.
    pub lines: Vec<InterruptLine>,
}

/// One line of `/proc/interrupts`.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct InterruptLine {
    /// Text before the colon: `"24"`, `"LOC"`, `"ERR"`, `"IPI0"`.
    pub id: String,
    /// `id` as an IRQ number, for numbered lines.
    pub number: Option<u32>,
    /// Counts aligned with [`Interrupts::cpus`]. A line cut short has fewer elements: the
    /// missing CPUs are unknown, not zero, so index with `get`. When `total_only` is set
    /// this holds the single system-wide value instead.
    pub counts: Vec<u64>,
    /// The line has one value for the whole system (`ERR:` and `MIS:` on x86, `Err:` on
    /// arm), not one per CPU: a named line with one value and no description. A
    /// numbered line with one value is a truncated line instead. (A named line cut right
    /// after its first count looks the same as a total and is read as one.)
    pub total_only: bool,
    /// Interrupt chip of a numbered line (`IO-APIC`, `PCI-MSIX-0000:00:02.0`, `GICv3`).
    pub chip: Option<String>,
    /// For numbered lines the action names (`"virtio2-input.0"`,
    /// `"eth0-TxRx-0, eth0-other"`; empty when no handler is installed); for named lines
    /// the description (`"Local timer interrupts"`).
    pub name: String,
}

impl Interrupts {
    /// The line whose id is `id` (`"38"`, `"LOC"`).
    pub fn line(&self, id: &str) -> Option<&InterruptLine> {
        self.lines.iter().find(|l| l.id == id)
    }

    /// The line whose id is `id`, looked for first at `index`: between two samples the
    /// lines rarely move, so matching another sample's line `index` by position makes a
    /// pass over all lines linear instead of quadratic (thousands of lines on large
    /// hosts, once per CPU).
    pub fn line_near(&self, index: usize, id: &str) -> Option<&InterruptLine> {
        crate::near::find_near(&self.lines, index, |line| line.id == id)
    }

    /// Index into [`InterruptLine::counts`] of `cpu`, if it is online.
    pub fn column(&self, cpu: u32) -> Option<usize> {
        self.cpus.iter().position(|&c| c == cpu)
    }
}

/// Parses the text of `/proc/interrupts`.
pub fn parse_interrupts(text: &str) -> Result<Interrupts, ProcError> {
    let mut parsed = Interrupts::default();
    InterruptsParser::default().parse_into(text, &mut parsed)?;
    Ok(parsed)
}

/// Reads and parses `<root>/proc/interrupts`.
pub fn read_interrupts(root: &Path) -> Result<Interrupts, ProcError> {
    parse_interrupts(&read_text(root, "proc/interrupts")?)
}

/// Parses successive `/proc/interrupts` texts of one host, re-parsing only what changed.
///
/// Between two samples only the counts change: the header, the IRQ lines and their
/// chip and handler names stay. So the parser keeps, for the last header and for each
/// line, the text after its counts with what was parsed from it; a line whose id and
/// text after the counts are the same as the cached line's at that position only has
/// its counts parsed. A new header (a CPU came online) drops the whole layout, a new,
/// moved or renamed line re-parses that line, so the result is always what
/// [`parse_interrupts`] returns for the same text.
#[derive(Debug, Default)]
pub struct InterruptsParser {
    header: String,
    cpus: Vec<u32>,
    layout: Vec<CachedLine>,
}

/// A line of the last text, without its counts.
#[derive(Debug)]
struct CachedLine {
    /// The text after the counts (with its leading whitespace).
    tail: String,
    /// What was parsed from the id and `tail`; `counts` empty.
    parsed: InterruptLine,
}

impl InterruptsParser {
    /// Parses `text` into `out`, reusing its allocations (e.g. the lines of a previous
    /// sample's result): in the steady state nothing is allocated. On error `out` holds
    /// a partial result and should be discarded.
    pub fn parse_into(&mut self, text: &str, out: &mut Interrupts) -> Result<(), ProcError> {
        let mut lines = content_lines(text);
        let Some((header_no, header)) = lines.next() else {
            return Err(ProcError::parse(
                FILE,
                1,
                "expected a header of CPU<n> columns, found an empty file",
            ));
        };
        if header != self.header || self.header.is_empty() {
            self.cpus = parse_cpu_header(FILE, header_no, header)?;
            self.header.clear();
            self.header.push_str(header);
            self.layout.clear();
        }
        out.cpus.clone_from(&self.cpus);
        let ncpus = self.cpus.len();
        let mut used = 0;
        for (index, (no, line)) in lines.enumerate() {
            if out.lines.len() == index {
                out.lines.push(InterruptLine::default());
            }
            // In bounds: lines 0..index were filled (or pushed) before this one.
            let target = &mut out.lines[index];
            let (id, rest) = split_id(no, line)?;
            let tail = parse_counts(no, rest, ncpus, &mut target.counts)?;
            match self.layout.get(index) {
                Some(cached) if cached.parsed.id == id && cached.tail == tail => {
                    target.id.clone_from(&cached.parsed.id);
                    target.number = cached.parsed.number;
                    target.chip.clone_from(&cached.parsed.chip);
                    target.name.clone_from(&cached.parsed.name);
                    target.total_only = is_total_only(target.number, ncpus, &target.counts, tail);
                }
                _ => {
                    let counts = std::mem::take(&mut target.counts);
                    *target = describe_line(id, counts, tail, ncpus);
                    let cached = CachedLine {
                        tail: tail.to_owned(),
                        parsed: InterruptLine {
                            counts: Vec::new(),
                            ..target.clone()
                        },
                    };
                    match self.layout.get_mut(index) {
                        Some(slot) => *slot = cached,
                        None => self.layout.push(cached),
                    }
                }
            }
            used = index + 1;
        }
        out.lines.truncate(used);
        self.layout.truncate(used);
        Ok(())
    }
}

/// The id before the colon (trimmed) and the rest of the line.
fn split_id(no: usize, line: &str) -> Result<(&str, &str), ProcError> {
    let Some((id, rest)) = line.split_once(':') else {
        return Err(ProcError::unexpected(
            FILE,
            no,
            "'<irq>:' followed by counts",
            line.trim(),
        ));
    };
    let id = id.trim();
    if id.is_empty() || id.contains(char::is_whitespace) {
        return Err(ProcError::unexpected(
            FILE,
            no,
            "an IRQ number or name before ':'",
            id,
        ));
    }
    Ok((id, rest))
}

/// Parses the leading counts of `rest` into `counts` (cleared first) and returns the
/// text after them.
fn parse_counts<'a>(
    no: usize,
    mut rest: &'a str,
    ncpus: usize,
    counts: &mut Vec<u64>,
) -> Result<&'a str, ProcError> {
    counts.clear();
    // Counts are the leading decimal tokens; more of them than CPUs (a header that lost a
    // column) are skipped so they are not taken for the chip.
    while let Some((tok, after)) = next_token(rest) {
        if !is_decimal(tok) {
            break;
        }
        if counts.len() < ncpus {
            let count = parse_dec(tok)
                .ok_or_else(|| ProcError::unexpected(FILE, no, "a count below 2^64", tok))?;
            counts.push(count);
        }
        rest = after;
    }
    Ok(rest)
}

/// A named line with one value and nothing after it is a system-wide total.
fn is_total_only(number: Option<u32>, ncpus: usize, counts: &[u64], tail: &str) -> bool {
    number.is_none() && ncpus > 1 && counts.len() == 1 && tail.trim().is_empty()
}

/// The line from its id, its counts and the text after them.
fn describe_line(id: &str, counts: Vec<u64>, rest: &str, ncpus: usize) -> InterruptLine {
    let number = parse_dec(id).and_then(|n| u32::try_from(n).ok());
    if number.is_none() {
        return InterruptLine {
            id: id.to_owned(),
            number,
            total_only: is_total_only(number, ncpus, &counts, rest),
            counts,
            chip: None,
            name: rest.trim().to_owned(),
        };
    }
    let (chip, rest) = match next_token(rest) {
        Some((chip, after)) => (Some(chip.to_owned()), after),
        None => (None, ""),
    };
    InterruptLine {
        id: id.to_owned(),
        number,
        counts,
        total_only: false,
        chip,
        name: skip_hwirq_and_trigger(rest).trim().to_owned(),
    }
}

/// Skips `27`, `27 Level`, `1-edge`, `-edge` or nothing after the chip name and returns
/// the action names that follow.
fn skip_hwirq_and_trigger(mut rest: &str) -> &str {
    let mut flow_name_seen = false;
    if let Some((tok, after)) = next_token(rest) {
        let flow = tok.trim_start_matches(|c: char| c.is_ascii_digit());
        let has_hwirq = flow.len() < tok.len();
        if has_hwirq && (flow.is_empty() || (flow.len() > 1 && flow.starts_with('-'))) {
            flow_name_seen = !flow.is_empty();
            rest = after;
        }
    }
    if let Some((tok, after)) = next_token(rest) {
        if tok == "Level" || tok == "Edge" {
            rest = after;
        }
    }
    if !flow_name_seen {
        if let Some((tok, after)) = next_token(rest) {
            if tok.len() > 1 && tok.starts_with('-') {
                rest = after;
            }
        }
    }
    rest
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse_line(no: usize, line: &str, ncpus: usize) -> Result<InterruptLine, ProcError> {
        let (id, rest) = split_id(no, line)?;
        let mut counts = Vec::with_capacity(ncpus);
        let tail = parse_counts(no, rest, ncpus, &mut counts)?;
        Ok(describe_line(id, counts, tail, ncpus))
    }

    fn one(line: &str, ncpus: usize) -> InterruptLine {
        match parse_line(2, line, ncpus) {
            Ok(l) => l,
            Err(e) => panic!("{line:?}: {e}"),
        }
    }

    #[test]
    fn x86_numbered() {
        let l = one(
            " 36:          0      29692 PCI-MSIX-0000:00:02.0   1-edge      virtio1-req.0",
            2,
        );
        assert_eq!(l.id, "36");
        assert_eq!(l.number, Some(36));
        assert_eq!(l.counts, vec![0, 29692]);
        assert_eq!(l.chip.as_deref(), Some("PCI-MSIX-0000:00:02.0"));
        assert_eq!(l.name, "virtio1-req.0");
        assert!(!l.total_only);
    }

    #[test]
    fn shared_line_keeps_all_actions() {
        let l = one(
            " 16:   5  6  IR-IO-APIC   16-fasteoi   ehci_hcd:usb1, eth0-TxRx-0, eth0-other",
            2,
        );
        assert_eq!(l.name, "ehci_hcd:usb1, eth0-TxRx-0, eth0-other");
        assert_eq!(l.chip.as_deref(), Some("IR-IO-APIC"));
    }

    #[test]
    fn arm_level_and_edge() {
        let l = one(" 11:  1  2  3  4  GICv3  27 Level     arch_timer", 4);
        assert_eq!(l.counts, vec![1, 2, 3, 4]);
        assert_eq!(l.chip.as_deref(), Some("GICv3"));
        assert_eq!(l.name, "arch_timer");
        let l = one(" 50:  7  GIC-0  91 Edge      eth0", 1);
        assert_eq!(l.name, "eth0");
        // Level with a flow name after it.
        let l = one(" 51:  7  GIC-0  92 Level     -fasteoi   spi0", 1);
        assert_eq!(l.name, "spi0");
    }

    #[test]
    fn old_x86_without_hwirq() {
        let l = one("  0:   45   0   IO-APIC-edge      timer", 2);
        assert_eq!(l.chip.as_deref(), Some("IO-APIC-edge"));
        assert_eq!(l.name, "timer");
        // No domain: the flow name follows the chip directly.
        let l = one("  2:   0   0   XT-PIC -XT-PIC   cascade", 2);
        assert_eq!(l.name, "cascade");
    }

    #[test]
    fn empty_name_and_cut_lines() {
        let l = one(" 28:  0  0 PCI-MSIX-0000:00:01.0   0-edge", 2);
        assert_eq!(l.name, "");
        assert_eq!(l.chip.as_deref(), Some("PCI-MSIX-0000:00:01.0"));
        let l = one(" 29:  0  7", 2);
        assert_eq!(l.counts, vec![0, 7]);
        assert_eq!(l.chip, None);
        assert_eq!(l.name, "");
        // A numbered line with one value is truncated, not total-only.
        let l = one(" 30:  5", 2);
        assert_eq!(l.counts, vec![5]);
        assert!(!l.total_only);
        let l = one(" 31:", 2);
        assert!(l.counts.is_empty());
    }

    #[test]
    fn named_lines() {
        let l = one("LOC:      36776      39043   Local timer interrupts", 2);
        assert_eq!(l.number, None);
        assert_eq!(l.counts, vec![36776, 39043]);
        assert_eq!(l.name, "Local timer interrupts");
        assert_eq!(l.chip, None);
        let l = one("ERR:          0", 2);
        assert!(l.total_only);
        assert_eq!(l.counts, vec![0]);
        // With a single CPU a single value is simply that CPU's.
        let l = one("ERR:          3", 1);
        assert!(!l.total_only);
        assert_eq!(l.counts, vec![3]);
    }

    #[test]
    fn extra_count_columns_are_skipped() {
        let l = one(" 40:  1  2  3  IO-APIC  4-edge  ttyS0", 2);
        assert_eq!(l.counts, vec![1, 2]);
        assert_eq!(l.chip.as_deref(), Some("IO-APIC"));
        assert_eq!(l.name, "ttyS0");
    }

    #[test]
    fn errors() {
        let e = parse_interrupts("CPU0\n 1: 2 chip\ngarbage here\n")
            .err()
            .map(|e| e.to_string());
        assert_eq!(
            e.as_deref(),
            Some("/proc/interrupts line 3: expected '<irq>:' followed by counts, found 'garbage here'")
        );
        let e = parse_interrupts("CPU0\n 1: 99999999999999999999 x\n")
            .err()
            .map(|e| e.to_string());
        assert_eq!(
            e.as_deref(),
            Some("/proc/interrupts line 2: expected a count below 2^64, found '99999999999999999999'")
        );
        assert!(parse_interrupts("").is_err());
        assert!(parse_interrupts(" 0: 1 2\n").is_err());
        assert!(parse_interrupts("CPU0\n : 1\n").is_err());
    }

    #[test]
    fn lookups() {
        let text = "   CPU0  CPU1  CPU3\n 9: 1 2 3 IO-APIC 9-fasteoi acpi\nNMI: 0 0 0 NMIs\n";
        let irqs = parse_interrupts(text).unwrap_or_default();
        assert_eq!(irqs.cpus, vec![0, 1, 3]);
        assert_eq!(irqs.column(3), Some(2));
        assert_eq!(irqs.column(2), None);
        assert_eq!(
            irqs.line("9").map(|l| l.counts.clone()),
            Some(vec![1, 2, 3])
        );
        assert_eq!(irqs.line("NMI").map(|l| l.name.as_str()), Some("NMIs"));
        assert!(irqs.line("10").is_none());
        // By position when the line is there, by id when lines moved or are gone.
        assert_eq!(irqs.line_near(0, "9").map(|l| l.id.as_str()), Some("9"));
        assert_eq!(irqs.line_near(0, "NMI").map(|l| l.id.as_str()), Some("NMI"));
        assert_eq!(irqs.line_near(7, "9").map(|l| l.id.as_str()), Some("9"));
        assert!(irqs.line_near(1, "10").is_none());
    }

    /// Parses `texts` in turn with one parser into two recycled results (as the
    /// analysis recycles the sample before last) and checks each against a fresh parse.
    fn parse_in_turn(texts: &[&str]) {
        let mut parser = InterruptsParser::default();
        let mut outs = [Interrupts::default(), Interrupts::default()];
        for (i, text) in texts.iter().enumerate() {
            let out = &mut outs[i % 2];
            let cached = parser.parse_into(text, out).map(|()| out.clone());
            match parse_interrupts(text) {
                Ok(fresh) => assert_eq!(cached.ok(), Some(fresh), "text {i}: {text:?}"),
                Err(e) => assert_eq!(
                    cached.err().map(|e| e.to_string()),
                    Some(e.to_string()),
                    "text {i}"
                ),
            }
        }
    }

    const STEADY: &str = "           CPU0       CPU1
  0:         44          0   IO-APIC   2-edge      timer
 24:       1000       2000  PCI-MSIX-0000:00:03.0   0-edge      virtio0-input.0
LOC:        367        390   Local timer interrupts
ERR:          0
";

    #[test]
    fn a_cached_layout_follows_the_counts() {
        let later = STEADY
            .replace("1000       2000", "1500       2900")
            .replace("ERR:          0", "ERR:          7");
        parse_in_turn(&[STEADY, &later, STEADY, &later]);
    }

    #[test]
    fn a_cached_layout_is_reparsed_when_lines_change() {
        // The kernel adds an IRQ line (a device's queue came up) before others.
        let added = STEADY.replace(
            "LOC:",
            " 25:          1          0  PCI-MSIX-0000:00:03.0   1-edge      virtio0-output.0\nLOC:",
        );
        // A handler is renamed on the same line (the device was renamed).
        let renamed = STEADY.replace("virtio0-input.0", "eth1-rx-0");
        // A handler is freed: the line stays with no action name.
        let freed = STEADY.replace("virtio0-input.0", "");
        // A line goes away.
        let removed = STEADY.replace("LOC:        367        390   Local timer interrupts\n", "");
        // A total line cut short and then a per-CPU line with the same id.
        let per_cpu_err = STEADY.replace("ERR:          0", "ERR:          0          3");
        parse_in_turn(&[
            STEADY,
            &added,
            &added,
            STEADY,
            &renamed,
            &freed,
            &removed,
            STEADY,
            &per_cpu_err,
            STEADY,
        ]);
    }

    #[test]
    fn a_cached_layout_is_reparsed_when_the_header_changes() {
        // A CPU came online: a third column in the header and on every line.
        let three = "           CPU0       CPU1       CPU2
  0:         44          0          0   IO-APIC   2-edge      timer
 24:       1000       2000          5  PCI-MSIX-0000:00:03.0   0-edge      virtio0-input.0
LOC:        367        390         12   Local timer interrupts
ERR:          0
";
        // The header alone changes: the same text after the counts now has one count
        // fewer than CPUs, which must not be taken from the cache.
        let header_only = STEADY.replace("CPU1", "CPU2");
        parse_in_turn(&[STEADY, three, STEADY, &header_only, STEADY]);
    }

    #[test]
    fn a_bad_text_between_good_ones_leaves_the_parser_usable() {
        let bad_header = STEADY.replace("CPU1", "CPUx");
        let bad_count = STEADY.replace("1000", "99999999999999999999999");
        parse_in_turn(&[STEADY, &bad_header, STEADY, &bad_count, STEADY, "", STEADY]);
    }
}
