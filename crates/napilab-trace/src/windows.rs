//! Time-sliced attachment of the per-packet tier's stage programs (docs/trace.md,
//! "Per-packet tier", "Tracing windows").
//!
//! A program that is not attached costs nothing: the tracepoint's static key stays off.
//! So instead of tracing every packet, a thread attaches the stage programs for a short
//! window (e.g. 20 ms) of every period (e.g. 1 s) and detaches them in between. Rates
//! seen in the windows are scaled by the measured open time; latency histograms are
//! those of the packets inside the windows. The drop program is not driven from here:
//! it stays attached so drop counts stay exact. The always-on tier uses the same thread
//! for its `softirq_raise` hook (`RaiseTiming::InWindows`), without the control map and
//! the event counter.
//!
//! The thread holds duplicated program fds and attaches with `BPF_RAW_TRACEPOINT_OPEN`
//! (a link fd per hook; closing it detaches), so it never touches the skeleton, which
//! is not `Send`. Stopping it (on drop) detaches everything and closes its fds.

use std::ffi::CString;
use std::os::fd::{AsRawFd as _, FromRawFd as _, OwnedFd};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Condvar, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

/// Attach the stage programs for `window` of every `period`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Windows {
    pub window: Duration,
    pub period: Duration,
}

impl Windows {
    /// What `observe --trace-packets` uses: 20 ms of every second (2% duty cycle).
    pub const DEFAULT: Windows = Windows {
        window: Duration::from_millis(20),
        period: Duration::from_secs(1),
    };

    /// The nominal share of time the stage programs are attached.
    pub fn duty(&self) -> f64 {
        self.window.as_secs_f64() / self.period.as_secs_f64().max(f64::MIN_POSITIVE)
    }

    /// Checks the plan, naming what to change.
    pub fn validate(&self) -> Result<(), String> {
        if self.window.is_zero() || self.window >= self.period {
            return Err(format!(
                "tracing window {:?} must be longer than 0 and shorter than its period {:?}",
                self.window, self.period
            ));
        }
        if self.window < Duration::from_millis(1) {
            return Err(format!(
                "tracing window {:?} is shorter than 1 ms: attaching takes tens of microseconds",
                self.window
            ));
        }
        Ok(())
    }
}

/// One stage program to attach in each window: its fd and, for `raw_tp`, the
/// tracepoint's name (`tp_btf` programs carry their target from the load).
pub(crate) struct WindowProgram {
    pub fd: OwnedFd,
    pub raw_tracepoint: Option<CString>,
}

/// Nanoseconds of windows: every stage program attached and counting.
#[derive(Default)]
struct WindowClock {
    /// Of the windows closed so far.
    closed_ns: u64,
    /// When the window now open opened (`monotonic_ns`), 0 between windows.
    open_since_ns: u64,
    /// Per closed window, the rate of recorded stage transitions (all pairs): count,
    /// sum and sum of squares.
    rates: WindowRates,
}

/// The windows so far, for the estimates and their error (cumulative: subtract two
/// readings for an interval).
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct WindowReading {
    /// Nanoseconds of windows (every stage program attached and counting), the window
    /// open now included.
    pub open_ns: u64,
    pub rates: WindowRates,
}

/// Per closed window, the rate of all recorded stage transitions (per second).
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct WindowRates {
    pub windows: u64,
    pub sum: f64,
    pub sum_sq: f64,
}

impl WindowRates {
    /// The windows between two readings.
    pub fn since(&self, earlier: &WindowRates) -> WindowRates {
        WindowRates {
            windows: self.windows.saturating_sub(earlier.windows),
            sum: self.sum - earlier.sum,
            sum_sq: self.sum_sq - earlier.sum_sq,
        }
    }

    /// The relative spread of one window's rate (standard deviation / mean), with at
    /// least two windows and some traffic.
    pub fn relative_spread(&self) -> Option<f64> {
        if self.windows < 2 || self.sum <= 0.0 {
            return None;
        }
        let n = self.windows as f64;
        let mean = self.sum / n;
        let var = ((self.sum_sq - n * mean * mean) / (n - 1.0)).max(0.0);
        Some(var.sqrt() / mean)
    }
}

/// What the thread shares with its owner.
#[derive(Default)]
struct Shared {
    /// Window time so far, read together by the owner.
    clock: Mutex<WindowClock>,
    /// Nanoseconds spent attaching and detaching, when only some were attached.
    transition_ns: AtomicU64,
    /// Windows opened so far.
    windows: AtomicU64,
    /// The first attach error, for the notices.
    error: Mutex<Option<String>>,
    stop: Mutex<bool>,
    wake: Condvar,
}

/// The running window thread; dropping it stops the thread and detaches everything.
pub(crate) struct WindowDriver {
    shared: Arc<Shared>,
    thread: Option<JoinHandle<()>>,
}

/// `bpf_ktime_get_ns()`'s clock.
fn monotonic_ns() -> u64 {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: clock_gettime writes into the timespec passed.
    unsafe { libc::clock_gettime(libc::CLOCK_MONOTONIC, &mut ts) };
    u64::try_from(ts.tv_sec).unwrap_or(0) * 1_000_000_000 + u64::try_from(ts.tv_nsec).unwrap_or(0)
}

/// Writes `struct pk_control` (packets.h) into the one-entry `control` array map.
pub(crate) fn write_control(
    map_fd: i32,
    window_start_ns: u64,
    between_windows: bool,
) -> Result<(), String> {
    let mut value = [0u8; 16];
    value[..8].copy_from_slice(&window_start_ns.to_ne_bytes());
    value[8..12].copy_from_slice(&u32::from(between_windows).to_ne_bytes());
    let key = 0u32;
    // SAFETY: key and value point to buffers of the map's key and value sizes (checked
    // by the loader at start).
    let rc = unsafe {
        libbpf_rs::libbpf_sys::bpf_map_update_elem(
            map_fd,
            (&raw const key).cast(),
            value.as_ptr().cast(),
            0,
        )
    };
    if rc != 0 {
        return Err(format!(
            "cannot write the per-packet tier's control map: {}",
            std::io::Error::from_raw_os_error(-rc)
        ));
    }
    Ok(())
}

fn attach(program: &WindowProgram) -> Result<OwnedFd, String> {
    let name = program
        .raw_tracepoint
        .as_ref()
        .map_or(std::ptr::null(), |n| n.as_ptr());
    // SAFETY: name is null or a NUL-terminated string that outlives the call; the fd is
    // a loaded program's.
    let fd =
        unsafe { libbpf_rs::libbpf_sys::bpf_raw_tracepoint_open(name, program.fd.as_raw_fd()) };
    if fd < 0 {
        return Err(std::io::Error::from_raw_os_error(-fd).to_string());
    }
    // SAFETY: the kernel just returned this fd, owned by nobody else.
    Ok(unsafe { OwnedFd::from_raw_fd(fd) })
}

impl WindowDriver {
    /// Starts the thread; the first window opens at once. `control` (the per-packet
    /// tier's `struct pk_control` map) is written at each window's opening and close,
    /// `events` (its `window_events` per-CPU counter) read at each close, when given;
    /// the always-on tier's raise windows have neither.
    pub(crate) fn start(
        plan: Windows,
        programs: Vec<WindowProgram>,
        control: Option<OwnedFd>,
        events: Option<OwnedFd>,
    ) -> WindowDriver {
        let shared = Arc::new(Shared::default());
        let inner = Arc::clone(&shared);
        let thread = std::thread::Builder::new()
            .name("napilab-windows".into())
            .spawn(move || run(plan, &programs, control.as_ref(), events.as_ref(), &inner))
            .ok();
        if thread.is_none() {
            if let Ok(mut e) = shared.error.lock() {
                *e = Some("cannot start the tracing-window thread".into());
            }
        }
        WindowDriver { shared, thread }
    }

    /// Nanoseconds of windows so far, the one open now included (a reading in the
    /// middle of a window counts its packets so far, so its time so far too).
    pub(crate) fn reading(&self) -> WindowReading {
        let Ok(clock) = self.shared.clock.lock() else {
            return WindowReading::default();
        };
        let open_ns = match clock.open_since_ns {
            0 => clock.closed_ns,
            since => clock.closed_ns + monotonic_ns().saturating_sub(since),
        };
        WindowReading {
            open_ns,
            rates: clock.rates,
        }
    }

    pub(crate) fn open_ns(&self) -> u64 {
        self.reading().open_ns
    }

    /// Nanoseconds spent attaching and detaching so far (some programs attached).
    pub(crate) fn transition_ns(&self) -> u64 {
        self.shared.transition_ns.load(Ordering::Relaxed)
    }

    /// Windows opened so far.
    pub(crate) fn windows(&self) -> u64 {
        self.shared.windows.load(Ordering::Relaxed)
    }

    /// The first error the thread met (attach or control-map write).
    pub(crate) fn error(&self) -> Option<String> {
        self.shared.error.lock().ok().and_then(|e| e.clone())
    }
}

impl Drop for WindowDriver {
    fn drop(&mut self) {
        if let Ok(mut stop) = self.shared.stop.lock() {
            *stop = true;
        }
        self.shared.wake.notify_all();
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

/// Sleeps until `deadline` or a stop request; true when asked to stop.
fn wait_until(shared: &Shared, deadline: Instant) -> bool {
    let Ok(mut stop) = shared.stop.lock() else {
        return true;
    };
    loop {
        if *stop {
            return true;
        }
        let now = Instant::now();
        if now >= deadline {
            return false;
        }
        match shared.wake.wait_timeout(stop, deadline - now) {
            Ok((guard, _)) => stop = guard,
            Err(_) => return true,
        }
    }
}

fn note_error(shared: &Shared, error: String) {
    if let Ok(mut e) = shared.error.lock() {
        e.get_or_insert(error);
    }
}

/// The `window_events` per-CPU counter summed over CPUs.
fn read_events(map_fd: i32, buf: &mut [u64]) -> Option<u64> {
    let key = 0u32;
    // SAFETY: a per-CPU array's lookup writes one u64 per possible CPU; `buf` has that
    // many.
    let rc = unsafe {
        libbpf_rs::libbpf_sys::bpf_map_lookup_elem(
            map_fd,
            (&raw const key).cast(),
            buf.as_mut_ptr().cast(),
        )
    };
    (rc == 0).then(|| buf.iter().sum())
}

fn run(
    plan: Windows,
    programs: &[WindowProgram],
    control: Option<&OwnedFd>,
    events: Option<&OwnedFd>,
    shared: &Shared,
) {
    let control_fd = control.map(|c| c.as_raw_fd());
    let cpus = libbpf_rs::num_possible_cpus().unwrap_or(1).max(1);
    let mut buf = vec![0u64; cpus];
    let read_all_events = |buf: &mut [u64]| events.and_then(|e| read_events(e.as_raw_fd(), buf));
    let mut events_before = read_all_events(&mut buf);
    let control_write = |start_ns: u64, between: bool| match control_fd {
        Some(fd) => write_control(fd, start_ns, between),
        None => Ok(()),
    };
    if let Err(e) = control_write(0, true) {
        note_error(shared, e);
    }
    let mut next = Instant::now();
    loop {
        let attaching = Instant::now();
        let mut links = Vec::with_capacity(programs.len());
        for p in programs {
            match attach(p) {
                Ok(link) => links.push(link),
                Err(e) => note_error(
                    shared,
                    format!("cannot attach a program for its window: {e}"),
                ),
            }
        }
        // The window: from here to the next control write. Its start is newer than
        // every packet state an earlier window left, so those count as stale.
        let opened = Instant::now();
        let opened_ns = monotonic_ns();
        if let Err(e) = control_write(opened_ns, false) {
            note_error(shared, e);
        }
        if let Ok(mut clock) = shared.clock.lock() {
            clock.open_since_ns = opened_ns;
        }
        shared.windows.fetch_add(1, Ordering::Relaxed);
        let stopped = wait_until(shared, opened + plan.window);
        let _ = control_write(0, true);
        let window_ns = monotonic_ns().saturating_sub(opened_ns);
        let events_now = read_all_events(&mut buf);
        if let Ok(mut clock) = shared.clock.lock() {
            clock.closed_ns += window_ns;
            clock.open_since_ns = 0;
            if let (Some(a), Some(b)) = (events_before, events_now) {
                if window_ns > 0 {
                    let rate = b.saturating_sub(a) as f64 / (window_ns as f64 / 1e9);
                    clock.rates.windows += 1;
                    clock.rates.sum += rate;
                    clock.rates.sum_sq += rate * rate;
                }
            }
        }
        events_before = events_now;
        let closing = Instant::now();
        drop(links);
        let nanos = |d: Duration| u64::try_from(d.as_nanos()).unwrap_or(u64::MAX);
        shared.transition_ns.fetch_add(
            nanos(opened - attaching) + nanos(closing.elapsed()),
            Ordering::Relaxed,
        );
        if stopped {
            return;
        }
        next += plan.period;
        // Behind schedule (the machine stalled us): start the next window now, do not
        // try to catch up with several.
        let now = Instant::now();
        if next < now {
            next = now;
        }
        if wait_until(shared, next) {
            return;
        }
    }
}

/// A rate seen only inside the windows, scaled to the whole interval: `count` events
/// in `open_secs` of windows. Returns (events per second, one standard deviation of
/// it). The deviation has two parts: which events of a steady stream fall into the
/// windows (binomial, probability `open_secs / interval_secs`), and how much the
/// traffic itself changes from window to window (`rates`: the spread of the
/// per-window rates over the interval's windows, as for a sample of `windows` of the
/// interval's period-long slices). With fewer than two windows the second part is
/// unknown and left out: traffic that changes within the interval can be off by more.
pub fn windowed_rate(
    count: u64,
    open_secs: f64,
    interval_secs: f64,
    rates: Option<&WindowRates>,
) -> (f64, f64) {
    if open_secs <= 0.0 || interval_secs <= 0.0 {
        return (0.0, 0.0);
    }
    let duty = (open_secs / interval_secs).min(1.0);
    let rate = count as f64 / open_secs;
    let sd_binomial = (count as f64 * (1.0 - duty)).sqrt() / duty / interval_secs;
    let relative = rates
        .and_then(WindowRates::relative_spread)
        .zip(rates)
        .map_or(0.0, |(spread, r)| {
            spread * ((1.0 - duty) / r.windows as f64).sqrt()
        });
    let sd_traffic = rate * relative;
    (
        rate,
        (sd_binomial * sd_binomial + sd_traffic * sd_traffic).sqrt(),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn full_duty_is_exact() {
        let (rate, sd) = windowed_rate(1000, 2.0, 2.0, None);
        assert_eq!(rate, 500.0);
        assert_eq!(sd, 0.0);
    }

    #[test]
    fn two_percent_duty_scales_and_widens() {
        // 200 packets in 0.02 s of a 1 s interval: 10000/s, sd sqrt(200*0.98)/0.02.
        let (rate, sd) = windowed_rate(200, 0.02, 1.0, None);
        assert!((rate - 10_000.0).abs() < 1e-6);
        assert!((sd - (196.0f64).sqrt() / 0.02).abs() < 1e-6);
    }

    #[test]
    fn window_to_window_spread_widens_the_error() {
        // Rates 100, 300 in two windows: mean 200, sd 141.4, relative 0.707.
        let rates = WindowRates {
            windows: 2,
            sum: 400.0,
            sum_sq: 100.0 * 100.0 + 300.0 * 300.0,
        };
        let spread = rates.relative_spread().unwrap_or_default();
        assert!((spread - 0.5f64.sqrt()).abs() < 1e-9);
        let (rate, sd) = windowed_rate(4, 0.02, 1.0, Some(&rates));
        let steady = windowed_rate(4, 0.02, 1.0, None).1;
        assert!((rate - 200.0).abs() < 1e-9);
        let traffic = 200.0 * spread * (0.98f64 / 2.0).sqrt();
        assert!((sd - (steady * steady + traffic * traffic).sqrt()).abs() < 1e-9);
        assert!(WindowRates::default().relative_spread().is_none());
    }

    #[test]
    fn plans_are_checked() {
        assert!(Windows::DEFAULT.validate().is_ok());
        assert!((Windows::DEFAULT.duty() - 0.02).abs() < 1e-12);
        let bad = Windows {
            window: Duration::from_secs(2),
            period: Duration::from_secs(1),
        };
        assert!(matches!(bad.validate(), Err(e) if e.contains("shorter than its period")));
    }
}
