//! Compiles the C shim against Debian's DPDK, found with `pkg-config libdpdk`.
//!
//! Without libdpdk (no `pkg-config`, or no `libdpdk.pc` on its path) the build
//! does not fail: it sets `cfg(iwarp_dpdk_missing)` and the crate becomes a
//! stub whose constructors return `Error::Unavailable`.
//!
//! Linking: the shim is a static archive; DPDK's libraries are linked as the
//! shared objects `pkg-config --libs libdpdk` names. Debian's DPDK is a shared
//! build whose EAL loads every poll-mode driver in its compiled-in driver
//! directory (`RTE_EAL_PMD_PATH`, /usr/lib/x86_64-linux-gnu/dpdk/pmds-23.0)
//! during `rte_eal_init`, so `net_af_packet` and friends need neither a `-d`
//! EAL argument nor `--whole-archive` linking (that is only needed with a
//! static DPDK, whose drivers register themselves from constructors).

use std::process::Command;

fn main() {
    println!("cargo:rerun-if-changed=build.rs");
    println!("cargo:rerun-if-changed=shim/shim.c");
    println!("cargo:rerun-if-changed=shim/shim.h");
    for v in [
        "PKG_CONFIG",
        "PKG_CONFIG_PATH",
        "PKG_CONFIG_LIBDIR",
        "PKG_CONFIG_SYSROOT_DIR",
    ] {
        println!("cargo:rerun-if-env-changed={v}");
    }
    println!("cargo:rustc-check-cfg=cfg(iwarp_dpdk_missing)");

    let pkg_config = std::env::var("PKG_CONFIG").unwrap_or_else(|_| "pkg-config".into());
    let query = |args: &[&str]| -> Result<String, String> {
        let out = Command::new(&pkg_config)
            .args(args)
            .arg("libdpdk")
            .output()
            .map_err(|e| format!("could not run {pkg_config}: {e}"))?;
        if !out.status.success() {
            return Err(String::from_utf8_lossy(&out.stderr).trim().to_owned());
        }
        Ok(String::from_utf8_lossy(&out.stdout).into_owned())
    };
    let (cflags, libs, version) = match (
        query(&["--cflags"]),
        query(&["--libs"]),
        query(&["--modversion"]),
    ) {
        (Ok(c), Ok(l), Ok(v)) => {
            // Built again when DPDK's development files change or go.
            if let Ok(dir) = query(&["--variable=pcfiledir"]) {
                println!("cargo:rerun-if-changed={}/libdpdk.pc", dir.trim());
            }
            (c, l, v)
        }
        (Err(e), _, _) | (_, Err(e), _) | (_, _, Err(e)) => {
            // Built again when libdpdk-dev is installed later: cargo
            // watches the directories pkg-config searches (those that
            // exist: a missing path would rebuild the stub every time), so
            // a first build before `scripts/deps.sh` does not stay a stub.
            let searched = Command::new(&pkg_config)
                .args(["--variable", "pc_path", "pkg-config"])
                .output()
                .ok()
                .map(|o| String::from_utf8_lossy(&o.stdout).into_owned())
                .unwrap_or_default();
            let extra = std::env::var("PKG_CONFIG_PATH").unwrap_or_default();
            for dir in extra.split(':').chain(searched.trim().split(':')) {
                if !dir.is_empty() && std::path::Path::new(dir).is_dir() {
                    println!("cargo:rerun-if-changed={dir}");
                }
            }
            println!(
                "cargo:warning=iwarp-dpdk: libdpdk not found ({}); building the stub \
                     (install libdpdk-dev and pkg-config for the DPDK backend)",
                e.lines().next().unwrap_or("")
            );
            println!("cargo:rustc-cfg=iwarp_dpdk_missing");
            return;
        }
    };
    println!("cargo:rustc-env=IWARP_DPDK_VERSION={}", version.trim());

    let mut build = cc::Build::new();
    build
        .file("shim/shim.c")
        .include("shim")
        .warnings(true)
        .extra_warnings(true);
    let mut it = cflags.split_whitespace();
    while let Some(flag) = it.next() {
        if let Some(dir) = flag.strip_prefix("-I") {
            build.include(dir);
        } else if flag == "-include" {
            // `-include rte_config.h`: DPDK's headers expect it first.
            if let Some(file) = it.next() {
                build.flag("-include").flag(file);
            }
        } else {
            // -march=…, -D…: what DPDK's headers were configured with.
            build.flag(flag);
        }
    }
    build.compile("iwarp_dpdk_shim");

    for flag in libs.split_whitespace() {
        if let Some(dir) = flag.strip_prefix("-L") {
            println!("cargo:rustc-link-search=native={dir}");
        } else if let Some(lib) = flag.strip_prefix("-l") {
            println!("cargo:rustc-link-lib=dylib={lib}");
        }
        // `-Wl,--as-needed` and the like: rustc already links with
        // --as-needed, so the libraries the shim does not use are dropped.
    }
}
