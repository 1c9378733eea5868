//! Builds the CO-RE BPF objects and their Rust skeletons (libbpf-cargo, through
//! bpf_build.rs, which napilab-lab's build script shares). Needs clang.

include!("bpf_build.rs");

/// (source, skeleton file) for every BPF object of the crate.
const OBJECTS: [(&str, &str); 4] = [
    ("src/bpf/napi_trace.bpf.c", "napi_trace.skel.rs"),
    ("src/bpf/stage_profile.bpf.c", "stage_profile.skel.rs"),
    ("src/bpf/packets.bpf.c", "packets.skel.rs"),
    ("src/bpf/floor.bpf.c", "floor.skel.rs"),
];

fn main() {
    let args = bpf_clang_args();
    for (src, skel) in OBJECTS {
        build_skeleton(src, skel, &args, "clang (apt-get install clang)");
    }
    println!("cargo:rerun-if-changed=src/bpf");
    println!("cargo:rerun-if-changed=bpf_build.rs");
}
