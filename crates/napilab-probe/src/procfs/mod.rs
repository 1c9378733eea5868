//! Parsers for /proc text files.
//!
//! Each parser takes the file's text and never does I/O, so a recorded sample can be
//! re-parsed and fuzzed; each module also has a `read_*` function that reads the file
//! under a root directory (the host's `/` or a fixture tree). Parsers never panic, on any
//! input: kernels vary, and a probe that aborts on an odd line is worse than no probe.
//!
//! Leniency rules, shared by all parsers: blank lines are skipped, CRLF endings are
//! accepted, columns beyond the ones we know are ignored, and columns a kernel does not
//! print read as `None` (or are absent from a per-CPU vector). A token that should be a
//! number and is not is a [`ProcError::Parse`] naming file, line and token.

mod cpulist;
mod error;
mod interrupts;
mod softirqs;
mod softnet;
mod stat;
mod task;

use std::path::Path;

pub use cpulist::{parse_cpu_list, parse_cpu_mask, MAX_CPUS};
pub use error::ProcError;
pub use interrupts::{
    parse_interrupts, read_interrupts, InterruptLine, Interrupts, InterruptsParser,
};
pub use softirqs::{parse_softirqs, read_softirqs, Softirqs};
pub use softnet::{parse_softnet, read_softnet, SoftnetRow};
pub use stat::{parse_stat, read_stat, CpuTimes, ProcStat};
pub use task::{
    list_packet_threads, parse_schedstat, parse_status_cpus_allowed, parse_task_stat, policy_name,
    read_task_cpus_allowed, read_task_stat, KernelThread, PacketThreadScan, Schedstat, TaskStat,
};

/// Reads `root.join(rel)` (`rel` like `"proc/interrupts"`) as text.
///
/// A file that does not exist is [`ProcError::Missing`]. Bytes that are not UTF-8 (a
/// task's `comm` may hold any byte) become U+FFFD rather than an error, so one odd
/// process name cannot hide a whole file.
pub fn read_text(root: &Path, rel: &str) -> Result<String, ProcError> {
    let path = root.join(rel);
    match std::fs::read(&path) {
        Ok(bytes) => Ok(String::from_utf8(bytes)
            .unwrap_or_else(|e| String::from_utf8_lossy(e.as_bytes()).into_owned())),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Err(ProcError::Missing { path }),
        Err(source) => Err(ProcError::Io { path, source }),
    }
}

/// Files kept open between samples: a /proc or /sys file is generated anew by every
/// read from offset 0, so reopening it each second only costs the path walk, the open
/// and the close (a quarter of a sample's CPU when profiled). A kept `/proc/<pid>/stat`
/// also keeps naming the task it was opened for: after that task exits, reads fail
/// instead of showing a new process that reused the pid.
#[derive(Debug, Default)]
pub struct KeptFiles {
    files: std::collections::HashMap<std::path::PathBuf, std::fs::File>,
}

impl KeptFiles {
    /// Like [`read_text`], through a file kept open (opened on first use; a failed read
    /// closes it, so the next read reopens it).
    pub fn read_text(&mut self, root: &Path, rel: &str) -> Result<String, ProcError> {
        let mut text = String::new();
        self.read_into(root, rel, &mut text)?;
        Ok(text)
    }

    /// [`KeptFiles::read_text`] into `text`, reusing its allocation: a sampler that
    /// refills last sample's strings allocates nothing in the steady state (and glibc
    /// then has no reason to consolidate its free lists, which a fresh multi-KiB string
    /// per file and sample made it do, 4% of `observe`'s CPU when profiled). On error
    /// `text` is left empty.
    pub fn read_into(
        &mut self,
        root: &Path,
        rel: &str,
        text: &mut String,
    ) -> Result<(), ProcError> {
        let mut bytes = std::mem::take(text).into_bytes();
        bytes.clear();
        let read = self.read_bytes(root, rel, &mut bytes);
        if read.is_err() {
            bytes.clear();
        }
        *text = String::from_utf8(bytes)
            .unwrap_or_else(|e| String::from_utf8_lossy(e.as_bytes()).into_owned());
        read
    }

    /// Reads the whole file into `bytes` (empty on entry), straight into its spare
    /// capacity, which is neither zeroed nor copied: last sample's capacity usually
    /// holds this one's text, so one pread fills it and a second returns 0 (a short
    /// read is not the end of a seq_file, so the loop reads until 0).
    fn read_bytes(&mut self, root: &Path, rel: &str, bytes: &mut Vec<u8>) -> Result<(), ProcError> {
        use std::collections::hash_map::Entry;
        /// The smallest read: a fresh buffer starts here and grows by doubling.
        const MIN_READ: usize = 4096;
        /// Bounded: a file that keeps growing is cut at 64 MiB rather than read forever.
        const LIMIT: usize = 64 << 20;
        let path = root.join(rel);
        let file = match self.files.entry(path.clone()) {
            Entry::Occupied(e) => e.into_mut(),
            Entry::Vacant(e) => match std::fs::File::open(&path) {
                Ok(f) => e.insert(f),
                Err(err) if err.kind() == std::io::ErrorKind::NotFound => {
                    return Err(ProcError::Missing { path })
                }
                Err(source) => return Err(ProcError::Io { path, source }),
            },
        };
        while bytes.len() < LIMIT {
            if bytes.capacity() == bytes.len() {
                bytes.reserve(MIN_READ);
            }
            let offset = bytes.len() as u64;
            match rustix::io::pread(&*file, rustix::buffer::spare_capacity(bytes), offset) {
                Ok(0) => break,
                Ok(_) => {}
                Err(rustix::io::Errno::INTR) => {}
                Err(errno) => {
                    self.files.remove(&path);
                    return Err(if errno == rustix::io::Errno::SRCH {
                        ProcError::Missing { path }
                    } else {
                        ProcError::Io {
                            path,
                            source: errno.into(),
                        }
                    });
                }
            }
        }
        bytes.truncate(LIMIT);
        Ok(())
    }

    /// Closes the files of paths `keep` rejects (e.g. threads no longer listed).
    pub fn retain(&mut self, mut keep: impl FnMut(&Path) -> bool) {
        self.files.retain(|p, _| keep(p));
    }
}

/// Lines that carry text, with their 1-based line numbers for error messages.
fn content_lines(text: &str) -> impl Iterator<Item = (usize, &str)> {
    text.lines()
        .enumerate()
        .filter(|(_, l)| !l.trim().is_empty())
        .map(|(i, l)| (i + 1, l))
}

/// Splits off the first whitespace-separated token, returning it and what follows it
/// (with its leading whitespace). Keeping the remainder as a slice lets callers take
/// "the rest of the line" verbatim, as /proc/interrupts action names need.
fn next_token(s: &str) -> Option<(&str, &str)> {
    let s = s.trim_start();
    if s.is_empty() {
        return None;
    }
    let end = s.find(char::is_whitespace).unwrap_or(s.len());
    Some(s.split_at(end))
}

fn is_decimal(s: &str) -> bool {
    !s.is_empty() && s.bytes().all(|b| b.is_ascii_digit())
}

/// Strict unsigned decimal: digits only (`str::parse` would also take a leading `+`).
fn parse_dec(s: &str) -> Option<u64> {
    if !is_decimal(s) {
        return None;
    }
    s.bytes().try_fold(0u64, |acc, b| {
        acc.checked_mul(10)?.checked_add(u64::from(b - b'0'))
    })
}

fn parse_dec_u32(s: &str) -> Option<u32> {
    parse_dec(s).and_then(|v| u32::try_from(v).ok())
}

/// Signed decimal with an optional leading `-` (task priority and nice).
fn parse_signed(s: &str) -> Option<i64> {
    match s.strip_prefix('-') {
        Some(digits) => {
            let v = parse_dec(digits)?;
            // -(i64::MAX + 1) is representable; checked for the one value that is.
            0i64.checked_sub_unsigned(v)
        }
        None => parse_dec(s).and_then(|v| i64::try_from(v).ok()),
    }
}

/// Strict hexadecimal without a `0x` prefix, as the kernel's `%08x` prints it.
fn parse_hex(s: &str) -> Option<u64> {
    if s.is_empty() {
        return None;
    }
    s.chars().try_fold(0u64, |acc, c| {
        let digit = c.to_digit(16)?;
        acc.checked_mul(16)?.checked_add(u64::from(digit))
    })
}

/// Parses a `CPU0 CPU1 CPU3` header (/proc/interrupts, /proc/softirqs). Only online CPUs
/// have a column, so the numbers need not be contiguous.
fn parse_cpu_header(file: &str, line_no: usize, line: &str) -> Result<Vec<u32>, ProcError> {
    line.split_whitespace()
        .map(|tok| {
            tok.strip_prefix("CPU")
                .and_then(parse_dec_u32)
                .ok_or_else(|| ProcError::unexpected(file, line_no, "a CPU<n> column header", tok))
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn numbers_are_strict() {
        assert_eq!(parse_dec("0012"), Some(12));
        assert_eq!(parse_dec("+12"), None);
        assert_eq!(parse_dec(""), None);
        assert_eq!(parse_dec("18446744073709551615"), Some(u64::MAX));
        assert_eq!(parse_dec("18446744073709551616"), None);
        assert_eq!(parse_signed("-100"), Some(-100));
        assert_eq!(parse_signed("-9223372036854775808"), Some(i64::MIN));
        assert_eq!(parse_signed("-9223372036854775809"), None);
        assert_eq!(parse_signed("9223372036854775808"), None);
        assert_eq!(parse_signed("-"), None);
        assert_eq!(parse_signed("--1"), None);
        assert_eq!(parse_hex("0000ffFF"), Some(0xffff));
        assert_eq!(parse_hex("0x10"), None);
        assert_eq!(parse_hex("ffffffffffffffff"), Some(u64::MAX));
        assert_eq!(parse_hex("1ffffffffffffffff"), None);
        assert_eq!(parse_hex("+1"), None);
    }

    #[test]
    fn tokens_keep_the_remainder() {
        assert_eq!(next_token("  a  b c"), Some(("a", "  b c")));
        assert_eq!(next_token("a"), Some(("a", "")));
        assert_eq!(next_token("   "), None);
        // Multi-byte whitespace must not split a character.
        assert_eq!(next_token("é\u{3000}x"), Some(("é", "\u{3000}x")));
    }

    #[test]
    fn cpu_header() {
        assert_eq!(
            parse_cpu_header("f", 1, "   CPU0  CPU1 CPU3   ").ok(),
            Some(vec![0, 1, 3])
        );
        let e = parse_cpu_header("f", 1, "CPU0 cpu1")
            .err()
            .map(|e| e.to_string());
        assert_eq!(
            e.as_deref(),
            Some("f line 1: expected a CPU<n> column header, found 'cpu1'")
        );
    }

    #[test]
    fn read_text_missing_and_present() {
        let dir = std::env::temp_dir().join(format!("napilab-procfs-{}", std::process::id()));
        let _ = std::fs::create_dir_all(dir.join("proc"));
        assert!(std::fs::write(dir.join("proc/x"), b"a\xffb").is_ok());
        assert_eq!(
            read_text(&dir, "proc/x").ok().as_deref(),
            Some("a\u{fffd}b")
        );
        assert!(matches!(
            read_text(&dir, "proc/none"),
            Err(ProcError::Missing { path }) if path == dir.join("proc/none")
        ));
        let _ = std::fs::remove_dir_all(&dir);
    }
}

#[cfg(test)]
mod kept_files_tests {
    use super::*;

    /// A fresh `<tmp>/<name>-<pid>/proc` tree for one test; the test removes it.
    fn proc_tree(name: &str) -> std::path::PathBuf {
        let dir = std::env::temp_dir().join(format!("{name}-{}", std::process::id()));
        let _ = std::fs::create_dir_all(dir.join("proc"));
        dir
    }

    #[test]
    fn a_kept_file_is_read_anew_each_time() {
        let dir = proc_tree("napilab-kept");
        let path = dir.join("proc/stat");
        let mut files = KeptFiles::default();
        std::fs::write(&path, "cpu  1 2 3\n").ok();
        assert_eq!(
            files.read_text(&dir, "proc/stat").ok().as_deref(),
            Some("cpu  1 2 3\n")
        );
        // Rewritten in place (same inode, as /proc files are regenerated): the kept fd
        // sees the new text from offset 0, shorter or longer.
        std::fs::write(&path, "cpu  4\n").ok();
        assert_eq!(
            files.read_text(&dir, "proc/stat").ok().as_deref(),
            Some("cpu  4\n")
        );
        assert!(matches!(
            files.read_text(&dir, "proc/missing"),
            Err(ProcError::Missing { .. })
        ));
        files.retain(|_| false);
        let _ = std::fs::remove_dir_all(&dir);
    }

    #[test]
    fn read_into_reuses_the_string_whatever_the_length() {
        let dir = proc_tree("napilab-kept-into");
        let path = dir.join("proc/interrupts");
        let mut files = KeptFiles::default();
        let mut text = String::from("stale text of an earlier sample");
        // Longer than the first read (4 KiB) and than the string's capacity: read whole.
        let long: String = (0..2000).map(|i| format!("{i:>5}:\n")).collect();
        std::fs::write(&path, &long).ok();
        assert!(files.read_into(&dir, "proc/interrupts", &mut text).is_ok());
        assert_eq!(text, long);
        let capacity = text.capacity();
        // Shorter: nothing of the longer text is left, and the allocation is kept.
        std::fs::write(&path, "short\n").ok();
        assert!(files.read_into(&dir, "proc/interrupts", &mut text).is_ok());
        assert_eq!(text, "short\n");
        assert_eq!(text.capacity(), capacity);
        // Not UTF-8: replaced, not refused.
        std::fs::write(&path, b"a\xffb").ok();
        assert!(files.read_into(&dir, "proc/interrupts", &mut text).is_ok());
        assert_eq!(text, "a\u{fffd}b");
        // Missing: an error and an empty string, never the previous text.
        assert!(matches!(
            files.read_into(&dir, "proc/missing", &mut text),
            Err(ProcError::Missing { .. })
        ));
        assert_eq!(text, "");
        files.retain(|_| false);
        let _ = std::fs::remove_dir_all(&dir);
    }
}
