//! A fingerprint of the twin's results, to show that a speed change left them alone.
//!
//!   cargo run --release -p napilab-sim --example sim-digest [OUT_DIR]
//!
//! Runs every bundled scenario with every bundled profile, at a few
//! offered loads (idle, loaded, saturated, overloaded), two seeds, Poisson and constant
//! arrivals and 1 ms intervals
//! (so that interval boundaries fall inside polls), and prints one FNV-1a hash of each
//! result's JSON and one of them all. Run it before and after a change: the same
//! hashes mean the same results, to the last counter and latency bucket. With OUT_DIR
//! the JSON of each run is written there too, for diffing.

use napilab_sim::config::Pattern;
use napilab_sim::{Profile, SimConfig};

const SCENARIOS: &[(&str, &str)] = &[
    (
        "router-sq",
        include_str!("../tests/fixtures/legacy/router-sq.toml"),
    ),
    (
        "ap-e2w-single-core",
        include_str!("../tests/fixtures/legacy/ap-e2w-single-core.toml"),
    ),
    (
        "ap-e2w-dual-core",
        include_str!("../tests/fixtures/legacy/ap-e2w-dual-core.toml"),
    ),
    (
        "ap-w2e-single-core",
        include_str!("../tests/fixtures/legacy/ap-w2e-single-core.toml"),
    ),
    (
        "ap-w2e-dual-core",
        include_str!("../tests/fixtures/legacy/ap-w2e-dual-core.toml"),
    ),
    (
        "server-irq-suspend",
        include_str!("../tests/fixtures/legacy/server-irq-suspend.toml"),
    ),
];

const PROFILES: &[(&str, &str)] = &[
    (
        "router-e3-1230-ixgbe",
        include_str!("../profiles/router-e3-1230-ixgbe.toml"),
    ),
    (
        "ap-cortex-a72-bcmgenet",
        include_str!("../profiles/ap-cortex-a72-bcmgenet.toml"),
    ),
    (
        "ap-cortex-a72-w2e",
        include_str!("../profiles/ap-cortex-a72-w2e.toml"),
    ),
];

fn fnv1a(bytes: &[u8]) -> u64 {
    let mut h = 0xcbf2_9ce4_8422_2325u64;
    for &b in bytes {
        h ^= b as u64;
        h = h.wrapping_mul(0x0100_0000_01b3);
    }
    h
}

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let out_dir = std::env::args().nth(1);
    let mut all = Vec::new();
    for (name, text) in SCENARIOS {
        for (pname, ptext) in PROFILES {
            let profile = Profile::from_toml_str(ptext, pname)?;
            let base = SimConfig::from_toml_str(text, name)?;
            let runs = [0.05, 0.5, 1.0, 1.6]
                .into_iter()
                .flat_map(|s| [(s, 1u64), (s, 7)])
                .flat_map(|(s, seed)| [(s, seed, Pattern::Poisson), (s, seed, Pattern::Constant)]);
            for (scale, seed, pattern) in runs {
                {
                    let mut cfg = base.clone();
                    cfg.traffic.pattern = pattern;
                    cfg.traffic.rate_pps = (base.traffic.rate_pps * scale).round();
                    cfg.measurement.warmup_ms = 2.0;
                    cfg.measurement.duration_ms = 20.0;
                    cfg.measurement.interval_ms = Some(1.0);
                    let r = napilab_sim::run(&cfg, &profile, seed);
                    let json =
                        serde_json::to_string(&r.model)? + &serde_json::to_string(&r.observation)?;
                    let h = fnv1a(json.as_bytes());
                    println!("{name} {pname} x{scale} seed {seed} {pattern:?}: {h:016x}");
                    if let Some(d) = &out_dir {
                        std::fs::create_dir_all(d)?;
                        let f = format!("{d}/{name}-{pname}-{scale}-{seed}-{pattern:?}.json");
                        std::fs::write(f, &json)?;
                    }
                    all.extend_from_slice(&h.to_le_bytes());
                }
            }
        }
    }
    println!("all: {:016x}", fnv1a(&all));
    Ok(())
}
