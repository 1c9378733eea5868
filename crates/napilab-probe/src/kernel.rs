//! Facts about the running kernel that change how its numbers must be read: HZ (tick
//! sampling granularity and softirq time limits) and the CPU-accounting mode.

use std::io::Read;
use std::path::Path;
use std::time::{Duration, Instant};

use napilab_core::{CpuAccounting, Hz};

/// Whether this process runs as root (effective uid 0): what the netlink dumps, the
/// BPF tiers and the lab need, and what their "needs root" messages check.
pub fn is_root() -> bool {
    // SAFETY: geteuid has no preconditions and cannot fail.
    unsafe { libc::geteuid() == 0 }
}

/// What the kernel's build configuration says, from `/proc/config.gz` or
/// `/boot/config-<release>`.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct KernelConfig {
    pub hz: Option<u32>,
    pub tick_accounting: bool,
    pub irq_time_accounting: bool,
    pub virt_accounting: bool,
    /// Which file it came from, for messages.
    pub path: String,
}

/// Parses the `CONFIG_*` lines napilab cares about from a kernel config text.
pub fn parse_kernel_config(text: &str, path: &str) -> KernelConfig {
    let mut config = KernelConfig {
        path: path.to_string(),
        ..KernelConfig::default()
    };
    for line in text.lines() {
        let Some((key, value)) = line.split_once('=') else {
            continue;
        };
        let enabled = value == "y";
        match key {
            "CONFIG_HZ" => config.hz = value.trim().parse().ok(),
            "CONFIG_TICK_CPU_ACCOUNTING" => config.tick_accounting = enabled,
            "CONFIG_IRQ_TIME_ACCOUNTING" => config.irq_time_accounting = enabled,
            "CONFIG_VIRT_CPU_ACCOUNTING_GEN" => config.virt_accounting = enabled,
            _ => {}
        }
    }
    config
}

/// A kernel config's text and the file it came from (as the host names it).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct KernelConfigText {
    pub text: String,
    pub path: String,
}

/// Reads the kernel config text under `root`: `proc/config.gz` first (the running
/// kernel's own), then `boot/config-<release>`.
pub fn read_kernel_config_text(root: &Path, release: Option<&str>) -> Option<KernelConfigText> {
    let gz = root.join("proc/config.gz");
    if let Ok(file) = std::fs::File::open(&gz) {
        let mut text = String::new();
        if flate2::read::GzDecoder::new(file)
            .read_to_string(&mut text)
            .is_ok()
        {
            return Some(KernelConfigText {
                text,
                path: "/proc/config.gz".into(),
            });
        }
    }
    let release = release?;
    let rel = format!("boot/config-{release}");
    let text = std::fs::read_to_string(root.join(&rel)).ok()?;
    Some(KernelConfigText {
        text,
        path: format!("/{rel}"),
    })
}

/// Reads and parses the kernel config under `root` ([`read_kernel_config_text`]).
pub fn read_kernel_config(root: &Path, release: Option<&str>) -> Option<KernelConfig> {
    read_kernel_config_text(root, release).map(|c| parse_kernel_config(&c.text, &c.path))
}

impl KernelConfig {
    pub fn accounting(&self) -> CpuAccounting {
        if self.virt_accounting {
            CpuAccounting::Virtual
        } else if self.irq_time_accounting {
            CpuAccounting::IrqTime
        } else if self.tick_accounting {
            CpuAccounting::TickSampled
        } else {
            CpuAccounting::Unknown
        }
    }
}

/// Reads the `jiffies:` line of /proc/timer_list (root only).
fn read_jiffies(root: &Path) -> Option<u64> {
    let text = std::fs::read_to_string(root.join("proc/timer_list")).ok()?;
    text.lines()
        .find_map(|l| l.trim().strip_prefix("jiffies:"))
        .and_then(|v| v.trim().parse().ok())
}

/// Measures HZ by counting jiffies over `span` of wall time, rounded to the nearest
/// common value. Used only when no kernel config is readable.
pub fn measure_hz(root: &Path, span: Duration) -> Option<u32> {
    let start = Instant::now();
    let first = read_jiffies(root)?;
    std::thread::sleep(span);
    let last = read_jiffies(root)?;
    let rate = last.checked_sub(first)? as f64 / start.elapsed().as_secs_f64();
    [100u32, 250, 300, 1000]
        .into_iter()
        .min_by(|a, b| {
            (f64::from(*a) - rate)
                .abs()
                .total_cmp(&(f64::from(*b) - rate).abs())
        })
        .filter(|hz| (f64::from(*hz) - rate).abs() < f64::from(*hz) * 0.2)
}

/// HZ from the config, else measured from jiffies, else unknown.
pub fn detect_hz(root: &Path, config: Option<&KernelConfig>) -> Hz {
    if let Some(hz) = config.and_then(|c| c.hz) {
        return Hz {
            value: Some(hz),
            how: "config".into(),
        };
    }
    match measure_hz(root, Duration::from_millis(200)) {
        Some(hz) => Hz {
            value: Some(hz),
            how: "jiffies".into(),
        },
        None => Hz {
            value: None,
            how: "unknown".into(),
        },
    }
}

/// USER_HZ: the unit of /proc/stat and /proc/<pid>/stat times.
pub fn user_hz() -> u32 {
    // SAFETY: sysconf has no preconditions.
    let ticks = unsafe { libc::sysconf(libc::_SC_CLK_TCK) };
    u32::try_from(ticks).ok().filter(|t| *t > 0).unwrap_or(100)
}

pub fn read_trimmed(root: &Path, rel: &str) -> Option<String> {
    std::fs::read_to_string(root.join(rel))
        .ok()
        .map(|s| s.trim().to_string())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_hz_and_accounting() {
        let text = "# CONFIG_IRQ_TIME_ACCOUNTING is not set\nCONFIG_HZ_250=y\nCONFIG_HZ=250\nCONFIG_TICK_CPU_ACCOUNTING=y\n";
        let config = parse_kernel_config(text, "x");
        assert_eq!(config.hz, Some(250));
        assert_eq!(config.accounting(), CpuAccounting::TickSampled);
        let irq = parse_kernel_config(
            "CONFIG_HZ=1000\nCONFIG_TICK_CPU_ACCOUNTING=y\nCONFIG_IRQ_TIME_ACCOUNTING=y\n",
            "x",
        );
        assert_eq!(irq.accounting(), CpuAccounting::IrqTime);
        assert_eq!(
            parse_kernel_config("", "x").accounting(),
            CpuAccounting::Unknown
        );
    }
}
