// How napilab builds a CO-RE BPF object into its Rust skeleton (libbpf-cargo): shared,
// through `include!`, by the build scripts of napilab-trace and napilab-lab.

/// clang's arguments for a BPF object of the building crate: the target architecture
/// (for the `PT_REGS` and syscall wrappers of bpf_tracing.h), its `src/bpf` headers,
/// all warnings.
fn bpf_clang_args() -> Vec<String> {
    let arch = std::env::var("CARGO_CFG_TARGET_ARCH").unwrap_or_default();
    let target = match arch.as_str() {
        "x86_64" => "x86",
        "aarch64" => "arm64",
        "riscv64" => "riscv",
        "powerpc64" => "powerpc",
        "s390x" => "s390",
        other => other,
    };
    vec![
        format!("-D__TARGET_ARCH_{target}"),
        "-Isrc/bpf".to_string(),
        "-Wall".to_string(),
    ]
}

/// Compiles `src` with `args` and writes its skeleton to `$OUT_DIR/<skel>`; panics
/// with what to install (`needs`) when it cannot.
fn build_skeleton(src: &str, skel: &str, args: &[String], needs: &str) {
    let out_dir =
        std::path::PathBuf::from(std::env::var_os("OUT_DIR").expect("cargo sets OUT_DIR"));
    libbpf_cargo::SkeletonBuilder::new()
        .source(src)
        .clang_args(args)
        .build_and_generate(out_dir.join(skel))
        .unwrap_or_else(|e| {
            panic!(
                "cannot build the BPF skeleton of {src}: {} needs {needs}: {e:#}",
                env!("CARGO_PKG_NAME")
            )
        });
}
