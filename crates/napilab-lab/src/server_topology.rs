//! The `server` topology: two namespaces `napilab-<run>-client` and `-dut`, one veth
//! pair with `topology.ingress_queues` queues. GRO on the DUT's veth gives each of its
//! RX queues a NAPI instance (veth uses NAPI only with GRO or XDP); TSO and GSO off on
//! the client's veth make every TCP segment a frame of its own, so each passes through
//! that NAPI instance and the server's sockets learn its id (`SO_INCOMING_NAPI_ID`).
//!
//! The interrupt mode is applied with napilab-tune's journalled apply, run in this
//! process on a thread that sees the DUT namespace (netns::enter_view: the per-device
//! sysfs files are only visible with the namespace's own /sys), and reverted before the
//! namespaces go.
//! Deleting the namespaces removes everything else; [`ServerLab`]'s Drop does both.

use std::io;
use std::net::{Ipv4Addr, SocketAddrV4};
use std::path::{Path, PathBuf};

use napilab_core::scenario::{ServerMode, Topology};
use napilab_tune::profile::Params;

use crate::netns::{delete_namespace, in_view, linked_namespaces, ns_name, sh_in, LinkEnd};

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
    /// `journal_dir`), in this process on a thread that sees the DUT's namespace
    /// (netns::enter_view: the per-device sysfs files and NAPI instances are the
    /// namespace's); `cpus` pins the NAPI kthreads of `threaded`. An error names the
    /// mode and what tune said; nothing stays applied (tune rolls back a failed apply).
    pub fn apply_mode(
        &mut self,
        mode: ServerMode,
        cpus: &[u32],
        journal_dir: &Path,
    ) -> Result<AppliedMode, String> {
        std::fs::create_dir_all(journal_dir)
            .map_err(|e| format!("creating {}: {e}", journal_dir.display()))?;
        // Every mode is a shipped napilab-tune profile of the same name.
        let profile = mode.as_str().to_string();
        let cpus =
            (mode.threaded() && !cpus.is_empty()).then(|| napilab_core::scenario::cpu_list(cpus));
        let params = Params::from_args(std::slice::from_ref(&self.dut_dev), cpus.as_deref(), &[])
            .map_err(|e| format!("mode {profile}: {e}"))?;
        // From here on a partial apply is reverted by Drop.
        self.mode_journals = Some(journal_dir.to_path_buf());
        let dir = journal_dir.to_path_buf();
        let report = self.tune_in_dut(move || {
            let mut ctx = napilab_tune::host_ctx();
            let plan = napilab_tune::plan_profile(&mut ctx, &profile, &params)
                .map_err(|e| format!("napilab tune apply {profile}: {e}"))?;
            napilab_tune::apply(&mut ctx, plan, &dir)
                .map_err(|e| format!("napilab tune apply {profile}: {e}"))
        })?;
        let changes = report
            .applied
            .iter()
            .map(|c| (c.key.to_string(), format!("{} -> {}", c.from, c.to)))
            .collect();
        Ok(AppliedMode { changes })
    }

    /// Reverts the mode's journal (a no-op when nothing was applied), on a thread in
    /// the DUT's namespace, where it was applied.
    pub fn revert_mode(&mut self) -> Result<(), String> {
        let Some(dir) = self.mode_journals.take() else {
            return Ok(());
        };
        self.tune_in_dut(move || {
            // Nothing was journalled (the mode changed nothing): nothing to revert.
            let Ok(path) = napilab_tune::find_journal(&dir, None) else {
                return Ok(());
            };
            let mut ctx = napilab_tune::host_ctx();
            napilab_tune::revert(&mut ctx, &path)
                .map(drop)
                .map_err(|e| format!("napilab tune revert {}: {e}", path.display()))
        })
    }

    /// Runs `f` (napilab-tune) on a thread that sees the DUT's namespace.
    fn tune_in_dut<T: Send>(
        &self,
        f: impl FnOnce() -> Result<T, String> + Send,
    ) -> Result<T, String> {
        in_view(&self.dut_ns, f)
            .map_err(|e| format!("a thread in {}: {e}", self.dut_ns))?
            .map_err(|e| format!("{e} (in {})", self.dut_ns))
    }

    /// Reverts the mode and deletes the namespaces.
    pub fn teardown(&mut self) -> io::Result<()> {
        if self.torn_down {
            return Ok(());
        }
        let mut first_err = None;
        if let Err(e) = self.revert_mode() {
            first_err = Some(io::Error::other(format!(
                "reverting the mode: {e} (run `napilab lab clean`)"
            )));
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
