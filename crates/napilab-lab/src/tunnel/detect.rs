//! Which tunnel endpoint the vpn topology would use on this kernel: the kernel's
//! WireGuard when `ip link add <name> type wireguard` works, napilab's user-space
//! endpoint otherwise (docs/kernel.md#tun-napi). The check runs in a scratch namespace
//! of its own, deleted afterwards, so nothing on the host changes.

use serde::Serialize;

use crate::netns;

/// The endpoint a vpn run would use.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum EndpointKind {
    KernelWireguard,
    UserSpace,
}

#[derive(Clone, Debug, Serialize)]
pub struct Detection {
    pub endpoint: EndpointKind,
    /// Why `ip link add ... type wireguard` failed (None: it worked).
    pub wireguard_error: Option<String>,
    /// Why the user-space endpoint cannot run here (None: /dev/net/tun is present).
    pub tun_error: Option<String>,
}

impl Detection {
    /// One line for a person.
    pub fn summary(&self) -> String {
        match (&self.endpoint, &self.wireguard_error, &self.tun_error) {
            (EndpointKind::KernelWireguard, _, _) => {
                "kernel WireGuard is available: the vpn topology uses it".into()
            }
            (EndpointKind::UserSpace, Some(wg), None) => format!(
                "kernel WireGuard is not available ({wg}): the vpn topology uses napilab's \
                 user-space endpoint (UDP, ChaCha20-Poly1305 workers, IFF_NAPI TUN queues)"
            ),
            (EndpointKind::UserSpace, Some(wg), Some(tun)) => format!(
                "neither endpoint can run: kernel WireGuard is not available ({wg}) and the \
                 user-space endpoint needs TUN ({tun})"
            ),
            (EndpointKind::UserSpace, None, _) => {
                "the user-space endpoint was chosen by the caller".into()
            }
        }
    }
}

/// /dev/net/tun is there (the user-space endpoint's only kernel need besides
/// `IFF_NAPI`, which opening the device checks).
pub fn tun_available() -> Result<(), String> {
    if std::path::Path::new("/dev/net/tun").exists() {
        Ok(())
    } else {
        Err("/dev/net/tun is missing (CONFIG_TUN, module tun)".into())
    }
}

/// Tries `ip link add nlwgcheck0 type wireguard` in a scratch namespace
/// `napilab-wgcheck-<pid>-<nanos>` (root), and removes the namespace.
pub fn detect() -> Result<Detection, String> {
    let ns = format!(
        "napilab-wgcheck-{}-{}",
        std::process::id(),
        netns::mono_ns() % 1_000_000
    );
    netns::cmd("ip", &["netns", "add", &ns]).map_err(|e| {
        format!("cannot create the scratch namespace {ns} to look for WireGuard: {e} (needs root)")
    })?;
    let wireguard = netns::cmd(
        "ip",
        &["-n", &ns, "link", "add", "nlwgcheck0", "type", "wireguard"],
    )
    .map(drop)
    .map_err(|e| e.to_string());
    // Deleting the namespace deletes the link with it.
    let deleted = netns::cmd("ip", &["netns", "del", &ns]);
    if let Err(e) = deleted {
        return Err(format!(
            "could not delete the scratch namespace {ns}: {e}; remove it with `ip netns del {ns}`"
        ));
    }
    let endpoint = if wireguard.is_ok() {
        EndpointKind::KernelWireguard
    } else {
        EndpointKind::UserSpace
    };
    Ok(Detection {
        endpoint,
        wireguard_error: wireguard.err(),
        tun_error: tun_available().err(),
    })
}
