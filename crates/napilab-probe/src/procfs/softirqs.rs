//! `/proc/softirqs`: how often each softirq vector ran on each CPU.
//!
//! ```text
//!                     CPU0       CPU1
//!           HI:          0          0
//!       NET_RX:       7339      10188
//! ```
//!
//! A count is the number of times the vector was *raised and run*, not the work done:
//! one NET_RX run may poll many NAPI instances and packets.

use std::path::Path;

use serde::{Deserialize, Serialize};

use super::{content_lines, next_token, parse_cpu_header, parse_dec, read_text, ProcError};

const FILE: &str = "/proc/softirqs";

/// A parsed `/proc/softirqs`.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Softirqs {
    /// CPU numbers of the columns (online CPUs only).
    pub cpus: Vec<u32>,
    /// `("NET_RX", counts)` in file order. Counts are aligned with `cpus`; a line cut
    /// short has fewer of them (the missing CPUs are unknown, not zero).
    pub vectors: Vec<(String, Vec<u64>)>,
}

impl Softirqs {
    /// Per-CPU counts of the vector `name` (`"NET_RX"`).
    pub fn vector(&self, name: &str) -> Option<&[u64]> {
        self.vectors
            .iter()
            .find(|(n, _)| n == name)
            .map(|(_, counts)| counts.as_slice())
    }

    /// Count of the vector `name` on `cpu`; `None` if either is absent.
    pub fn count(&self, name: &str, cpu: u32) -> Option<u64> {
        let column = self.cpus.iter().position(|&c| c == cpu)?;
        self.vector(name)?.get(column).copied()
    }
}

/// Parses the text of `/proc/softirqs`.
pub fn parse_softirqs(text: &str) -> Result<Softirqs, ProcError> {
    let mut lines = content_lines(text);
    let Some((header_no, header)) = lines.next() else {
        return Err(ProcError::parse(
            FILE,
            1,
            "expected a header of CPU<n> columns, found an empty file",
        ));
    };
    let cpus = parse_cpu_header(FILE, header_no, header)?;
    let mut vectors = Vec::with_capacity(10);
    for (no, line) in lines {
        let Some((name, mut rest)) = line.split_once(':') else {
            return Err(ProcError::unexpected(
                FILE,
                no,
                "'<VECTOR>:' followed by counts",
                line.trim(),
            ));
        };
        let name = name.trim();
        if name.is_empty() || name.contains(char::is_whitespace) {
            return Err(ProcError::unexpected(
                FILE,
                no,
                "a softirq vector name before ':'",
                name,
            ));
        }
        let mut counts = Vec::with_capacity(cpus.len());
        while counts.len() < cpus.len() {
            let Some((tok, after)) = next_token(rest) else {
                break;
            };
            counts.push(
                parse_dec(tok).ok_or_else(|| ProcError::unexpected(FILE, no, "a count", tok))?,
            );
            rest = after;
        }
        vectors.push((name.to_owned(), counts));
    }
    Ok(Softirqs { cpus, vectors })
}

/// Reads and parses `<root>/proc/softirqs`.
pub fn read_softirqs(root: &Path) -> Result<Softirqs, ProcError> {
    parse_softirqs(&read_text(root, "proc/softirqs")?)
}

#[cfg(test)]
mod tests {
    use super::*;

    const TWO: &str = "                    CPU0       CPU1       \n\
                  HI:          0          0\n\
              NET_RX:       7339      10188\n";

    #[test]
    fn counts_by_name_and_cpu() {
        let s = parse_softirqs(TWO).expect("parses");
        assert_eq!(s.cpus, vec![0, 1]);
        assert_eq!(s.vector("NET_RX"), Some(&[7339u64, 10188][..]));
        assert_eq!(s.count("NET_RX", 1), Some(10188));
        assert_eq!(s.count("NET_RX", 2), None);
        assert_eq!(s.count("NET_TX", 0), None);
    }

    #[test]
    fn short_and_long_lines() {
        let s = parse_softirqs("CPU0 CPU1\nNET_RX: 5\nNET_TX: 1 2 3 junk\n").expect("parses");
        assert_eq!(s.vector("NET_RX"), Some(&[5u64][..]));
        assert_eq!(s.count("NET_RX", 1), None);
        assert_eq!(s.vector("NET_TX"), Some(&[1u64, 2][..]));
    }

    #[test]
    fn errors_name_the_line() {
        let e = parse_softirqs("CPU0\nNET_RX: x\n")
            .err()
            .map(|e| e.to_string());
        assert_eq!(
            e.as_deref(),
            Some("/proc/softirqs line 2: expected a count, found 'x'")
        );
        let e = parse_softirqs("CPU0\n\nNET_RX 1\n")
            .err()
            .map(|e| e.to_string());
        assert_eq!(
            e.as_deref(),
            Some(
                "/proc/softirqs line 3: expected '<VECTOR>:' followed by counts, found 'NET_RX 1'"
            )
        );
        assert!(parse_softirqs("\n\n").is_err());
    }
}
