//! One module per kind of setting, each behind the [`Knob`] trait, so that plan, apply
//! and revert share the same read, validate and write code.

mod cpuidle;
mod ethtool;
mod irq;
mod napi;
mod qdisc;
mod sysctl;
mod sysfs;
mod thread;

pub use napi::{busy_poll_support, BUSY_POLL_SINCE, THREADED_BUSY_POLL};
pub use thread::parse_sched;

use std::path::{Path, PathBuf};

use napilab_probe::netlink::{LinkStats, NapiEntry, Netlink, QueueType};

use crate::model::{Key, Kind, Value};

/// Why a setting could not be read, checked or written.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum KnobError {
    /// The device, driver or kernel cannot do it; a profile may skip such items.
    #[error("{0}")]
    Unsupported(String),
    /// The object does not exist yet because an earlier change creates it (a NAPI
    /// kthread before threaded mode is switched on).
    #[error("{0}")]
    NotYet(String),
    /// No such device, queue or instance (or the device was recreated).
    #[error("{0}")]
    Gone(String),
    /// The value is outside what the kernel accepts.
    #[error("{0}")]
    Invalid(String),
    /// The kernel refused or the write failed.
    #[error("{0}")]
    Failed(String),
}

pub type KnobResult<T> = Result<T, KnobError>;

/// Read the current value, check a new one against kernel limits, write a value
/// (restoring is writing the old value).
pub trait Knob {
    fn read(&self, ctx: &mut Ctx, key: &Key) -> KnobResult<Value>;
    fn validate(&self, ctx: &mut Ctx, key: &Key, value: &Value) -> KnobResult<()>;
    fn write(&self, ctx: &mut Ctx, key: &Key, value: &Value) -> KnobResult<()>;
    /// Puts back a value read earlier by [`Knob::read`].
    fn restore(&self, ctx: &mut Ctx, key: &Key, old: &Value) -> KnobResult<()> {
        self.write(ctx, key, old)
    }
}

/// The knob for a kind.
pub fn knob(kind: Kind) -> &'static dyn Knob {
    match kind {
        Kind::Sysctl => &sysctl::Sysctl,
        Kind::Cpuidle => &cpuidle::Cpuidle,
        Kind::Device => &sysfs::DeviceAttr,
        Kind::RxQueue | Kind::TxQueue => &sysfs::QueueAttr,
        Kind::Napi => &napi::NapiAttr,
        Kind::Thread => &thread::NapiThread,
        Kind::Irq => &irq::IrqAffinity,
        Kind::Coalesce | Kind::Rings | Kind::Channels => &ethtool::EthtoolParam,
        Kind::Feature => &ethtool::Feature,
        Kind::Qdisc => &qdisc::RootQdisc,
    }
}

/// The attributes each kind accepts (profiles are checked against this list).
pub fn known_attrs(kind: Kind) -> &'static [&'static str] {
    match kind {
        Kind::Sysctl => sysctl::ATTRS,
        Kind::Cpuidle => cpuidle::ATTRS,
        Kind::Device => sysfs::DEVICE_ATTRS,
        Kind::RxQueue => sysfs::RX_ATTRS,
        Kind::TxQueue => sysfs::TX_ATTRS,
        Kind::Napi => napi::ATTRS,
        Kind::Thread => thread::ATTRS,
        Kind::Irq => irq::ATTRS,
        Kind::Coalesce => ethtool::COALESCE_ATTRS,
        Kind::Rings => ethtool::RINGS_ATTRS,
        Kind::Channels => ethtool::CHANNELS_ATTRS,
        Kind::Feature => ethtool::FEATURE_ATTRS,
        Kind::Qdisc => qdisc::ATTRS,
    }
}

/// Handles shared by the knobs: the file-system root (`/`, or a fake tree in tests),
/// the probe's netlink reader and a netlink socket for writes. Sockets belong to the
/// network namespace of the thread that first uses them.
pub struct Ctx {
    pub root: PathBuf,
    pub(crate) nl: Netlink,
    pub(crate) sock: netlink_socket2::NetlinkSocket,
    pub(crate) ioctl_fd: Option<std::os::fd::OwnedFd>,
}

impl std::fmt::Debug for Ctx {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Ctx").field("root", &self.root).finish()
    }
}

impl Ctx {
    pub fn new(root: &Path) -> Ctx {
        Ctx {
            root: root.to_path_buf(),
            nl: Netlink::new(),
            sock: netlink_socket2::NetlinkSocket::new(),
            ioctl_fd: None,
        }
    }

    pub(crate) fn path(&self, rel: &str) -> PathBuf {
        self.root.join(rel)
    }

    pub(crate) fn read_file(&self, rel: &str) -> Result<String, std::io::Error> {
        std::fs::read_to_string(self.path(rel)).map(|s| s.trim().to_string())
    }

    pub(crate) fn write_file(&self, rel: &str, text: &str) -> KnobResult<()> {
        std::fs::write(self.path(rel), text)
            .map_err(|e| KnobError::Failed(format!("writing {text:?} to /{rel}: {e}")))
    }

    /// Online CPUs (for validating CPU sets).
    pub fn online_cpus(&self) -> Vec<u32> {
        self.read_file("sys/devices/system/cpu/online")
            .ok()
            .and_then(|s| crate::model::parse_cpus(&s).ok())
            .unwrap_or_default()
    }

    pub fn links(&mut self) -> KnobResult<Vec<LinkStats>> {
        self.nl
            .links()
            .map_err(|e| KnobError::Failed(format!("listing devices: {e}")))
    }

    /// The device a key names; `Gone` when absent or recreated (other ifindex).
    pub fn device(&mut self, key: &Key) -> KnobResult<LinkStats> {
        let name = key
            .dev
            .as_deref()
            .ok_or_else(|| KnobError::Gone(format!("{key}: no device named")))?;
        let link = self
            .links()?
            .into_iter()
            .find(|l| l.name == name)
            .ok_or_else(|| {
                KnobError::Gone(format!("no device {name} in this network namespace"))
            })?;
        if let Some(ifindex) = key.ifindex {
            if ifindex != link.ifindex {
                return Err(KnobError::Gone(format!(
                    "device {name} was recreated (ifindex {ifindex} then, {} now); its settings went with the old device",
                    link.ifindex
                )));
            }
        }
        Ok(link)
    }

    /// Driver name for "not supported by <dev> (<driver>)" messages.
    pub fn driver(&mut self, key: &Key) -> String {
        let dev = key.dev();
        let from_link =
            std::fs::read_link(self.path(&format!("sys/class/net/{dev}/device/driver")))
                .ok()
                .and_then(|p| p.file_name().map(|n| n.to_string_lossy().into_owned()));
        from_link
            .or_else(|| {
                self.nl
                    .links()
                    .ok()?
                    .into_iter()
                    .find(|l| l.name == dev)?
                    .kind
            })
            .unwrap_or_else(|| "driver unknown".into())
    }

    pub(crate) fn unsupported(&mut self, key: &Key, what: &str) -> KnobError {
        let driver = self.driver(key);
        KnobError::Unsupported(format!("{what} not supported by {} ({driver})", key.dev()))
    }

    /// RX queue indexes of a device, from sysfs.
    pub fn rx_queues(&self, dev: &str) -> Vec<u32> {
        queue_indexes(&self.path(&format!("sys/class/net/{dev}/queues")), "rx-")
    }

    pub fn tx_queues(&self, dev: &str) -> Vec<u32> {
        queue_indexes(&self.path(&format!("sys/class/net/{dev}/queues")), "tx-")
    }

    /// The NAPI instance serving RX queue `key.queue` of `key.dev`, found afresh each
    /// time (ids change when GRO is toggled or the link flaps).
    ///
    /// From netdev `queue-get` when the driver links queues to instances; otherwise
    /// (veth) when the device has exactly one instance per RX queue, the instances in
    /// id order are matched to the queues in index order (drivers add them in queue
    /// order and ids are handed out increasingly).
    pub fn napi(&mut self, key: &Key) -> KnobResult<NapiEntry> {
        let link = self.device(key)?;
        let queue = key.queue.unwrap_or(0);
        let napis = self
            .nl
            .napis()
            .map_err(|e| KnobError::Unsupported(format!("NAPI instances cannot be listed: {e}")))?;
        let mut mine: Vec<NapiEntry> = napis
            .into_iter()
            .filter(|n| n.ifindex == link.ifindex)
            .collect();
        let rx = self.rx_queues(&link.name);
        if !rx.contains(&queue) {
            return Err(KnobError::Gone(format!(
                "{} has no RX queue {queue} (it has {})",
                link.name,
                rx.len()
            )));
        }
        if mine.is_empty() {
            return Err(KnobError::Unsupported(format!(
                "{} has no NAPI instance now (veth has one only while GRO or XDP is on)",
                link.name
            )));
        }
        if let Ok(queues) = self.nl.queues() {
            let linked = queues
                .iter()
                .find(|q| q.ifindex == link.ifindex && q.kind == QueueType::Rx && q.id == queue);
            if let Some(id) = linked.and_then(|q| q.napi_id) {
                if let Some(n) = mine.iter().find(|n| n.id == id) {
                    return Ok(n.clone());
                }
            }
        }
        mine.sort_by_key(|n| n.id);
        if mine.len() == rx.len() {
            let pos = rx.iter().position(|q| *q == queue).unwrap_or(0);
            return Ok(mine.swap_remove(pos));
        }
        Err(KnobError::Unsupported(format!(
            "cannot tell which of the {} NAPI instances of {} serves rx-{queue} (the driver does not link queues to instances)",
            mine.len(),
            link.name
        )))
    }
}

fn queue_indexes(dir: &Path, prefix: &str) -> Vec<u32> {
    let mut v: Vec<u32> = std::fs::read_dir(dir)
        .into_iter()
        .flatten()
        .flatten()
        .filter_map(|e| e.file_name().to_str()?.strip_prefix(prefix)?.parse().ok())
        .collect();
    v.sort_unstable();
    v
}

/// Number from a value, or `Invalid`.
pub(crate) fn num(key: &Key, value: &Value) -> KnobResult<u64> {
    match value {
        Value::Num(n) => Ok(*n),
        other => Err(KnobError::Invalid(format!(
            "{key}: expected a number, got {other}"
        ))),
    }
}

/// A number from the file `rel` (a sysctl, a module parameter), named `name` in errors;
/// a missing file is unsupported here, for the reason `missing` gives.
pub(crate) fn read_num_file(
    ctx: &Ctx,
    rel: &str,
    name: &str,
    missing: impl FnOnce() -> String,
) -> KnobResult<Value> {
    let text = ctx.read_file(rel).map_err(|e| {
        if e.kind() == std::io::ErrorKind::NotFound {
            KnobError::Unsupported(missing())
        } else {
            KnobError::Failed(format!("reading {name}: {e}"))
        }
    })?;
    text.parse()
        .map(Value::Num)
        .map_err(|_| KnobError::Failed(format!("{name} reads {text:?}")))
}

pub(crate) fn num_in(key: &Key, value: &Value, min: u64, max: u64) -> KnobResult<u64> {
    let n = num(key, value)?;
    if n < min || n > max {
        return Err(KnobError::Invalid(format!(
            "{key}: {n} is outside the kernel's range {min}..={max}"
        )));
    }
    Ok(n)
}

pub(crate) fn cpus(ctx: &Ctx, key: &Key, value: &Value, allow_empty: bool) -> KnobResult<Vec<u32>> {
    let Value::Cpus(cpus) = value else {
        return Err(KnobError::Invalid(format!(
            "{key}: expected a CPU list, got {value}"
        )));
    };
    if cpus.is_empty() && !allow_empty {
        return Err(KnobError::Invalid(format!(
            "{key}: the CPU set must not be empty"
        )));
    }
    let online = ctx.online_cpus();
    if let Some(bad) = cpus
        .iter()
        .find(|c| !online.is_empty() && !online.contains(c))
    {
        return Err(KnobError::Invalid(format!(
            "{key}: CPU {bad} is not online (online: {})",
            crate::model::cpu_list(&online)
        )));
    }
    Ok(cpus.clone())
}

pub(crate) fn io_unsupported(e: &std::io::Error) -> bool {
    matches!(
        e.raw_os_error(),
        Some(libc::ENOENT) | Some(libc::EOPNOTSUPP) | Some(libc::EINVAL)
    )
}

/// Sends a netlink "do" request that answers with an ACK only.
pub(crate) fn send_ack<R: netlink_bindings::traits::NetlinkRequest>(
    ctx: &mut Ctx,
    req: &R,
    what: &str,
) -> Result<(), (Option<i32>, String)> {
    let mut reply = ctx
        .sock
        .request(req)
        .map_err(|e| (e.raw_os_error(), format!("{what}: {e}")))?;
    reply.recv_ack().map_err(|e| {
        let errno = e.as_io_error().raw_os_error();
        (errno, format!("{what}: {e}"))
    })
}
