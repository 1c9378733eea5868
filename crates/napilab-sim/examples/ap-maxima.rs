//! The access point's predicted maximum throughput (RFC 2544 search, loss <= 0.1%,
//! 300 ms per probe, seed 1) for E2W and W2E, single- and dual-core, at the Gigabit
//! link and with the link unconstrained (the CPU bound).
//!
//! cargo run --release -p napilab-sim --example ap-maxima

use napilab_sim::{Profile, SimConfig};

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let dir = concat!(env!("CARGO_MANIFEST_DIR"), "/");
    let e2w = Profile::from_file(std::path::Path::new(&format!(
        "{dir}profiles/ap-cortex-a72-bcmgenet.toml"
    )))?;
    let w2e = Profile::from_file(std::path::Path::new(&format!(
        "{dir}profiles/ap-cortex-a72-w2e.toml"
    )))?;
    println!("scenario link_mbps max_pps max_mbit(1506 B)");
    for (file, p) in [
        ("ap-e2w-single-core", &e2w),
        ("ap-e2w-dual-core", &e2w),
        ("ap-w2e-single-core", &w2e),
        ("ap-w2e-dual-core", &w2e),
    ] {
        let base = SimConfig::from_file(std::path::Path::new(&format!(
            "{dir}tests/fixtures/legacy/{file}.toml"
        )))?;
        for link in [1000.0, 100_000.0] {
            let mut cfg = base.clone();
            cfg.measurement.duration_ms = 300.0;
            cfg.egress.link_mbps = link;
            let (mt, _) = napilab_sim::max_throughput(&cfg, p, 1, 0.001, 10_000.0, 400_000.0, 0.01);
            println!(
                "{file} {link} {:.0} {:.0}",
                mt.pps,
                mt.pps * 1506.0 * 8.0 / 1e6
            );
        }
    }
    Ok(())
}
