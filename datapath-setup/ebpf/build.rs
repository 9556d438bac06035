//! Builds the BPF object with the system clang (libbpf-cargo), generates its skeleton, and
//! generates the Rust mirror of the header shared with the BPF side (bindgen).
//!
//! `vmlinux.h` is generated from the build host's kernel BTF with bpftool; set
//! `CCP_EBPF_VMLINUX_H` to a pre-generated file to build elsewhere. CO-RE relocations make
//! the object portable to other kernels with BTF.

use std::env;
use std::fs;
use std::path::PathBuf;
use std::process::Command;

use libbpf_cargo::SkeletonBuilder;

const BPF_SRC: &str = "src/bpf/ccp.bpf.c";
const SHARED_HDR: &str = "src/bpf/ccp.h";
/// The applications' header, which `SHARED_HDR` includes: the setsockopt level, option
/// and payload have their one home there.
const PRIORITY_HDR_DIR: &str = "../include";

fn main() {
    let out = PathBuf::from(env::var_os("OUT_DIR").expect("cargo sets OUT_DIR"));
    let vmlinux_dir = out.join("vmlinux");
    fs::create_dir_all(&vmlinux_dir).expect("create OUT_DIR/vmlinux");
    let vmlinux_h = vmlinux_dir.join("vmlinux.h");

    println!("cargo:rerun-if-env-changed=CCP_EBPF_VMLINUX_H");
    if let Some(given) = env::var_os("CCP_EBPF_VMLINUX_H") {
        fs::copy(&given, &vmlinux_h).expect("copy CCP_EBPF_VMLINUX_H");
    } else {
        let dump = Command::new("bpftool")
            .args([
                "btf",
                "dump",
                "file",
                "/sys/kernel/btf/vmlinux",
                "format",
                "c",
            ])
            .output()
            .expect(
                "running bpftool to generate vmlinux.h (install bpftool, or set \
                 CCP_EBPF_VMLINUX_H to a vmlinux.h)",
            );
        assert!(
            dump.status.success(),
            "bpftool btf dump failed: {}",
            String::from_utf8_lossy(&dump.stderr)
        );
        fs::write(&vmlinux_h, dump.stdout).expect("write vmlinux.h");
    }

    SkeletonBuilder::new()
        .source(BPF_SRC)
        .clang_args([
            format!("-I{}", vmlinux_dir.display()),
            "-Isrc/bpf".to_string(),
            format!("-I{PRIORITY_HDR_DIR}"),
            "-mcpu=v3".to_string(),
        ])
        .build_and_generate(out.join("ccp.skel.rs"))
        .expect("building the BPF object");

    bindgen::Builder::default()
        .header(SHARED_HDR)
        .clang_arg(format!("-I{PRIORITY_HDR_DIR}"))
        .allowlist_type("ccp_.*")
        .allowlist_var("CCP_.*")
        .derive_default(true)
        .use_core()
        .generate()
        .expect("bindgen on the shared header")
        .write_to_file(out.join("ccp_shared.rs"))
        .expect("write ccp_shared.rs");

    println!("cargo:rerun-if-changed={BPF_SRC}");
    println!("cargo:rerun-if-changed={SHARED_HDR}");
    println!("cargo:rerun-if-changed={PRIORITY_HDR_DIR}/ccp_priority.h");
}
