//! The application half of the `busy-wait` and `irq-suspend` profiles (docs/studies.md IRQS-1):
//! a UDP receiver whose epoll instance busy-polls the socket's NAPI instance, with the
//! per-epoll parameters set by the `EPIOCSPARAMS` ioctl (Linux 6.9+).
//!
//! ```text
//! epoll_busy_poll --bind 10.77.0.2:9000 [--busy-poll-usecs 0] [--budget 64]
//!                 [--prefer 1] [--blocking 1] [--secs 10]
//! ```
//! `irq-suspend` profile: `--busy-poll-usecs 0 --budget 64 --prefer 1 --blocking 1`;
//! `busy-wait` profile:   `--busy-poll-usecs 1000 --budget 64 --prefer 1 --blocking 0`.
//! It prints the NAPI id the socket's packets arrive on (`SO_INCOMING_NAPI_ID`; 0 means
//! no NAPI instance, so busy polling cannot work) and the packets received.

use std::io;
use std::net::{SocketAddr, UdpSocket};
use std::os::fd::AsRawFd;
use std::time::{Duration, Instant};

struct Options {
    bind: SocketAddr,
    busy_poll_usecs: u32,
    budget: u16,
    prefer: bool,
    blocking: bool,
    secs: u64,
}

fn parse() -> Result<Options, String> {
    let mut o = Options {
        bind: "0.0.0.0:9000".parse().map_err(|e| format!("{e}"))?,
        busy_poll_usecs: 0,
        budget: 64,
        prefer: true,
        blocking: true,
        secs: 10,
    };
    let args: Vec<String> = std::env::args().skip(1).collect();
    let mut i = 0;
    while i < args.len() {
        let flag = args[i].as_str();
        if flag == "--help" || flag == "-h" {
            return Err(String::new());
        }
        let v = args
            .get(i + 1)
            .ok_or_else(|| format!("{flag} needs a value"))?;
        let bad = |e: &dyn std::fmt::Display| format!("{flag} {v}: {e}");
        match flag {
            "--bind" => o.bind = v.parse().map_err(|e| bad(&e))?,
            "--busy-poll-usecs" => o.busy_poll_usecs = v.parse().map_err(|e| bad(&e))?,
            "--budget" => o.budget = v.parse().map_err(|e| bad(&e))?,
            "--prefer" => o.prefer = v != "0",
            "--blocking" => o.blocking = v != "0",
            "--secs" => o.secs = v.parse().map_err(|e| bad(&e))?,
            other => return Err(format!("unknown option {other}")),
        }
        i += 2;
    }
    Ok(o)
}

fn check(rc: libc::c_int, what: &str) -> io::Result<libc::c_int> {
    if rc < 0 {
        let e = io::Error::last_os_error();
        return Err(io::Error::new(e.kind(), format!("{what}: {e}")));
    }
    Ok(rc)
}

fn main() -> io::Result<()> {
    let o = match parse() {
        Ok(o) => o,
        Err(e) => {
            if !e.is_empty() {
                eprintln!("epoll_busy_poll: {e}");
            }
            eprintln!("usage: epoll_busy_poll --bind ADDR:PORT [--busy-poll-usecs N] [--budget N] [--prefer 0|1] [--blocking 0|1] [--secs N]");
            std::process::exit(2);
        }
    };
    let sock = UdpSocket::bind(o.bind)?;
    sock.set_nonblocking(true)?;
    // SAFETY: plain epoll syscalls on descriptors this process owns; the structs
    // passed live across each call.
    let ep = check(
        unsafe { libc::epoll_create1(libc::EPOLL_CLOEXEC) },
        "epoll_create1",
    )?;
    let mut ev = libc::epoll_event {
        events: libc::EPOLLIN as u32,
        u64: 0,
    };
    check(
        unsafe { libc::epoll_ctl(ep, libc::EPOLL_CTL_ADD, sock.as_raw_fd(), &mut ev) },
        "epoll_ctl",
    )?;
    let params = libc::epoll_params {
        busy_poll_usecs: o.busy_poll_usecs,
        busy_poll_budget: o.budget,
        prefer_busy_poll: u8::from(o.prefer),
        __pad: 0,
    };
    // A budget above net.core.busy_poll_budget limits needs CAP_NET_ADMIN (above 8 on
    // some kernels); the kernel says EPERM then.
    check(
        unsafe { libc::ioctl(ep, libc::EPIOCSPARAMS, &params) },
        "ioctl(EPIOCSPARAMS) (Linux 6.9+)",
    )?;
    println!(
        "epoll busy poll: busy_poll_usecs={} budget={} prefer_busy_poll={} {} epoll_wait",
        o.busy_poll_usecs,
        o.budget,
        u8::from(o.prefer),
        if o.blocking {
            "blocking"
        } else {
            "non-blocking"
        }
    );
    let timeout = if o.blocking { 100 } else { 0 };
    let deadline = Instant::now() + Duration::from_secs(o.secs);
    let mut events = [libc::epoll_event { events: 0, u64: 0 }; 16];
    let mut buf = [0u8; 2048];
    let (mut packets, mut napi_id) = (0u64, 0u32);
    while Instant::now() < deadline {
        let n = unsafe { libc::epoll_wait(ep, events.as_mut_ptr(), 16, timeout) };
        if n < 0 {
            let e = io::Error::last_os_error();
            if e.kind() == io::ErrorKind::Interrupted {
                continue;
            }
            return Err(e);
        }
        loop {
            match sock.recv(&mut buf) {
                Ok(_) => packets += 1,
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => break,
                Err(e) => return Err(e),
            }
        }
        if napi_id == 0 && packets > 0 {
            let mut id: u32 = 0;
            let mut len = std::mem::size_of::<u32>() as libc::socklen_t;
            unsafe {
                libc::getsockopt(
                    sock.as_raw_fd(),
                    libc::SOL_SOCKET,
                    libc::SO_INCOMING_NAPI_ID,
                    (&mut id as *mut u32).cast(),
                    &mut len,
                )
            };
            napi_id = id;
        }
    }
    unsafe { libc::close(ep) };
    println!("received {packets} packets; SO_INCOMING_NAPI_ID {napi_id}");
    Ok(())
}
