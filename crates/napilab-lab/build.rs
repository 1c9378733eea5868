//! Builds the line-rate back end's CO-RE BPF object and its Rust skeleton
//! (libbpf-cargo), with napilab-trace's bpf_build.rs. Needs clang.

include!("../napilab-trace/bpf_build.rs");

const SRC: &str = "src/bpf/linerate.bpf.c";

fn main() {
    let mut args = bpf_clang_args();
    // The program uses UAPI headers (linux/bpf.h and friends) instead of a vmlinux.h;
    // they include <asm/types.h>, which Debian keeps under the multiarch directory
    // that clang's BPF target does not search.
    let arch = std::env::var("CARGO_CFG_TARGET_ARCH").unwrap_or_default();
    let multiarch = format!("/usr/include/{arch}-linux-gnu");
    if std::path::Path::new(&multiarch).is_dir() {
        args.push(format!("-I{multiarch}"));
    }
    build_skeleton(
        SRC,
        "linerate.skel.rs",
        &args,
        "clang and the kernel UAPI headers (apt-get install clang linux-libc-dev)",
    );
    println!("cargo:rerun-if-changed=src/bpf");
    println!("cargo:rerun-if-changed=../napilab-trace/bpf_build.rs");
}
