//! Measures how fast one CPU runs a fixed piece of work, sample after sample
//! (napilab-core `HostSpeed`; docs/lab.md, "Host speed").
//!
//! The work is a pointer chase with integer mixing over 256 KiB (within any L2 of the
//! last decade, so the result is the core's and its cache's speed, not DRAM's) and its
//! time is the thread's own CPU time (`CLOCK_THREAD_CPUTIME_ID`): time the thread spent
//! waiting for the CPU, and with paravirtual steal accounting the time the hypervisor
//! took, are not in it. What is left to vary is how fast the vCPU ran while it ran: on a
//! shared host, other guests on the same physical core or cache. Hardware counters would
//! say more, but VMs of this kind have none.

use std::time::{Duration, Instant};

use napilab_core::HostSpeed;

/// 256 KiB of u64.
const WORK_WORDS: usize = 256 * 1024 / 8;
/// Steps of the chase per unit: about 0.1 ms on a 2020s server core.
const STEPS_PER_UNIT: u32 = 20_000;

#[derive(Debug, thiserror::Error)]
pub enum SpeedError {
    #[error("cannot pin the host-speed probe to CPU {cpu}: {source} (is CPU {cpu} online and in this process's affinity mask?)")]
    Pin { cpu: u32, source: std::io::Error },
    #[error(
        "cannot read the probe thread's CPU time (clock_gettime CLOCK_THREAD_CPUTIME_ID): {0}"
    )]
    Clock(std::io::Error),
    #[error("the host-speed probe thread panicked")]
    Panicked,
}

/// `samples` samples of `sample` each on `cpu`, on a thread of its own pinned there;
/// takes about samples x sample of wall time.
pub fn measure(cpu: u32, sample: Duration, samples: usize) -> Result<HostSpeed, SpeedError> {
    std::thread::Builder::new()
        .name("napilab-speed".into())
        .spawn(move || measure_here(cpu, sample, samples))
        .map_err(SpeedError::Clock)?
        .join()
        .map_err(|_| SpeedError::Panicked)?
}

/// [`measure`] on every CPU of `cpus` at once, one pinned thread each; results in the
/// order of `cpus`.
pub fn measure_all(
    cpus: &[u32],
    sample: Duration,
    samples: usize,
) -> Vec<Result<HostSpeed, SpeedError>> {
    let threads: Vec<_> = cpus
        .iter()
        .map(|&cpu| {
            std::thread::Builder::new()
                .name("napilab-speed".into())
                .spawn(move || measure_here(cpu, sample, samples))
        })
        .collect();
    threads
        .into_iter()
        .map(|t| {
            t.map_err(SpeedError::Clock)?
                .join()
                .map_err(|_| SpeedError::Panicked)?
        })
        .collect()
}

fn measure_here(cpu: u32, sample: Duration, samples: usize) -> Result<HostSpeed, SpeedError> {
    pin_this_thread(cpu)?;
    let mut work = Work::new();
    work.unit(); // pages and cache warm before the first timed sample
    let mut ns_per_unit = Vec::with_capacity(samples);
    for _ in 0..samples {
        let (wall, cpu0) = (Instant::now(), thread_cpu_ns()?);
        let mut units = 0u64;
        while wall.elapsed() < sample {
            work.unit();
            units += 1;
        }
        let spent = thread_cpu_ns()?.saturating_sub(cpu0);
        ns_per_unit.push(spent as f64 / units as f64);
    }
    Ok(HostSpeed {
        when: String::new(),
        cpu,
        sample_ms: sample.as_secs_f64() * 1e3,
        ns_per_unit,
    })
}

struct Work {
    words: Vec<u64>,
    x: u64,
}

impl Work {
    fn new() -> Work {
        Work {
            words: (0..WORK_WORDS as u64)
                .map(|k| k.wrapping_mul(0x9E37_79B9_7F4A_7C15))
                .collect(),
            x: 0x2545_F491_4F6C_DD1D,
        }
    }

    /// One unit: xorshift steps, each reading and writing the word it lands on.
    fn unit(&mut self) {
        let n = self.words.len();
        let mut x = self.x;
        let mut i = (x as usize) % n;
        for _ in 0..STEPS_PER_UNIT {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            i = (self.words[i] as usize ^ x as usize) % n;
            self.words[i] = self.words[i].wrapping_add(x);
        }
        self.x = std::hint::black_box(x);
    }
}

fn pin_this_thread(cpu: u32) -> Result<(), SpeedError> {
    crate::pin::pin_this_thread(cpu).map_err(|source| SpeedError::Pin { cpu, source })
}

fn thread_cpu_ns() -> Result<u64, SpeedError> {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: ts is a valid timespec for the call to fill.
    if unsafe { libc::clock_gettime(libc::CLOCK_THREAD_CPUTIME_ID, &mut ts) } != 0 {
        return Err(SpeedError::Clock(std::io::Error::last_os_error()));
    }
    Ok(ts.tv_sec as u64 * 1_000_000_000 + ts.tv_nsec as u64)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_sample_times_the_work_on_the_cpu_asked_for() {
        let speed = measure(0, Duration::from_millis(20), 3).expect("CPU 0 is always there");
        assert_eq!((speed.cpu, speed.ns_per_unit.len()), (0, 3));
        assert!((speed.sample_ms - 20.0).abs() < 1e-9);
        // A unit is 20,000 dependent steps: more than a ns each on any CPU, and far
        // below the 20 ms sample.
        for ns in &speed.ns_per_unit {
            assert!(*ns > 20_000.0 && *ns < 20e6, "{ns} ns per unit");
        }
    }

    #[test]
    fn all_cpus_are_timed_at_once_in_the_order_asked() {
        let all = measure_all(&[0, 100_000], Duration::from_millis(10), 1);
        assert_eq!(all.len(), 2);
        assert_eq!(all[0].as_ref().map(|s| s.cpu).ok(), Some(0));
        assert!(all[1].is_err());
    }

    #[test]
    fn a_cpu_that_is_not_there_is_named() {
        let err = measure(100_000, Duration::from_millis(1), 1).expect_err("no CPU 100000");
        assert!(err.to_string().contains("CPU 100000"), "{err}");
    }
}
