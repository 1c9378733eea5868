//! The `server` topology: two namespaces `napilab-<run>-client` and `-dut`, one veth
//! pair with `topology.ingress_queues` queues. GRO on the DUT's veth gives each of its
//! RX queues a NAPI instance (veth uses NAPI only with GRO or XDP); TSO and GSO off on
//! the client's veth make every TCP segment a frame of its own, so each passes through
//! that NAPI instance and the server's sockets learn its id (`SO_INCOMING_NAPI_ID`).
//!
//! The interrupt mode is applied with napilab-tune's journalled apply, run inside the
//! DUT namespace (`ip netns exec ... napilab tune apply`: the per-device sysfs files are
//! only visible with the namespace's own /sys), and reverted before the namespaces go.
//! Deleting the namespaces removes everything else; [`ServerLab`]'s Drop does both.

use std::io;
use std::net::{Ipv4Addr, SocketAddrV4};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use napilab_core::scenario::{ServerMode, Topology};

use crate::netns::{delete_namespace, linked_namespaces, ns_name, sh_in, LinkEnd};

pub const CLIENT_ADDR: Ipv4Addr = Ipv4Addr::new(10, 201, 3, 1);
pub const SERVER_ADDR: Ipv4Addr = Ipv4Addr::new(10, 201, 3, 2);
pub const SERVER_PORT: u16 = 11211;

/// A built server topology. Dropping it reverts the mode and deletes its namespaces.
#[derive(Debug)]
pub struct ServerLab {
    pub run_id: String,
    pub client_ns: String,
    pub dut_ns: String,
    pub client_dev: String,
    /// The DUT's device: the server's RX NAPI instances are its queues'.
    pub dut_dev: String,
    pub queues: u32,
    /// The journal directory of the mode's tune apply (None: nothing applied).
    mode_journals: Option<PathBuf>,
    torn_down: bool,
}

/// What applying a mode did, for the configuration's settings.
pub struct AppliedMode {
    /// (setting, value) pairs as the tune journal recorded them.
    pub changes: Vec<(String, String)>,
}

impl ServerLab {
    pub fn build(run_id: &str, topo: &Topology) -> io::Result<ServerLab> {
        let short = &run_id[run_id.len() - 4..];
        let mut lab = ServerLab {
            run_id: run_id.to_string(),
            client_ns: ns_name(run_id, "client"),
            dut_ns: ns_name(run_id, "dut"),
            client_dev: format!("n{short}-cli"),
            dut_dev: format!("n{short}-srv"),
            queues: topo.ingress_queues.max(1),
            mode_journals: None,
            torn_down: false,
        };
        // From here on, Drop removes whatever was created.
        lab.create()?;
        Ok(lab)
    }

    pub fn server_addr(&self) -> SocketAddrV4 {
        SocketAddrV4::new(SERVER_ADDR, SERVER_PORT)
    }

    fn create(&mut self) -> io::Result<()> {
        linked_namespaces(
            &LinkEnd {
                ns: &self.client_ns,
                dev: &self.client_dev,
                addr: CLIENT_ADDR,
            },
            &LinkEnd {
                ns: &self.dut_ns,
                dev: &self.dut_dev,
                addr: SERVER_ADDR,
            },
            self.queues,
        )?;
        sh_in(
            &self.client_ns,
            &format!("ethtool -K {} tso off gso off >/dev/null", self.client_dev),
        )?;
        sh_in(
            &self.dut_ns,
            &format!("ethtool -K {} gro on >/dev/null", self.dut_dev),
        )?;
        Ok(())
    }

    /// Applies `mode` to the DUT's device through napilab-tune (journalled in
    /// `journal_dir`), with `exe` the napilab binary; `cpus` pins the NAPI kthreads of
    /// `threaded`. An error names the mode and what tune said; nothing stays applied
    /// (tune rolls back a failed apply).
    pub fn apply_mode(
        &mut self,
        exe: &Path,
        mode: ServerMode,
        cpus: &[u32],
        journal_dir: &Path,
    ) -> Result<AppliedMode, String> {
        std::fs::create_dir_all(journal_dir)
            .map_err(|e| format!("creating {}: {e}", journal_dir.display()))?;
        // Every mode is a shipped napilab-tune profile of the same name.
        let profile = mode.as_str().to_string();
        let mut args: Vec<String> = vec![
            "tune".into(),
            "apply".into(),
            profile,
            "--dev".into(),
            self.dut_dev.clone(),
            "--journal-dir".into(),
            journal_dir.display().to_string(),
            "--json".into(),
        ];
        if mode == ServerMode::Threaded && !cpus.is_empty() {
            args.push("--cpus".into());
            args.push(napilab_core::scenario::cpu_list(cpus));
        }
        // From here on a partial apply is reverted by Drop.
        self.mode_journals = Some(journal_dir.to_path_buf());
        let out = self.napilab_in_dut(exe, &args)?;
        let report: napilab_tune::ApplyReport = serde_json::from_str(&out)
            .map_err(|e| format!("mode {}: tune apply's output: {e}", mode.as_str()))?;
        let changes = report
            .applied
            .iter()
            .map(|c| (c.key.to_string(), format!("{} -> {}", c.from, c.to)))
            .collect();
        Ok(AppliedMode { changes })
    }

    /// Reverts the mode's journal (a no-op when nothing was applied).
    pub fn revert_mode(&mut self, exe: &Path) -> Result<(), String> {
        let Some(dir) = self.mode_journals.take() else {
            return Ok(());
        };
        let args: Vec<String> = vec![
            "tune".into(),
            "revert".into(),
            "--journal-dir".into(),
            dir.display().to_string(),
            "--json".into(),
        ];
        match self.napilab_in_dut(exe, &args) {
            Ok(_) => Ok(()),
            // Nothing was journalled (the mode changed nothing): nothing to revert.
            Err(e) if e.contains("no journal") => Ok(()),
            Err(e) => Err(e),
        }
    }

    fn napilab_in_dut(&self, exe: &Path, args: &[String]) -> Result<String, String> {
        let out = Command::new("ip")
            .args(["netns", "exec", &self.dut_ns])
            .arg(exe)
            .args(args)
            .stdin(Stdio::null())
            .output()
            .map_err(|e| format!("running {} {}: {e}", exe.display(), args.join(" ")))?;
        let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
        if out.status.success() {
            Ok(stdout)
        } else {
            Err(format!(
                "napilab {} in {}: {}{}",
                args[..2].join(" "),
                self.dut_ns,
                stdout.trim(),
                String::from_utf8_lossy(&out.stderr).trim()
            ))
        }
    }

    /// Reverts the mode with `exe` and deletes the namespaces.
    pub fn teardown(&mut self, exe: Option<&Path>) -> io::Result<()> {
        if self.torn_down {
            return Ok(());
        }
        let mut first_err = None;
        if let Some(exe) = exe {
            if let Err(e) = self.revert_mode(exe) {
                first_err = Some(io::Error::other(format!(
                    "reverting the mode: {e} (run `napilab lab clean`)"
                )));
            }
        }
        self.torn_down = true;
        for ns in [&self.client_ns, &self.dut_ns] {
            if let Err(e) = delete_namespace(ns) {
                first_err.get_or_insert(e);
            }
        }
        first_err.map_or(Ok(()), Err)
    }
}

impl Drop for ServerLab {
    fn drop(&mut self) {
        // The mode's settings live on the DUT's device, which goes with its namespace.
        if !self.torn_down {
            self.torn_down = true;
            for ns in [&self.client_ns, &self.dut_ns] {
                let _ = delete_namespace(ns);
            }
        }
    }
}
