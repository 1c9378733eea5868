//! Builds the CO-RE BPF object and its Rust skeleton (libbpf-cargo). Needs clang.

use std::path::PathBuf;

use libbpf_cargo::SkeletonBuilder;

/// (source, skeleton file) for every BPF object of the crate.
const OBJECTS: [(&str, &str); 4] = [
    ("src/bpf/napi_trace.bpf.c", "napi_trace.skel.rs"),
    ("src/bpf/stage_profile.bpf.c", "stage_profile.skel.rs"),
    ("src/bpf/packets.bpf.c", "packets.skel.rs"),
    ("src/bpf/floor.bpf.c", "floor.skel.rs"),
];

fn main() {
    let out_dir = PathBuf::from(std::env::var_os("OUT_DIR").expect("cargo sets OUT_DIR"));
    let arch = std::env::var("CARGO_CFG_TARGET_ARCH").unwrap_or_default();
    let target = match arch.as_str() {
        "x86_64" => "x86",
        "aarch64" => "arm64",
        "riscv64" => "riscv",
        "powerpc64" => "powerpc",
        "s390x" => "s390",
        other => other,
    };
    for (src, skel) in OBJECTS {
        SkeletonBuilder::new()
            .source(src)
            .clang_args([
                format!("-D__TARGET_ARCH_{target}"),
                "-Isrc/bpf".to_string(),
                "-Wall".to_string(),
            ])
            .build_and_generate(out_dir.join(skel))
            .unwrap_or_else(|e| {
                panic!("cannot build the BPF skeleton of {src}: napilab-trace needs clang (apt-get install clang): {e:#}")
            });
    }
    println!("cargo:rerun-if-changed=src/bpf");
}
