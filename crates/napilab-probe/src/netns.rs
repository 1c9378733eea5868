//! Joining a named network namespace (`ip netns add <name>`, `/run/netns/<name>`) from
//! one thread: `setns(2)` with `CLONE_NEWNET` moves only the calling thread, and the
//! sockets it creates afterwards belong to that namespace. The one helper the examples
//! and the root tests use (the lab's runner keeps its own in napilab-lab's netns.rs).
//! And which namespace the calling thread is in ([`own_inode`]), the key that joins
//! the host-wide trace rows to this namespace's devices.

use std::io;
use std::os::fd::AsRawFd as _;

/// Moves the calling thread into the network namespace named `ns` (other threads stay
/// where they are). The error names the namespace.
pub fn enter(ns: &str) -> io::Result<()> {
    let path = format!("/run/netns/{ns}");
    let file =
        std::fs::File::open(&path).map_err(|e| io::Error::new(e.kind(), format!("{path}: {e}")))?;
    // SAFETY: setns on a valid namespace fd affects only the calling thread.
    if unsafe { libc::setns(file.as_raw_fd(), libc::CLONE_NEWNET) } != 0 {
        let e = io::Error::last_os_error();
        return Err(io::Error::new(e.kind(), format!("setns {ns}: {e}")));
    }
    Ok(())
}

/// The inode of the calling thread's network namespace: what the BPF tiers record as a
/// device's `netns`. From /proc/thread-self/ns/net, since a thread that entered a lab
/// namespace (setns) is in another namespace than the process's main thread; None when
/// neither that nor /proc/self/ns/net can be stat'ed (no /proc).
pub fn own_inode() -> Option<u32> {
    use std::os::unix::fs::MetadataExt as _;
    let meta = std::fs::metadata("/proc/thread-self/ns/net")
        .or_else(|_| std::fs::metadata("/proc/self/ns/net"))
        .ok()?;
    u32::try_from(meta.ino()).ok()
}

#[cfg(test)]
mod tests {
    #[test]
    fn own_inode_is_the_namespace_of_this_process() {
        use std::os::unix::fs::MetadataExt as _;
        let Ok(meta) = std::fs::metadata("/proc/self/ns/net") else {
            println!("SKIPPED own_inode_is_the_namespace_of_this_process: no /proc/self/ns/net");
            return;
        };
        assert_eq!(super::own_inode().map(u64::from), Some(meta.ino()));
    }
}
