//! The `net.core` sysctls that bound NAPI work and busy polling.

use std::path::Path;

use napilab_core::Settings;

use crate::kernel::read_trimmed;

fn read_u64(root: &Path, name: &str) -> Option<u64> {
    read_trimmed(root, &format!("proc/sys/net/core/{name}"))?
        .parse()
        .ok()
}

/// Reads `netdev_budget`, `netdev_budget_usecs`, `dev_weight`, `busy_poll` and
/// `busy_read`; a missing or unreadable one is `None`.
pub fn read_settings(root: &Path) -> Settings {
    Settings {
        netdev_budget: read_u64(root, "netdev_budget"),
        netdev_budget_usecs: read_u64(root, "netdev_budget_usecs"),
        dev_weight: read_u64(root, "dev_weight"),
        busy_poll: read_u64(root, "busy_poll"),
        busy_read: read_u64(root, "busy_read"),
    }
}
