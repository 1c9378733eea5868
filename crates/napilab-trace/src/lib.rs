//! napilab's tracing tier (docs/architecture.md section 3, "trace").
//!
//! [`always_on`] loads the always-on BPF programs (`bpf/napi_trace.bpf.c`): they fire
//! per NAPI poll, per softirq run and per device IRQ, never per packet, and aggregate
//! into per-CPU maps. [`snapshot`] turns two readings of those maps into a
//! [`TraceInterval`](napilab_core::trace::TraceInterval); it is pure and tested without
//! root. [`stages`] samples kernel stacks (cpu-clock) and maps them to packet-path
//! stages by their callers. [`packets`] is the opt-in per-packet tier: stage-to-stage
//! latency per packet and drops by reason (`observe --trace-packets`). [`live`] is the
//! live observation loop (proc tier plus these) that `napilab observe` and the lab run.
//! [`loader`] holds what every BPF loader shares, the lab's line-rate generator
//! included.

pub mod always_on;
pub mod cost;
pub mod floor;
pub mod live;
pub mod loader;
pub mod packets;
pub mod snapshot;
pub mod stages;
pub mod windows;

pub use always_on::{AlwaysOn, RaiseTiming, StartError, TraceOptions};
pub use packets::{PacketOptions, PacketTrace};
pub use snapshot::{trace_interval, Snapshot};
pub use windows::Windows;
