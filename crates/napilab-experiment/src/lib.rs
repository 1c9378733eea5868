//! napilab's experiment layer: what an experiment does, written once, for every testbed
//! that can offer a workload and measure it (the lab's network namespaces on the real
//! kernel, the twin). A testbed implements [`maximum::PacketTestbed`]; the searches,
//! their pass criteria and their records are here, so the lab and the twin answer the
//! same question the same way and every record says which search gave its maximum.
//!
//! - [`maximum`]: the packet workload's maximum-throughput search (MLRsearch repeats or
//!   the RFC 2544 bisection, as the scenario says) on a [`maximum::PacketTestbed`].
//! - [`mlrsearch`]: MLRsearch itself (goals, trials, conditional throughput).
//! - [`bisection`]: the bisection between a passing and a failing load.
//! - [`capacity_probe`]: the doubling capacity probe, with each testbed's criterion.
//! - [`configuration`], [`requests`]: one configuration's sweep, search and findings.
//! - [`record`]: a run's configurations in order and its record, for every testbed.
//! - [`request_search`]: the request workload's maximum-rate search (a raised range,
//!   then the bisection).
//!
//! Pure logic: no namespaces, no clock; the tests drive it with synthetic testbeds.

pub mod bisection;
pub mod capacity_probe;
pub mod configuration;
pub mod maximum;
pub mod mlrsearch;
pub mod record;
pub mod request_search;
pub mod requests;
