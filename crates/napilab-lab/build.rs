//! Builds the line-rate back end's CO-RE BPF object and its Rust skeleton
//! (libbpf-cargo), like napilab-trace's build.rs. Needs clang.

use std::path::{Path, PathBuf};

use libbpf_cargo::SkeletonBuilder;

const SRC: &str = "src/bpf/linerate.bpf.c";

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
    let mut args = vec![
        format!("-D__TARGET_ARCH_{target}"),
        "-Isrc/bpf".to_string(),
        "-Wall".to_string(),
    ];
    // The program uses UAPI headers (linux/bpf.h and friends) instead of a vmlinux.h;
    // they include <asm/types.h>, which Debian keeps under the multiarch directory
    // that clang's BPF target does not search.
    let multiarch = format!("/usr/include/{arch}-linux-gnu");
    if Path::new(&multiarch).is_dir() {
        args.push(format!("-I{multiarch}"));
    }
    SkeletonBuilder::new()
        .source(SRC)
        .clang_args(args)
        .build_and_generate(out_dir.join("linerate.skel.rs"))
        .unwrap_or_else(|e| {
            panic!("cannot build the BPF skeleton of {SRC}: napilab-lab needs clang and the kernel UAPI headers (apt-get install clang linux-libc-dev): {e:#}")
        });
    println!("cargo:rerun-if-changed=src/bpf");
}
