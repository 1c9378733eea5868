//! `/proc/net/softnet_stat`: per-CPU counters of the receive path (`softnet_data`).
//!
//! One row per online CPU, every column `%08x` (so 32-bit counters that wrap). Columns,
//! 0-based, as printed by `softnet_seq_show()` in net/core/net-procfs.c (net/core/dev.c
//! before 3.x):
//!
//! | col | meaning                                   | printed since                 |
//! |-----|-------------------------------------------|-------------------------------|
//! | 0   | processed (packets taken off the backlog/NAPI) | always                   |
//! | 1   | dropped (backlog full, `netdev_max_backlog`) | always                     |
//! | 2   | time_squeeze (net_rx_action out of budget or time) | always               |
//! | 3   | 0 (was throttle)                          | always                        |
//! | 4-7 | 0 (was fastroute)                         | always                        |
//! | 8   | cpu_collision; 0 since it was removed     | always                        |
//! | 9   | received_rps (RPS IPIs received)          | 2.6.35                        |
//! | 10  | flow_limit_count                          | 3.11 (commit 99bbc7074190)    |
//! | 11  | backlog length, input + process queue     | 5.10 (commit 7d58e6555870)    |
//! | 12  | CPU index owning the row                  | 5.10 (same commit)            |
//! | 13  | input_pkt_queue length                    | 6.4 (commit 59da2d7b0e99)     |
//! | 14  | process_queue length                      | 6.4 (same commit)             |
//!
//! So 9, 10, 11, 13 and 15 columns are the layouts seen; 6.18 still prints 15.
//! Distributions backport (RHEL 8.5's 4.18 has 13 columns), so the layout is read from
//! the column count, never from the kernel version.
//!
//! The kernel skips offline CPUs, which is why 5.10 added the CPU column: without it,
//! row `i` is the `i`-th online CPU, which the caller must supply.

use std::path::Path;

use serde::{Deserialize, Serialize};

use super::{content_lines, parse_hex, read_text, ProcError};

const FILE: &str = "/proc/net/softnet_stat";

/// Columns we know; any beyond are ignored.
const KNOWN_COLUMNS: usize = 15;
const COL_RECEIVED_RPS: usize = 9;
const COL_FLOW_LIMIT: usize = 10;
const COL_BACKLOG_LEN: usize = 11;
const COL_CPU: usize = 12;
const COL_INPUT_QLEN: usize = 13;
const COL_PROCESS_QLEN: usize = 14;

/// One row of `/proc/net/softnet_stat`. Counters are 32-bit in the kernel and wrap.
/// Optional fields are `None` when the kernel does not print the column.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct SoftnetRow {
    /// The CPU this row belongs to (see `cpu_from_column`).
    pub cpu: u32,
    pub processed: u64,
    pub dropped: u64,
    pub time_squeeze: u64,
    pub received_rps: Option<u64>,
    pub flow_limit_count: Option<u64>,
    /// Packets waiting in the backlog (input + process queue) at read time.
    pub backlog_len: Option<u64>,
    pub input_qlen: Option<u64>,
    pub process_qlen: Option<u64>,
    /// `cpu` was printed by the kernel (5.10+) rather than inferred from the row's
    /// position.
    pub cpu_from_column: bool,
}

/// Parses the text of `/proc/net/softnet_stat`.
///
/// Where the CPU column exists, it names the CPU. Otherwise row `i` belongs to
/// `online_cpus[i]` (older kernels skip offline CPUs), or to CPU `i` if `online_cpus`
/// has no `i`-th entry. A row cut short keeps the columns it has: the first three read
/// 0 when absent, the others `None`.
pub fn parse_softnet(text: &str, online_cpus: &[u32]) -> Result<Vec<SoftnetRow>, ProcError> {
    let mut rows = Vec::with_capacity(online_cpus.len());
    for (index, (no, line)) in content_lines(text).enumerate() {
        let mut values = [0u64; KNOWN_COLUMNS];
        let mut columns = 0;
        for (slot, tok) in values.iter_mut().zip(line.split_whitespace()) {
            *slot = parse_hex(tok)
                .ok_or_else(|| ProcError::unexpected(FILE, no, "a hex counter", tok))?;
            columns += 1;
        }
        let present = |col: usize| values.get(col).copied().filter(|_| col < columns);

        let from_column = match present(COL_CPU) {
            Some(v) => Some(u32::try_from(v).map_err(|_| {
                ProcError::parse(FILE, no, format!("expected a CPU index, found {v:#x}"))
            })?),
            None => None,
        };
        let cpu = from_column.unwrap_or_else(|| {
            online_cpus
                .get(index)
                .copied()
                .unwrap_or_else(|| u32::try_from(index).unwrap_or(u32::MAX))
        });
        rows.push(SoftnetRow {
            cpu,
            processed: present(0).unwrap_or(0),
            dropped: present(1).unwrap_or(0),
            time_squeeze: present(2).unwrap_or(0),
            received_rps: present(COL_RECEIVED_RPS),
            flow_limit_count: present(COL_FLOW_LIMIT),
            backlog_len: present(COL_BACKLOG_LEN),
            input_qlen: present(COL_INPUT_QLEN),
            process_qlen: present(COL_PROCESS_QLEN),
            cpu_from_column: from_column.is_some(),
        });
    }
    Ok(rows)
}

/// Reads and parses `<root>/proc/net/softnet_stat`. Stripped kernels (OpenWrt builds
/// without `CONFIG_PROC_FS` networking bits) lack it: that is [`ProcError::Missing`].
pub fn read_softnet(root: &Path, online_cpus: &[u32]) -> Result<Vec<SoftnetRow>, ProcError> {
    parse_softnet(&read_text(root, "proc/net/softnet_stat")?, online_cpus)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn row(cols: &[u64]) -> String {
        let mut s = cols
            .iter()
            .map(|c| format!("{c:08x}"))
            .collect::<Vec<_>>()
            .join(" ");
        s.push('\n');
        s
    }

    #[test]
    fn fifteen_columns() {
        let text = row(&[0x28, 1, 2, 0, 0, 0, 0, 0, 0, 9, 10, 11, 0, 13, 14])
            + &row(&[0x3a4b, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1, 0, 0]);
        let rows = parse_softnet(&text, &[]).expect("parses");
        assert_eq!(
            rows[0],
            SoftnetRow {
                cpu: 0,
                processed: 0x28,
                dropped: 1,
                time_squeeze: 2,
                received_rps: Some(9),
                flow_limit_count: Some(10),
                backlog_len: Some(11),
                input_qlen: Some(13),
                process_qlen: Some(14),
                cpu_from_column: true,
            }
        );
        assert_eq!((rows[1].cpu, rows[1].processed), (1, 0x3a4b));
    }

    #[test]
    fn cpu_column_beats_position() {
        let text = row(&[1; 13]) + &row(&[2; 13]);
        // Rows name CPUs 1 and 2 whatever online_cpus says.
        let rows = parse_softnet(&text, &[5, 6]).expect("parses");
        assert_eq!(rows.iter().map(|r| r.cpu).collect::<Vec<_>>(), vec![1, 2]);
        assert!(rows
            .iter()
            .all(|r| r.cpu_from_column && r.input_qlen.is_none()));
    }

    #[test]
    fn position_maps_to_online_cpus_then_index() {
        let text = row(&[7; 11]).repeat(3);
        let rows = parse_softnet(&text, &[0, 2]).expect("parses");
        assert_eq!(
            rows.iter().map(|r| r.cpu).collect::<Vec<_>>(),
            vec![0, 2, 2]
        );
        assert!(rows.iter().all(|r| !r.cpu_from_column));
        assert_eq!(rows[0].flow_limit_count, Some(7));
        assert_eq!(rows[0].backlog_len, None);
    }

    #[test]
    fn old_layouts() {
        let rows = parse_softnet(&row(&[3; 9]), &[4]).expect("parses");
        assert_eq!(rows[0].received_rps, None);
        assert_eq!((rows[0].cpu, rows[0].processed), (4, 3));
        let rows = parse_softnet(&row(&[3; 10]), &[]).expect("parses");
        assert_eq!(rows[0].received_rps, Some(3));
        assert_eq!(rows[0].flow_limit_count, None);
    }

    #[test]
    fn cut_rows_and_extra_columns() {
        let rows = parse_softnet("0000000a 0000000b\n", &[]).expect("parses");
        assert_eq!(
            (rows[0].processed, rows[0].dropped, rows[0].time_squeeze),
            (10, 11, 0)
        );
        let mut wide = row(&[1; 15]);
        wide.insert_str(wide.len() - 1, " 00000099 not-hex");
        let rows = parse_softnet(&wide, &[]).expect("extra columns are ignored");
        assert_eq!(rows[0].process_qlen, Some(1));
    }

    #[test]
    fn errors_name_the_line() {
        let text = format!("{}{}00000000 zz\n", row(&[0; 3]), row(&[0; 3]));
        let e = parse_softnet(&text, &[]).err().map(|e| e.to_string());
        assert_eq!(
            e.as_deref(),
            Some("/proc/net/softnet_stat line 3: expected a hex counter, found 'zz'")
        );
        let e = parse_softnet(&row(&[0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1 << 32]), &[])
            .err()
            .map(|e| e.to_string());
        assert_eq!(
            e.as_deref(),
            Some("/proc/net/softnet_stat line 1: expected a CPU index, found 0x100000000")
        );
    }
}
