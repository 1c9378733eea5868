//! napilab's lab: a scenario run on the real kernel, in network namespaces it creates
//! and removes (docs/architecture.md principle 5).
//!
//! - [`netns`]: run ids, namespace names, running `ip`/`tc`/`ethtool`, entering a
//!   namespace from a thread.
//! - [`topology`]: the gen -> DUT -> sink veth topology and the DUT's settings.
//! - [`traffic`]: the paced UDP generator and the sink (loss, reordering, one-way
//!   latency).
//! - [`linerate`]: the line-rate back end (XDP live frames through `BPF_PROG_RUN`, an
//!   in-kernel counting sink).
//! - [`many_napi`]: the many-napi topology's NAPI kthread and poll measurements.
//! - [`counters`]: where the kernel counted lost packets.
//! - [`disturbance`]: what the machine took away from a trial (steal, other processes).
//! - [`runner`]: configurations x loads x repeats, the search (napilab-experiment's,
//!   on the lab as its testbed), the RunRecord.
//! - [`clean`]: removing what an interrupted or killed run left behind.
//! - [`request`]: request workloads: the key-value server, memcached, the load
//!   generator.
//! - [`tunnel`]: the user-space tunnel endpoint (the vpn topology's engine without
//!   kernel WireGuard) and its encrypting peers.

pub(crate) mod checksum;
pub mod clean;
pub mod counters;
pub mod disturbance;
mod gso;
pub mod linerate;
pub mod many_napi;
pub mod netns;
mod packet_point;
pub mod packet_runner;
pub mod request;
mod run_context;
pub mod runner;
pub mod server_runner;
pub mod server_topology;
pub mod topology;
pub mod traffic;
pub mod tunnel;
pub mod vpn_runner;

pub use runner::{run, RunOptions};
