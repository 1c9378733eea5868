//! What a timer costs each CPU (napilab_probe::timer_interrupt_cost): re-programming the
//! CPU's timer device, and a periodic timer's interrupt with its re-arming:
//!
//!     cargo run --release -p napilab-probe --example timer_cost -- [PERIOD_US=20] [ROUNDS=10]

use std::time::Duration;

use napilab_probe::timer_interrupt_cost::{measure, reprogram_ns};

fn main() {
    let mut args = std::env::args().skip(1);
    let period_us: u64 = args.next().and_then(|s| s.parse().ok()).unwrap_or(20);
    let rounds: usize = args.next().and_then(|s| s.parse().ok()).unwrap_or(10);
    let cpus = std::thread::available_parallelism().map_or(1, |n| n.get()) as u32;
    for cpu in 0..cpus {
        match reprogram_ns(cpu, 2_000, rounds) {
            Ok(ns) => println!("cpu {cpu}: programming the timer device costs {ns:.0} ns (median of {rounds} rounds of 2,000 arm/disarm pairs)"),
            Err(e) => println!("cpu {cpu}: {e}"),
        }
        match measure(
            cpu,
            Duration::from_micros(period_us),
            Duration::from_millis(200),
            rounds,
        ) {
            Ok(c) => {
                let mut r = c.rounds_ns.clone();
                r.sort_by(f64::total_cmp);
                println!(
                    "cpu {cpu}: a {period_us} us timer fired {:.0} times a second; {:.0} ns of the CPU per interrupt and re-arming (median of {} rounds, range {:.0} to {:.0})",
                    c.expiries_per_s,
                    c.ns_per_expiry,
                    r.len(),
                    r[0],
                    r[r.len() - 1]
                );
            }
            Err(e) => println!("cpu {cpu}: {e}"),
        }
    }
}
