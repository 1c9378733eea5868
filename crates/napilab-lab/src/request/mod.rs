//! Request workloads: a key-value server in the DUT namespace and a load generator in
//! the client namespace, speaking the memcached text protocol (docs/lab.md, "Request
//! workloads").
//!
//! - [`protocol`]: the `get`/`set`/`delete` subset, requests and replies.
//! - [`keyspace`]: the preloaded keys and their values.
//! - [`epoll`]: the interrupt modes' epoll side (`EPIOCSPARAMS`, blocking or not) and
//!   what this kernel supports.
//! - [`server`]: napilab's server, one epoll instance per NAPI instance.
//! - [`memcached`]: the distribution's memcached, started in a namespace.
//! - [`loadgen`]: the open- and closed-loop load generator, and a simple client.
//! - [`results`]: what a point stores (latency percentiles, server statistics).

pub mod epoll;
pub mod keyspace;
pub mod loadgen;
pub mod memcached;
pub mod protocol;
pub mod results;
pub mod server;

/// Time the calling thread has spent runnable but waiting for a CPU, ns (second field
/// of /proc/thread-self/schedstat; None without CONFIG_SCHED_INFO). Tells a thread that
/// had nothing to do from one that other tasks kept off its CPU.
pub(crate) fn thread_run_delay_ns() -> Option<u64> {
    std::fs::read_to_string("/proc/thread-self/schedstat")
        .ok()?
        .split_whitespace()
        .nth(1)?
        .parse()
        .ok()
}
