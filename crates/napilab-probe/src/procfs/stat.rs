//! `/proc/stat`: CPU time per state, and system-wide interrupt and softirq totals.
//!
//! The time columns grew with the kernel: 4 (user nice system idle, 2.4), 7 (+iowait
//! irq softirq, 2.6.0), 8 (+steal, 2.6.11), 9 (+guest, 2.6.24), 10 (+guest_nice,
//! 2.6.33). Units are USER_HZ ticks. How these are sampled (tick-based unless
//! `CONFIG_IRQ_TIME_ACCOUNTING`) matters more than the numbers; see docs/kernel.md#cpu-accounting.

use std::path::Path;

use serde::{Deserialize, Serialize};

use super::{content_lines, next_token, parse_dec, parse_dec_u32, read_text, ProcError};

const FILE: &str = "/proc/stat";

/// Time one CPU (or all of them) spent in each state, in USER_HZ ticks.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct CpuTimes {
    pub user: u64,
    pub nice: u64,
    pub system: u64,
    pub idle: u64,
    pub iowait: u64,
    pub irq: u64,
    pub softirq: u64,
    pub steal: u64,
    /// Already included in `user`.
    pub guest: u64,
    /// Already included in `nice`.
    pub guest_nice: u64,
    /// How many of the ten columns the kernel printed; the others are 0 because they
    /// were not there, not because no time was spent.
    pub columns: u8,
}

impl CpuTimes {
    /// All time, user through steal. Guest time is not added: the kernel already counts
    /// it in `user` and `nice`.
    pub fn total(&self) -> u64 {
        [
            self.user,
            self.nice,
            self.system,
            self.idle,
            self.iowait,
            self.irq,
            self.softirq,
            self.steal,
        ]
        .iter()
        .fold(0u64, |acc, v| acc.saturating_add(*v))
    }
}

/// The parts of `/proc/stat` napilab uses.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct ProcStat {
    /// The aggregate `cpu` line.
    pub total: Option<CpuTimes>,
    /// `cpuN` lines in file order; offline CPUs have none.
    pub cpus: Vec<(u32, CpuTimes)>,
    /// First value of `intr`: hard interrupts since boot, all CPUs.
    pub intr_total: Option<u64>,
    /// Context switches since boot.
    pub ctxt: Option<u64>,
    /// First value of `softirq`: softirqs since boot, all CPUs and vectors.
    pub softirq_total: Option<u64>,
    /// Boot time, seconds since the epoch.
    pub btime: Option<u64>,
}

impl ProcStat {
    /// Times of `cpu`, if it has a line.
    pub fn cpu(&self, cpu: u32) -> Option<&CpuTimes> {
        self.cpus.iter().find(|(c, _)| *c == cpu).map(|(_, t)| t)
    }
}

/// Parses the text of `/proc/stat`. Lines other than `cpu*`, `intr`, `ctxt`, `btime`
/// and `softirq` are ignored, so new kernel lines do not break it.
pub fn parse_stat(text: &str) -> Result<ProcStat, ProcError> {
    let mut stat = ProcStat::default();
    for (no, line) in content_lines(text) {
        let Some((key, rest)) = next_token(line) else {
            continue;
        };
        match key {
            "cpu" => stat.total = Some(parse_times(no, rest)?),
            "intr" => stat.intr_total = first_value(no, rest)?,
            "ctxt" => stat.ctxt = first_value(no, rest)?,
            "softirq" => stat.softirq_total = first_value(no, rest)?,
            "btime" => stat.btime = first_value(no, rest)?,
            _ => {
                if let Some(n) = key.strip_prefix("cpu") {
                    let cpu = parse_dec_u32(n)
                        .ok_or_else(|| ProcError::unexpected(FILE, no, "cpu<n>", key))?;
                    stat.cpus.push((cpu, parse_times(no, rest)?));
                }
            }
        }
    }
    Ok(stat)
}

/// Reads and parses `<root>/proc/stat`.
pub fn read_stat(root: &Path) -> Result<ProcStat, ProcError> {
    parse_stat(&read_text(root, "proc/stat")?)
}

/// A key with no value (a cut line) gives `None`; a value that is not a number is an
/// error, because then we no longer know what the line means.
fn first_value(no: usize, rest: &str) -> Result<Option<u64>, ProcError> {
    match next_token(rest) {
        None => Ok(None),
        Some((tok, _)) => parse_dec(tok)
            .map(Some)
            .ok_or_else(|| ProcError::unexpected(FILE, no, "a count", tok)),
    }
}

fn parse_times(no: usize, rest: &str) -> Result<CpuTimes, ProcError> {
    let mut values = [0u64; 10];
    let mut columns = 0u8;
    for (slot, tok) in values.iter_mut().zip(rest.split_whitespace()) {
        *slot =
            parse_dec(tok).ok_or_else(|| ProcError::unexpected(FILE, no, "a tick count", tok))?;
        columns += 1;
    }
    let [user, nice, system, idle, iowait, irq, softirq, steal, guest, guest_nice] = values;
    Ok(CpuTimes {
        user,
        nice,
        system,
        idle,
        iowait,
        irq,
        softirq,
        steal,
        guest,
        guest_nice,
        columns,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn current_layout() {
        let s = parse_stat(
            "cpu  13853 0 4099 103135 1865 0 221 105 0 0\n\
             cpu0 6434 0 1573 53292 209 0 104 54 0 0\n\
             cpu1 7419 0 2526 49842 1656 0 116 50 7 1 99 99\n\
             intr 303521 0 0 5\n\
             ctxt 617867\n\
             btime 1795319099\n\
             processes 6547\n\
             softirq 212385 0 16102\n",
        )
        .expect("parses");
        let total = s.total.expect("cpu line");
        assert_eq!(total.columns, 10);
        assert_eq!(total.total(), 13853 + 4099 + 103135 + 1865 + 221 + 105);
        assert_eq!(s.cpus.len(), 2);
        let cpu1 = s.cpu(1).expect("cpu1");
        assert_eq!((cpu1.guest, cpu1.guest_nice, cpu1.columns), (7, 1, 10));
        assert_eq!(s.intr_total, Some(303521));
        assert_eq!(s.ctxt, Some(617867));
        assert_eq!(s.btime, Some(1795319099));
        assert_eq!(s.softirq_total, Some(212385));
        assert!(s.cpu(2).is_none());
    }

    #[test]
    fn old_and_cut_layouts() {
        let s = parse_stat("cpu 1 2 3 4\ncpu0 1 2 3 4\nintr\n").expect("parses");
        let t = s.total.expect("cpu line");
        assert_eq!((t.columns, t.idle, t.iowait, t.total()), (4, 4, 0, 10));
        assert_eq!(s.intr_total, None);
        assert_eq!(s.ctxt, None);
        let s = parse_stat("cpu3\n").expect("parses");
        assert_eq!(s.cpu(3).map(|t| t.columns), Some(0));
    }

    #[test]
    fn totals_saturate() {
        let t = CpuTimes {
            user: u64::MAX,
            idle: 5,
            ..CpuTimes::default()
        };
        assert_eq!(t.total(), u64::MAX);
    }

    #[test]
    fn errors() {
        let e = parse_stat("cpu 1 2\ncpu0 1 x\n")
            .err()
            .map(|e| e.to_string());
        assert_eq!(
            e.as_deref(),
            Some("/proc/stat line 2: expected a tick count, found 'x'")
        );
        let e = parse_stat("cpuX 1 2\n").err().map(|e| e.to_string());
        assert_eq!(
            e.as_deref(),
            Some("/proc/stat line 1: expected cpu<n>, found 'cpuX'")
        );
        assert!(parse_stat("ctxt -1\n").is_err());
        assert_eq!(parse_stat("").ok(), Some(ProcStat::default()));
    }
}
