//! A multi-queue TUN device opened with `IFF_NAPI`: one file descriptor per queue, each
//! queue with its own NAPI instance. A `write()` into a queue queues the packet and
//! schedules that queue's NAPI instance on the writing thread's CPU; the poll (GRO,
//! then the stack) runs at the writer's bottom-half enable, or in the instance's
//! `napi/<dev>-<n>` kthread when the device is threaded (docs/kernel.md#tun-napi).
//!
//! The device is not persistent: it disappears when the last queue's descriptor is
//! closed, so dropping a [`TunDevice`] removes it, also when its owner panics.

use std::ffi::CString;
use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};

use crate::netns;

/// The kernel's limit on queues of one TUN device (`MAX_TAP_QUEUES` in
/// drivers/net/tun.c).
pub const MAX_QUEUES: usize = 256;

/// `_IOW('T', 202, int)` from linux/if_tun.h (not in the libc crate).
const TUNSETIFF: libc::c_ulong = 0x4004_54ca;

/// `struct ifreq` as TUNSETIFF reads it: the name, then the flags (the union's other
/// members are unused here; the struct is 40 bytes on 64-bit Linux).
#[repr(C)]
struct IfReq {
    name: [libc::c_char; libc::IFNAMSIZ],
    flags: libc::c_short,
    _pad: [u8; 22],
}

/// An open multi-queue TUN device.
pub struct TunDevice {
    name: String,
    queues: Vec<OwnedFd>,
}

impl TunDevice {
    /// Creates TUN device `name` with `queues` queues, each opened with `IFF_NAPI`, in
    /// network namespace `ns` (None: the caller's). Only the thread that opens it enters
    /// the namespace; the descriptors work from any thread.
    pub fn open(ns: Option<&str>, name: &str, queues: usize) -> Result<TunDevice, String> {
        if queues == 0 || queues > MAX_QUEUES {
            return Err(format!(
                "{queues} TUN queues asked: a TUN device has 1 to {MAX_QUEUES} queues \
                 (the kernel's MAX_TAP_QUEUES), one per peer; use fewer peers"
            ));
        }
        if name.is_empty() || name.len() >= libc::IFNAMSIZ {
            return Err(format!(
                "TUN device name {name:?}: 1 to {} characters",
                libc::IFNAMSIZ - 1
            ));
        }
        let ns = ns.map(str::to_owned);
        let name = name.to_owned();
        std::thread::scope(|s| {
            s.spawn(|| {
                netns::enter_if(ns.as_deref())?;
                let mut fds = Vec::with_capacity(queues);
                for q in 0..queues {
                    fds.push(
                        open_queue(&name)
                            .map_err(|e| format!("TUN device {name}, queue {q}: {e}"))?,
                    );
                }
                Ok(TunDevice { name, queues: fds })
            })
            .join()
            .map_err(|_| "opening the TUN device panicked".to_string())?
        })
    }

    pub fn name(&self) -> &str {
        &self.name
    }

    pub fn queues(&self) -> usize {
        self.queues.len()
    }

    /// The descriptor of queue `q`.
    pub fn queue_fd(&self, q: usize) -> Option<RawFd> {
        self.queues.get(q).map(AsRawFd::as_raw_fd)
    }
}

/// Writes one packet into a queue; the kernel takes it whole or not at all.
pub fn write_packet(fd: RawFd, packet: &[u8]) -> io::Result<()> {
    // SAFETY: fd is an open TUN queue owned by a live TunDevice; the buffer is valid
    // for its length.
    let n = unsafe { libc::write(fd, packet.as_ptr().cast(), packet.len()) };
    if n < 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}

fn open_queue(name: &str) -> Result<OwnedFd, String> {
    let path = CString::new("/dev/net/tun").map_err(|e| e.to_string())?;
    // SAFETY: a valid NUL-terminated path; the result is checked.
    let fd = unsafe { libc::open(path.as_ptr(), libc::O_RDWR | libc::O_CLOEXEC) };
    if fd < 0 {
        let e = io::Error::last_os_error();
        return Err(match e.raw_os_error() {
            Some(libc::ENOENT) | Some(libc::ENODEV) | Some(libc::ENXIO) => format!(
                "/dev/net/tun: {e}: this kernel has no TUN driver (CONFIG_TUN, module tun) \
                 or the device node is missing (mknod /dev/net/tun c 10 200)"
            ),
            _ => format!("/dev/net/tun: {e}"),
        });
    }
    // SAFETY: fd was just opened and is owned by nobody else.
    let fd = unsafe { OwnedFd::from_raw_fd(fd) };
    // SAFETY: IfReq is plain data; all-zero is a valid value.
    let mut req: IfReq = unsafe { std::mem::zeroed() };
    for (d, s) in req.name.iter_mut().zip(name.bytes()) {
        *d = s as libc::c_char;
    }
    req.flags =
        (libc::IFF_TUN | libc::IFF_NO_PI | libc::IFF_MULTI_QUEUE | libc::IFF_NAPI) as libc::c_short;
    // SAFETY: TUNSETIFF reads and writes a struct ifreq, which IfReq lays out.
    let rc = unsafe { libc::ioctl(fd.as_raw_fd(), TUNSETIFF, &mut req) };
    if rc < 0 {
        let e = io::Error::last_os_error();
        return Err(match e.raw_os_error() {
            Some(libc::EPERM) => {
                format!("TUNSETIFF with IFF_NAPI: {e}: IFF_NAPI needs CAP_NET_ADMIN (run as root)")
            }
            Some(libc::EINVAL) => format!(
                "TUNSETIFF IFF_TUN|IFF_MULTI_QUEUE|IFF_NAPI: {e}: this kernel refuses the \
                 flags (IFF_NAPI appeared in Linux 4.15), or a device of that name exists \
                 with other flags"
            ),
            Some(libc::EBUSY) => format!(
                "TUNSETIFF: {e}: a non-multi-queue device of that name exists; choose another name"
            ),
            _ => format!("TUNSETIFF: {e}"),
        });
    }
    Ok(fd)
}
