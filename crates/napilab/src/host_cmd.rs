//! `napilab host`: which machine this is, as every record stores it (CPU, microcode,
//! mitigations, kernel, virtualization; docs/observation.md, "Host identity"). Only
//! reads, so it runs without root.

use std::path::PathBuf;

use anyhow::Result;
use napilab_core::HostIdentity;
use napilab_probe::host_identity::read_host_identity;

#[derive(clap::Args)]
pub struct HostArgs {
    /// Print the identity as JSON (the `identity` object of a record's `host`).
    #[arg(long)]
    json: bool,
    /// Read /proc and /sys under DIR instead of / (a recorded tree).
    #[arg(long, value_name = "DIR")]
    root: Option<PathBuf>,
}

pub fn run(args: HostArgs) -> Result<()> {
    let root = args.root.unwrap_or_else(|| PathBuf::from("/"));
    let identity = read_host_identity(&root);
    if args.json {
        println!("{}", serde_json::to_string_pretty(&identity)?);
    } else {
        print!("{}", text(&identity));
    }
    Ok(())
}

/// The summary first (what `make test` prints), then one line per field.
fn text(identity: &HostIdentity) -> String {
    let fields = identity.fields();
    let width = fields.iter().map(|(k, _)| k.len()).max().unwrap_or(0);
    let mut out = format!("host: {}\n", identity.summary());
    for (name, value) in fields {
        out.push_str(&format!("  {name:<width$}  {value}\n"));
    }
    out
}
