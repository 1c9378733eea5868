//! Tier-0 probe: everything napilab can learn about a host's packet path without BPF.
//!
//! File readers take a root directory (the host's `/`, or a fixture tree in tests) so
//! that no parser hard-codes `/proc` (the node_exporter lesson in docs/architecture.md section 6).

pub mod derive;
pub mod host_identity;
pub mod host_speed;
pub mod kernel;
pub mod map;
mod near;
pub mod netlink;
pub mod netns;
pub mod observe;
mod pin;
pub mod procfs;
pub mod record;
pub mod sample;
pub mod stalls;
pub mod sysctl;
pub mod sysfs;
pub mod timer_interrupt_cost;
pub mod wake_up_latency;
