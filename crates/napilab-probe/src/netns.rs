//! Joining a named network namespace (`ip netns add <name>`, `/run/netns/<name>`) from
//! one thread: `setns(2)` with `CLONE_NEWNET` moves only the calling thread, and the
//! sockets it creates afterwards belong to that namespace. The one helper the examples
//! and the root tests use (the lab's runner keeps its own in napilab-lab's netns.rs).

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
