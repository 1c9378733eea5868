//! What every BPF loader of napilab shares: the tiers of this crate (`always_on`,
//! `packets`, `floor`, `stages`) and the lab's line-rate generator
//! (`napilab_lab::linerate`). The skeleton module that libbpf-cargo generates, how a
//! load error is classified, what a loaded program cost, and the decoding of map
//! values (native-endian words and NUL-terminated names).

use std::fmt;
use std::os::fd::{AsFd as _, AsRawFd as _};

/// Where the kernel publishes its own BTF; CO-RE needs it to relocate field accesses.
pub const VMLINUX_BTF: &str = "/sys/kernel/btf/vmlinux";

/// Why the tracing tier could not start; the message names what is missing.
#[derive(Debug)]
pub enum StartError {
    /// No kernel BTF: CO-RE relocations cannot be resolved.
    NoBtf,
    /// The kernel refused to load BPF programs (needs root or CAP_BPF + CAP_PERFMON).
    NoPrivilege(String),
    /// Any other load failure, with libbpf's message.
    Load(String),
}

impl fmt::Display for StartError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            StartError::NoBtf => write!(
                f,
                "{VMLINUX_BTF} is missing: the BPF programs are CO-RE and need the kernel's BTF (CONFIG_DEBUG_INFO_BTF=y)"
            ),
            StartError::NoPrivilege(e) => write!(
                f,
                "the kernel refused to load BPF programs ({e}): run as root, or grant CAP_BPF and CAP_PERFMON"
            ),
            StartError::Load(e) => write!(f, "cannot load the BPF programs: {e}"),
        }
    }
}

impl std::error::Error for StartError {}

/// Declares `mod skel` with the skeleton libbpf-cargo generated for `$name.bpf.c`
/// (`$OUT_DIR/$name.skel.rs`, written by the calling crate's build.rs through
/// `bpf_build.rs`). Generated code, so not ours to lint.
#[macro_export]
macro_rules! bpf_skeleton {
    ($name:literal) => {
        #[allow(
            clippy::all,
            clippy::pedantic,
            clippy::unwrap_used,
            unused_qualifications,
            unsafe_op_in_unsafe_fn
        )]
        mod skel {
            include!(concat!(env!("OUT_DIR"), "/", $name, ".skel.rs"));
        }
    };
}

/// How one hook of a tier is attached: its BTF-typed program (`tp_btf`), its
/// `raw_tp` twin, or neither.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Attach {
    Btf,
    Raw,
    Off,
}

impl Attach {
    /// What a plan attaches, for messages: `tp_btf`, `raw_tp` or `tp_btf+raw_tp`.
    pub(crate) fn kind(plan: &[Attach]) -> &'static str {
        match (plan.contains(&Attach::Btf), plan.contains(&Attach::Raw)) {
            (false, _) => "raw_tp",
            (true, true) => "tp_btf+raw_tp",
            (true, false) => "tp_btf",
        }
    }
}

/// A libbpf load error as a [`StartError`]: a refusal for lack of privilege says so.
pub fn load_error(e: libbpf_rs::Error) -> StartError {
    let text = e.to_string();
    if matches!(e.kind(), libbpf_rs::ErrorKind::PermissionDenied)
        || text.contains("EPERM")
        || text.contains("Operation not permitted")
    {
        StartError::NoPrivilege(text)
    } else {
        StartError::Load(text)
    }
}

/// Per loaded program of `object`: (name, runs, total run time in ns), from the
/// program's fdinfo. The kernel counts run time only while BPF statistics are enabled
/// (`sysctl kernel.bpf_stats_enabled=1`, or
/// `always_on::enable_run_time_stats`).
pub fn program_costs(object: &libbpf_rs::Object) -> Vec<(String, u64, u64)> {
    let mut out = Vec::new();
    for prog in object.progs() {
        if !prog.autoload() {
            continue;
        }
        let fd = prog.as_fd().as_raw_fd();
        let Ok(info) = std::fs::read_to_string(format!("/proc/self/fdinfo/{fd}")) else {
            continue;
        };
        let field = |name: &str| {
            info.lines()
                .find_map(|l| l.strip_prefix(name))
                .and_then(|v| v.trim().parse::<u64>().ok())
                .unwrap_or(0)
        };
        out.push((
            prog.name().to_string_lossy().into_owned(),
            field("run_cnt:"),
            field("run_time_ns:"),
        ));
    }
    out
}

/// The first `n` native-endian u64 words of a map key or value; None when it is shorter.
pub fn words64(bytes: &[u8], n: usize) -> Option<Vec<u64>> {
    let bytes = bytes.get(..n * 8)?;
    Some(
        bytes
            .chunks_exact(8)
            .map(|c| u64::from_ne_bytes(c.try_into().unwrap_or([0; 8])))
            .collect(),
    )
}

/// The first `n` native-endian u32 words of a map key or value; None when it is shorter.
pub fn words32(bytes: &[u8], n: usize) -> Option<Vec<u32>> {
    let bytes = bytes.get(..n * 4)?;
    Some(
        bytes
            .chunks_exact(4)
            .map(|c| u32::from_ne_bytes(c.try_into().unwrap_or([0; 4])))
            .collect(),
    )
}

/// A NUL-terminated name (e.g. a `char comm[16]`), lossily decoded.
pub fn c_string(bytes: &[u8]) -> String {
    let end = bytes.iter().position(|b| *b == 0).unwrap_or(bytes.len());
    String::from_utf8_lossy(&bytes[..end]).into_owned()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn words_and_names_decode() {
        let mut bytes = Vec::new();
        bytes.extend_from_slice(&7u64.to_ne_bytes());
        bytes.extend_from_slice(&9u64.to_ne_bytes());
        assert_eq!(words64(&bytes, 2), Some(vec![7, 9]));
        assert_eq!(words64(&bytes, 3), None);
        let pair: Vec<u8> = [3u32, 4].iter().flat_map(|w| w.to_ne_bytes()).collect();
        assert_eq!(words32(&pair, 2), Some(vec![3, 4]));
        assert_eq!(c_string(b"veth0\0junk"), "veth0");
        assert_eq!(c_string(b"full"), "full");
    }
}
