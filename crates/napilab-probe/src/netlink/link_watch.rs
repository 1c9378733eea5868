//! Link counters every sample without re-describing every link.
//!
//! An `RTM_GETLINK` dump makes the kernel fill each device's whole description (every
//! address family's settings, link info, queue counts, ...); profiled on the sampler it
//! was its largest netlink cost. The per-second counters come as well from
//! `RTM_GETSTATS` asking only for `IFLA_STATS_LINK_64` (the same
//! `rtnl_link_stats64`), and the rest of [`LinkStats`] (name, MTU, operational state,
//! kind, queue counts) changes only together with an `RTM_NEWLINK` / `RTM_DELLINK`
//! notification. So a socket subscribed to `RTNLGRP_LINK` says when to describe the
//! links again; in between, the last description is reused with fresh counters.

use std::os::fd::{AsRawFd as _, FromRawFd as _, OwnedFd};

use netlink_bindings::rt_link::RtnlLinkStats64;

use super::{rtnl, LinkStats};

/// At most this many notifications are drained per check: a flood of link changes
/// cannot keep the sampler in the loop (the rest are drained next time, and the links
/// are described again anyway).
const MAX_DRAINED: usize = 4096;

/// A non-blocking socket subscribed to link notifications (`RTNLGRP_LINK`) in the
/// network namespace of the thread that opened it.
pub(crate) struct LinkWatch {
    fd: OwnedFd,
}

impl LinkWatch {
    pub(crate) fn open() -> std::io::Result<LinkWatch> {
        // SAFETY: plain socket(2); the result is checked before use.
        let raw = unsafe {
            libc::socket(
                libc::AF_NETLINK,
                libc::SOCK_RAW | libc::SOCK_NONBLOCK | libc::SOCK_CLOEXEC,
                libc::NETLINK_ROUTE,
            )
        };
        if raw < 0 {
            return Err(std::io::Error::last_os_error());
        }
        // SAFETY: the kernel just returned this fd, owned by nobody else.
        let fd = unsafe { OwnedFd::from_raw_fd(raw) };
        // SAFETY: sockaddr_nl is plain data; all-zero is a valid value.
        let mut addr: libc::sockaddr_nl = unsafe { std::mem::zeroed() };
        addr.nl_family = libc::AF_NETLINK as libc::sa_family_t;
        addr.nl_groups = libc::RTMGRP_LINK as u32;
        // SAFETY: addr is a valid sockaddr_nl and its size is passed.
        let rc = unsafe {
            libc::bind(
                fd.as_raw_fd(),
                (&raw const addr).cast(),
                std::mem::size_of::<libc::sockaddr_nl>() as libc::socklen_t,
            )
        };
        if rc < 0 {
            return Err(std::io::Error::last_os_error());
        }
        Ok(LinkWatch { fd })
    }

    /// Whether a link changed since the last call: drains the queued notifications.
    /// A full queue (`ENOBUFS`: notifications were lost) or any other error counts as
    /// a change, so the caller describes the links again rather than trust the cache.
    pub(crate) fn changed(&self) -> bool {
        let mut buf = [0u8; 4096];
        let mut changed = false;
        for _ in 0..MAX_DRAINED {
            // SAFETY: buf is writable for its length; MSG_TRUNC only changes the
            // returned length of an oversized message, which is discarded anyway.
            let n = unsafe {
                libc::recv(
                    self.fd.as_raw_fd(),
                    buf.as_mut_ptr().cast(),
                    buf.len(),
                    libc::MSG_DONTWAIT | libc::MSG_TRUNC,
                )
            };
            if n > 0 {
                changed = true;
                continue;
            }
            if n == 0 {
                return changed;
            }
            match std::io::Error::last_os_error().raw_os_error() {
                Some(libc::EAGAIN) => return changed,
                Some(libc::EINTR) => {}
                // Overflowed: something changed; keep draining what is queued.
                Some(libc::ENOBUFS) => changed = true,
                _ => return true,
            }
        }
        true
    }
}

/// Fresh counters `(ifindex, counters)` applied to the last description of the links.
/// `None` when the two do not list the same devices (one appeared or went between the
/// notification check and the dump): the caller describes the links again.
pub(crate) fn with_counters(
    described: &[LinkStats],
    counters: &[(u32, RtnlLinkStats64)],
) -> Option<Vec<LinkStats>> {
    if described.len() != counters.len() {
        return None;
    }
    described
        .iter()
        .enumerate()
        .map(|(index, link)| {
            // Both dumps walk the namespace's devices in the same order, so the
            // counters are usually at the same position; a search covers any other.
            let (_, fresh) =
                crate::near::find_near(counters, index, |(ifindex, _)| *ifindex == link.ifindex)?;
            let mut updated = link.clone();
            rtnl::set_counters64(&mut updated, fresh);
            Some(updated)
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn link(ifindex: u32, name: &str, rx_packets: u64) -> LinkStats {
        LinkStats {
            ifindex,
            name: name.into(),
            mtu: Some(1500),
            operstate: Some("up".into()),
            rx_packets,
            tx_bytes: rx_packets * 100,
            ..LinkStats::default()
        }
    }

    fn counters(rx_packets: u64) -> RtnlLinkStats64 {
        RtnlLinkStats64 {
            rx_packets,
            tx_bytes: rx_packets * 100,
            ..RtnlLinkStats64::default()
        }
    }

    #[test]
    fn counters_are_applied_to_the_described_links() {
        let described = [link(1, "lo", 5), link(7, "veth0", 10)];
        let counters = [(7, counters(99)), (1, counters(6))];
        let merged = with_counters(&described, &counters).expect("same devices");
        assert_eq!(merged, vec![link(1, "lo", 6), link(7, "veth0", 99)]);
    }

    #[test]
    fn a_device_that_came_or_went_asks_for_a_new_description() {
        let described = [link(1, "lo", 5), link(7, "veth0", 10)];
        assert_eq!(with_counters(&described, &[(1, counters(6))]), None);
        let replaced = [(1, counters(6)), (8, counters(1))];
        assert_eq!(with_counters(&described, &replaced), None);
    }
}
