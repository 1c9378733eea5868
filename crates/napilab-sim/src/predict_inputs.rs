//! What `tune plan --predict` feeds the twin (crate::predict): the settings of each NAPI
//! instance and what the observation measured of the devices. Their own module so that
//! the parts of the prediction (crate::sender_rate, crate::wake_up) read them without
//! importing the prediction itself.

use serde::{Deserialize, Serialize};

use crate::config::NapiContext;

/// One NAPI instance's settings as the twin runs them.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct NapiSettings {
    pub device: String,
    pub queue: u32,
    pub napi_id: Option<u32>,
    pub context: NapiContext,
    /// The CPU that polls it: the softirq's (the sender's, for veth) or the kthread's.
    pub cpu: u32,
    pub defer_hard_irqs: u32,
    pub gro_flush_timeout_ns: u64,
}

/// What the observation measured, per CPU, for the devices.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct MeasuredCpu {
    pub cpu: u32,
    /// NET_RX/NET_TX softirq time (trace tier), share of the CPU.
    pub softirq: f64,
    /// The devices' NAPI kthreads' CPU (/proc/<pid>/stat, tick-sampled).
    pub napi_thread: f64,
    pub polls_per_s: f64,
    pub packets_per_poll: f64,
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Measured {
    pub seconds: f64,
    pub packets_per_s: f64,
    pub frame_bytes: f64,
    pub cpu_ns_per_packet: f64,
    /// Traced polls of the device over `seconds`.
    pub polls: u64,
    pub cpus: Vec<MeasuredCpu>,
    /// Over all CPUs (`cpu` is u32::MAX): shares summed, polls/s summed, packets per
    /// poll over all polls.
    pub total: MeasuredCpu,
}
