//! The epoll side of the interrupt modes (docs/studies.md IRQS-1; docs/kernel.md): which epoll
//! parameters and which kind of `epoll_wait` a mode uses, read from the tune profile
//! that owns the mode (its `[app]` section), and whether this kernel can run it. Also
//! the thin, checked epoll wrappers the server and the load generator share.

use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};

use serde::{Deserialize, Serialize};

use super::results::EpollParams;

/// How a server waits for its connections in one mode.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct EpollMode {
    /// The mode's name (`no-coalescing`, `deferral`, `threaded`, `busy-wait`,
    /// `irq-suspend`, `threaded-busy-poll`, or `custom`).
    pub name: String,
    /// `EPIOCSPARAMS` per epoll instance; None leaves the kernel's defaults (no busy
    /// polling unless the global `net.core.busy_poll` says so).
    pub params: Option<EpollParams>,
    /// Blocking `epoll_wait`, or a loop of `epoll_pwait2` with a 1 ns timeout (the
    /// kernel busy-polls inside each call; a zero timeout would skip that).
    pub blocking: bool,
    /// The mode needs per-NAPI `irq-suspend-timeout` (Linux 6.13+).
    pub needs_irq_suspend: bool,
}

/// The modes whose application side is plain blocking epoll: their difference lies in
/// the per-NAPI settings the tune profiles apply.
const PLAIN_MODES: [&str; 4] = [MODES[0], MODES[1], MODES[2], MODES[5]];
/// The modes whose tune profile carries an `[app]` section for the server.
const POLLING_MODES: [&str; 2] = [MODES[3], MODES[4]];

impl EpollMode {
    /// The server side of a named mode. The busy-poll modes take their parameters from
    /// the shipped tune profile of the same name, so the server and `napilab tune`
    /// cannot disagree.
    pub fn named(name: &str) -> Result<EpollMode, String> {
        if PLAIN_MODES.contains(&name) {
            return Ok(EpollMode {
                name: name.into(),
                params: None,
                blocking: true,
                needs_irq_suspend: false,
            });
        }
        if !POLLING_MODES.contains(&name) {
            return Err(format!(
                "unknown mode {name:?}: use one of {}, {}",
                PLAIN_MODES.join(", "),
                POLLING_MODES.join(", ")
            ));
        }
        let (profile, _) = napilab_tune::profile::load(name)
            .map_err(|e| format!("mode {name}: its tune profile: {e}"))?;
        let app = profile
            .app
            .ok_or_else(|| format!("mode {name}: tune profile {name} has no [app] section"))?;
        Ok(EpollMode {
            name: name.into(),
            params: Some(EpollParams {
                busy_poll_usecs: app.busy_poll_usecs,
                busy_poll_budget: app.busy_poll_budget,
                prefer_busy_poll: app.prefer_busy_poll,
            }),
            blocking: app.blocking_epoll,
            needs_irq_suspend: profile.items.iter().any(|s| {
                s.setting == "napi.irq-suspend-timeout" && s.value.as_integer().unwrap_or(0) != 0
            }),
        })
    }
}

/// Every mode the server knows, in the study's order, then threaded busy polling
/// (Linux 6.19, not one of the study's modes).
pub const MODES: [&str; 6] = [
    "no-coalescing",
    "deferral",
    "threaded",
    "busy-wait",
    "irq-suspend",
    "threaded-busy-poll",
];

/// Whether one mode runs here, and why not.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct ModeSupport {
    pub mode: String,
    pub runnable: bool,
    pub reason: Option<String>,
    /// The epoll side it would use.
    pub params: Option<EpollParams>,
    pub blocking: bool,
}

/// [`check_supported`] for every mode, from the calling thread's namespace.
pub fn support() -> Vec<ModeSupport> {
    MODES
        .iter()
        .map(|name| match EpollMode::named(name) {
            Ok(m) => {
                let check = check_supported(&m);
                ModeSupport {
                    mode: (*name).into(),
                    runnable: check.is_ok(),
                    reason: check.err(),
                    params: m.params,
                    blocking: m.blocking,
                }
            }
            Err(e) => ModeSupport {
                mode: (*name).into(),
                runnable: false,
                reason: Some(e),
                params: None,
                blocking: true,
            },
        })
        .collect()
}

/// Why a mode cannot run on this kernel, or Ok. For `threaded-busy-poll`, that the
/// kernel has napi-set threaded=busy-poll (6.19+). Checks `EPIOCSPARAMS` on a scratch
/// epoll instance and, for `irq-suspend`, that the kernel reports the per-NAPI
/// `irq-suspend-timeout` attribute (netdev netlink `napi-get`) on a NAPI instance of
/// the calling thread's namespace.
pub fn check_supported(mode: &EpollMode) -> Result<(), String> {
    if mode.name == "threaded-busy-poll" {
        // napi-set threaded=busy-poll: the kernel's release, or an instance already
        // reporting the value, says whether it exists.
        let release = std::fs::read_to_string("/proc/sys/kernel/osrelease").ok();
        let reported = napilab_probe::netlink::Netlink::new()
            .napis()
            .ok()
            .and_then(|n| n.iter().find_map(|x| x.threaded.filter(|v| *v == 2)));
        napilab_tune::knobs::busy_poll_support(release.as_deref().map(str::trim), reported)
            .map_err(|e| format!("mode {} is not runnable on this kernel: {e}", mode.name))?;
    }
    if let Some(p) = mode.params {
        let ep = Epoll::new().map_err(|e| format!("epoll_create1: {e}"))?;
        ep.set_params(&p)
            .map_err(|e| format!("mode {} is not runnable on this kernel: {e}", mode.name))?;
    }
    if mode.needs_irq_suspend {
        let napis = napilab_probe::netlink::Netlink::new().napis().map_err(|e| {
            format!(
                "mode {} is not runnable here: cannot read the NAPI instances (netdev netlink napi-get, Linux 6.8+): {e}",
                mode.name
            )
        })?;
        if napis.is_empty() {
            return Err(format!(
                "mode {}: no NAPI instance in this namespace to check irq-suspend-timeout on (enable GRO on the server's veth)",
                mode.name
            ));
        }
        if napis.iter().all(|n| n.irq_suspend_timeout_ns.is_none()) {
            return Err(format!(
                "mode {} is not runnable on this kernel: NAPI instances have no irq-suspend-timeout (Linux 6.13+)",
                mode.name
            ));
        }
    }
    Ok(())
}

/// An epoll instance.
pub struct Epoll(OwnedFd);

fn check(rc: libc::c_int) -> io::Result<libc::c_int> {
    if rc < 0 {
        Err(io::Error::last_os_error())
    } else {
        Ok(rc)
    }
}

impl Epoll {
    pub fn new() -> io::Result<Epoll> {
        // SAFETY: epoll_create1 returns a new descriptor that we own.
        let fd = check(unsafe { libc::epoll_create1(libc::EPOLL_CLOEXEC) })?;
        // SAFETY: fd is a fresh, valid descriptor.
        Ok(Epoll(unsafe { OwnedFd::from_raw_fd(fd) }))
    }

    pub fn fd(&self) -> RawFd {
        self.0.as_raw_fd()
    }

    /// Sets the per-instance busy-poll parameters; the error names the ioctl and the
    /// kernel version that added it.
    pub fn set_params(&self, p: &EpollParams) -> io::Result<()> {
        let params = libc::epoll_params {
            busy_poll_usecs: p.busy_poll_usecs,
            busy_poll_budget: p.busy_poll_budget,
            prefer_busy_poll: u8::from(p.prefer_busy_poll),
            __pad: 0,
        };
        // SAFETY: EPIOCSPARAMS reads one epoll_params that lives across the call.
        check(unsafe { libc::ioctl(self.fd(), libc::EPIOCSPARAMS, &params) })
            .map(drop)
            .map_err(|e| {
                let hint = match e.raw_os_error() {
                    Some(libc::ENOTTY) | Some(libc::EINVAL) => " (EPIOCSPARAMS needs Linux 6.9+)",
                    Some(libc::EPERM) => {
                        " (a budget above net.core.busy_poll_budget limits needs CAP_NET_ADMIN)"
                    }
                    _ => "",
                };
                io::Error::new(e.kind(), format!("ioctl(EPIOCSPARAMS): {e}{hint}"))
            })
    }

    pub fn add(&self, fd: RawFd, events: u32, data: u64) -> io::Result<()> {
        let mut ev = libc::epoll_event { events, u64: data };
        // SAFETY: ev lives across the call.
        check(unsafe { libc::epoll_ctl(self.fd(), libc::EPOLL_CTL_ADD, fd, &mut ev) }).map(drop)
    }

    pub fn modify(&self, fd: RawFd, events: u32, data: u64) -> io::Result<()> {
        let mut ev = libc::epoll_event { events, u64: data };
        // SAFETY: ev lives across the call.
        check(unsafe { libc::epoll_ctl(self.fd(), libc::EPOLL_CTL_MOD, fd, &mut ev) }).map(drop)
    }

    pub fn delete(&self, fd: RawFd) -> io::Result<()> {
        let mut ev = libc::epoll_event { events: 0, u64: 0 };
        // SAFETY: ev lives across the call (older kernels want a non-null pointer).
        check(unsafe { libc::epoll_ctl(self.fd(), libc::EPOLL_CTL_DEL, fd, &mut ev) }).map(drop)
    }

    /// `epoll_wait` with a millisecond timeout (-1: block). EINTR reads as no event.
    pub fn wait(&self, events: &mut [libc::epoll_event], timeout_ms: i32) -> io::Result<usize> {
        let max = events.len().min(i32::MAX as usize) as i32;
        // SAFETY: events is a valid, writable buffer of `max` entries.
        let n = unsafe { libc::epoll_wait(self.fd(), events.as_mut_ptr(), max, timeout_ms) };
        match check(n) {
            Ok(n) => Ok(n as usize),
            Err(e) if e.kind() == io::ErrorKind::Interrupted => Ok(0),
            Err(e) => Err(e),
        }
    }

    /// `epoll_pwait2` with a nanosecond timeout (Linux 5.11+); falls back to
    /// `epoll_wait` rounded down to milliseconds (0 below 1 ms: the caller spins).
    pub fn wait_ns(&self, events: &mut [libc::epoll_event], timeout_ns: u64) -> io::Result<usize> {
        let ts = libc::timespec {
            tv_sec: (timeout_ns / 1_000_000_000) as libc::time_t,
            tv_nsec: (timeout_ns % 1_000_000_000) as libc::c_long,
        };
        let max = events.len().min(i32::MAX as usize) as libc::c_int;
        // SAFETY: events is writable for `max` entries, ts lives across the call, and a
        // null sigmask means none.
        let n = unsafe {
            libc::syscall(
                libc::SYS_epoll_pwait2,
                self.fd(),
                events.as_mut_ptr(),
                max,
                &ts as *const libc::timespec,
                std::ptr::null::<libc::sigset_t>(),
                0usize,
            )
        };
        if n >= 0 {
            return Ok(n as usize);
        }
        let e = io::Error::last_os_error();
        match e.raw_os_error() {
            Some(libc::EINTR) => Ok(0),
            Some(libc::ENOSYS) => {
                self.wait(events, (timeout_ns / 1_000_000).min(i32::MAX as u64) as i32)
            }
            _ => Err(e),
        }
    }
}

/// Sends as much of `buf` as a non-blocking socket takes now and drops it from `buf`;
/// Err on a broken connection (the peer closed: EPIPE, not SIGPIPE). What the socket
/// would not take stays in `buf` for the next writable event. Shared by the load
/// generator and the server, which drive many sockets from one epoll.
pub fn send_pending(fd: RawFd, buf: &mut Vec<u8>) -> io::Result<()> {
    let mut sent = 0;
    let result = loop {
        if sent >= buf.len() {
            break Ok(());
        }
        // SAFETY: the slice is readable for its length; MSG_NOSIGNAL turns a closed
        // peer into EPIPE instead of SIGPIPE.
        let n = unsafe {
            libc::send(
                fd,
                buf[sent..].as_ptr().cast(),
                buf.len() - sent,
                libc::MSG_NOSIGNAL,
            )
        };
        if n >= 0 {
            sent += n as usize;
            continue;
        }
        let e = io::Error::last_os_error();
        match e.kind() {
            io::ErrorKind::WouldBlock => break Ok(()),
            io::ErrorKind::Interrupted => continue,
            _ => break Err(e),
        }
    };
    buf.drain(..sent);
    result
}

/// An eventfd that, once written, stays readable: one wakes every epoll it is in.
pub struct StopFd(OwnedFd);

impl StopFd {
    pub fn new() -> io::Result<StopFd> {
        // SAFETY: eventfd returns a new descriptor that we own.
        let fd = check(unsafe { libc::eventfd(0, libc::EFD_CLOEXEC | libc::EFD_NONBLOCK) })?;
        // SAFETY: fd is fresh and valid.
        Ok(StopFd(unsafe { OwnedFd::from_raw_fd(fd) }))
    }

    pub fn fd(&self) -> RawFd {
        self.0.as_raw_fd()
    }

    pub fn signal(&self) {
        let one: u64 = 1;
        // SAFETY: writes 8 bytes from a live u64 to our eventfd; a full counter is the
        // only failure and leaves it readable anyway.
        unsafe { libc::write(self.fd(), (&one as *const u64).cast(), 8) };
    }
}

/// `SO_INCOMING_NAPI_ID` of a socket: the NAPI instance its last packet came through
/// (0: none yet, or the device has no NAPI).
pub fn incoming_napi_id(fd: RawFd) -> u32 {
    let mut id: u32 = 0;
    let mut len = std::mem::size_of::<u32>() as libc::socklen_t;
    // SAFETY: getsockopt writes at most `len` bytes into id.
    let rc = unsafe {
        libc::getsockopt(
            fd,
            libc::SOL_SOCKET,
            libc::SO_INCOMING_NAPI_ID,
            (&mut id as *mut u32).cast(),
            &mut len,
        )
    };
    if rc == 0 {
        id
    } else {
        0
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn modes_come_from_the_tune_profiles() {
        let bw = EpollMode::named("busy-wait").expect("shipped");
        assert!(!bw.blocking);
        assert_eq!(bw.params.map(|p| p.busy_poll_usecs), Some(1000));
        assert!(!bw.needs_irq_suspend);
        let is = EpollMode::named("irq-suspend").expect("shipped");
        assert!(is.blocking && is.needs_irq_suspend);
        assert_eq!(
            is.params
                .map(|p| (p.busy_poll_usecs, p.busy_poll_budget, p.prefer_busy_poll)),
            Some((0, 64, true))
        );
        let nc = EpollMode::named("no-coalescing").expect("plain");
        assert!(nc.blocking && nc.params.is_none());
        let err = EpollMode::named("adaptive").expect_err("unknown");
        assert!(
            err.contains("unknown mode") && err.contains("irq-suspend"),
            "{err}"
        );
    }
}
