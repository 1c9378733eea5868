//! Traffic for bench/ingress-priority.sh: a UDP echo server, a paced real-time prober
//! that measures round-trip latency percentiles, and a best-effort UDP flood.
//!
//! ```text
//! rt_latency echo  --bind 10.78.0.2:7000 --secs 20
//! rt_latency probe --to 10.78.0.2:7000 --rate 1000 --secs 10
//!     prints: sent=N received=N p50_us=.. p99_us=.. p999_us=.. max_us=..
//! rt_latency flood --to 10.78.0.2:9 --secs 10 [--size 64]
//! ```
//! Run it only between namespaces you created: the flood sends as fast as it can.

use std::io;
use std::net::{SocketAddr, UdpSocket};
use std::time::{Duration, Instant};

fn arg(name: &str) -> Option<String> {
    let args: Vec<String> = std::env::args().collect();
    args.iter()
        .position(|a| a == name)
        .and_then(|i| args.get(i + 1).cloned())
}

fn num(name: &str, default: u64) -> u64 {
    arg(name).and_then(|v| v.parse().ok()).unwrap_or(default)
}

fn addr(name: &str) -> io::Result<SocketAddr> {
    arg(name)
        .ok_or_else(|| io::Error::other(format!("{name} ADDR:PORT is required")))?
        .parse()
        .map_err(|e| io::Error::other(format!("{name}: {e}")))
}

fn echo() -> io::Result<()> {
    let sock = UdpSocket::bind(addr("--bind")?)?;
    sock.set_read_timeout(Some(Duration::from_millis(200)))?;
    let deadline = Instant::now() + Duration::from_secs(num("--secs", 30));
    let mut buf = [0u8; 2048];
    while Instant::now() < deadline {
        match sock.recv_from(&mut buf) {
            Ok((n, from)) => {
                let _ = sock.send_to(&buf[..n], from);
            }
            Err(e)
                if e.kind() == io::ErrorKind::WouldBlock || e.kind() == io::ErrorKind::TimedOut => {
            }
            Err(e) => return Err(e),
        }
    }
    Ok(())
}

fn percentile(sorted: &[u64], p: f64) -> u64 {
    if sorted.is_empty() {
        return 0;
    }
    let i = ((sorted.len() as f64 - 1.0) * p).round() as usize;
    sorted[i.min(sorted.len() - 1)]
}

fn probe() -> io::Result<()> {
    let to = addr("--to")?;
    let rate = num("--rate", 1000).max(1);
    let secs = num("--secs", 10);
    let sock = UdpSocket::bind("0.0.0.0:0")?;
    sock.connect(to)?;
    let start = Instant::now();
    let period = Duration::from_nanos(1_000_000_000 / rate);
    let total = rate * secs;
    let mut rtts_ns: Vec<u64> = Vec::with_capacity(total as usize);
    let mut buf = [0u8; 64];
    let mut sent = 0u64;
    // Sleeps in recv (SO_RCVTIMEO) until the next send is due: the prober runs at a
    // real-time priority on the measured CPU and must not spin there.
    let mut wait_until = |until: Instant, rtts: &mut Vec<u64>| -> io::Result<()> {
        loop {
            let left = until.saturating_duration_since(Instant::now());
            if left < Duration::from_micros(1) {
                return Ok(());
            }
            sock.set_read_timeout(Some(left))?;
            match sock.recv(&mut buf) {
                Ok(n) if n >= 8 => {
                    let mut b = [0u8; 8];
                    b.copy_from_slice(&buf[..8]);
                    let t = u64::from_ne_bytes(b);
                    let now = start.elapsed().as_nanos() as u64;
                    rtts.push(now.saturating_sub(t));
                }
                Ok(_) => {}
                Err(e)
                    if e.kind() == io::ErrorKind::WouldBlock
                        || e.kind() == io::ErrorKind::TimedOut => {}
                // ECONNREFUSED from an ICMP error: keep going.
                Err(_) => {}
            }
        }
    };
    while sent < total {
        let due = start + period * u32::try_from(sent).unwrap_or(u32::MAX);
        wait_until(due, &mut rtts_ns)?;
        let t = start.elapsed().as_nanos() as u64;
        let mut msg = [0u8; 64];
        msg[..8].copy_from_slice(&t.to_ne_bytes());
        let _ = sock.send(&msg);
        sent += 1;
    }
    // Late echoes: wait up to 200 ms.
    wait_until(Instant::now() + Duration::from_millis(200), &mut rtts_ns)?;
    rtts_ns.sort_unstable();
    let us = |ns: u64| ns as f64 / 1000.0;
    println!(
        "sent={sent} received={} p50_us={:.1} p99_us={:.1} p999_us={:.1} max_us={:.1}",
        rtts_ns.len(),
        us(percentile(&rtts_ns, 0.50)),
        us(percentile(&rtts_ns, 0.99)),
        us(percentile(&rtts_ns, 0.999)),
        us(rtts_ns.last().copied().unwrap_or(0)),
    );
    Ok(())
}

fn flood() -> io::Result<()> {
    let to = addr("--to")?;
    let size = num("--size", 64).clamp(1, 1400) as usize;
    let sock = UdpSocket::bind("0.0.0.0:0")?;
    sock.connect(to)?;
    let deadline = Instant::now() + Duration::from_secs(num("--secs", 10));
    let payload = vec![0u8; size];
    let mut sent = 0u64;
    while Instant::now() < deadline {
        for _ in 0..256 {
            if sock.send(&payload).is_ok() {
                sent += 1;
            }
        }
    }
    eprintln!("flood: sent {sent} packets");
    Ok(())
}

fn main() -> io::Result<()> {
    match std::env::args().nth(1).as_deref() {
        Some("echo") => echo(),
        Some("probe") => probe(),
        Some("flood") => flood(),
        _ => {
            eprintln!("usage: rt_latency echo|probe|flood ... (see the source)");
            std::process::exit(2);
        }
    }
}
