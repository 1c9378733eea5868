//! Shared namespace fixture for the root integration tests: a private network
//! namespace named `napilab-test-<pid>-<tag>` holding a veth pair with private addresses.
//! Traffic never leaves it, and it is deleted on drop, also when a test panics.

#![allow(dead_code)]

use std::process::{Command, Output};

pub struct Netns {
    pub name: String,
}

pub fn is_root() -> bool {
    // SAFETY: geteuid has no preconditions.
    unsafe { libc::geteuid() == 0 }
}

fn run(cmd: &mut Command) -> Result<Output, String> {
    let out = cmd.output().map_err(|e| format!("{cmd:?}: {e}"))?;
    if out.status.success() {
        Ok(out)
    } else {
        Err(format!(
            "{cmd:?} failed: {}",
            String::from_utf8_lossy(&out.stderr).trim()
        ))
    }
}

impl Netns {
    /// Creates the namespace; `Err` carries why (the caller prints it and skips).
    pub fn create(tag: &str) -> Result<Netns, String> {
        if !is_root() {
            return Err("needs root to create network namespaces".into());
        }
        let name = format!("napilab-test-{}-{tag}", std::process::id());
        run(Command::new("ip").args(["netns", "add", &name]))?;
        Ok(Netns { name })
    }

    pub fn sh(&self, script: &str) -> Result<String, String> {
        run(Command::new("ip").args(["netns", "exec", &self.name, "sh", "-ec", script]))
            .map(|o| String::from_utf8_lossy(&o.stdout).into_owned())
    }

    pub fn command(&self, program: &str) -> Command {
        let mut cmd = Command::new("ip");
        cmd.args(["netns", "exec", &self.name, program]);
        cmd
    }

    /// veth pair `va` (10.77.0.1) <-> `vb` (10.77.0.2) with static neighbours and IPv6
    /// off, so that only the test's own packets cross it. GRO on `vb` gives it a NAPI
    /// instance (domain.md section 6).
    pub fn veth_pair(&self, threaded: bool) -> Result<(), String> {
        self.sh(&format!(
            "sysctl -qw net.ipv6.conf.all.disable_ipv6=1 net.ipv6.conf.default.disable_ipv6=1
             ip link add va type veth peer name vb
             ip addr add 10.77.0.1/30 dev va
             ip addr add 10.77.0.2/30 dev vb
             ip link set va up; ip link set vb up; ip link set lo up
             ethtool -K vb gro on >/dev/null
             ip neigh replace 10.77.0.2 lladdr $(cat /sys/class/net/vb/address) dev va nud permanent
             ip neigh replace 10.77.0.1 lladdr $(cat /sys/class/net/va/address) dev vb nud permanent
             echo {} > /sys/class/net/vb/threaded",
            u8::from(threaded)
        ))
        .map(|_| ())
    }
}

impl Drop for Netns {
    fn drop(&mut self) {
        let _ = Command::new("ip")
            .args(["netns", "del", &self.name])
            .status();
    }
}
