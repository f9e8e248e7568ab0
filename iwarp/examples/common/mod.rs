//! What the examples share: two contexts, over the simulated link (no
//! arguments), over AF_XDP across two network namespaces (`--netns`, needs
//! root), or over DPDK (`--dpdk`: DPDK's `net_af_packet` driver on the same
//! two namespaces' veth ends, one EAL for both ports; needs root and
//! libdpdk), or over memif, two ends on one socket in this process,
//! shared-memory rings and no kernel, no root: our own (`--memif`,
//! `Context::memif`, feature `memif`) or DPDK's (`--dpdk-memif`, needs
//! libdpdk). `--netns` needs the `xdp` feature, `--dpdk` and
//! `--dpdk-memif` the `dpdk` feature (all three are default features of
//! `iwarp`).

use iwarp::{Context, Polling};
use netns_harness::{End, Netns, VethPair};

/// Namespaces and veth of an AF_XDP run; removed on drop.
#[allow(dead_code)] // held for its Drop
pub struct Lab {
    veth: VethPair,
    a: Netns,
    b: Netns,
}

/// The server's and the client's context, and the lab if namespaces are used.
pub fn contexts() -> (Context, Context, Option<Lab>, &'static str) {
    let arg = |flag: &str| std::env::args().any(|a| a == flag);
    let polling = if arg("--busy") {
        Polling::Busy
    } else {
        Polling::Adaptive
    };
    if arg("--memif") {
        #[cfg(not(feature = "memif"))]
        without("memif", "--memif");
        #[cfg(feature = "memif")]
        {
            let (s, c) = our_memif(polling);
            return (s, c, None, "our memif (two ends on one socket, no kernel)");
        }
    }
    if arg("--dpdk-memif") {
        let (s, c) = memif(polling);
        return (
            s,
            c,
            None,
            "DPDK memif (two ports on one socket, no kernel)",
        );
    }
    let dpdk = arg("--dpdk");
    if !dpdk && !arg("--netns") {
        let (s, c) = Context::sim_pair();
        return (s, c, None, "simulated link");
    }
    // Before any namespace is made: exiting skips the lab's Drop.
    match dpdk {
        true if !cfg!(feature = "dpdk") => without("dpdk", "--dpdk"),
        false if !cfg!(feature = "xdp") => without("xdp", "--netns"),
        _ => {}
    }
    if let Some(why) = netns_harness::skip_reason() {
        eprintln!("--netns/--dpdk: {why}");
        std::process::exit(2);
    }
    let a = Netns::new("exa").expect("namespace");
    let b = Netns::new("exb").expect("namespace");
    let mut veth = VethPair::new("exv").expect("veth");
    veth.move_to(End::A, &a).expect("move");
    veth.move_to(End::B, &b).expect("move");
    for end in [End::A, End::B] {
        veth.disable_ipv6(end).expect("ipv6");
        veth.set_up(end).expect("up");
    }
    let (server, client, how) = if dpdk {
        af_packet(&veth, [&a, &b], polling)
    } else {
        af_xdp(&veth, [&a, &b], polling)
    };
    (server, client, Some(Lab { veth, a, b }), how)
}

#[cfg(any(feature = "xdp", feature = "dpdk"))]
fn ip(last: u8) -> std::net::Ipv4Addr {
    std::net::Ipv4Addr::new(10, 77, 7, last)
}

/// Our memif: a server and a client on one socket in this process.
#[cfg(feature = "memif")]
fn our_memif(polling: Polling) -> (Context, Context) {
    use iwarp::memif::Role;
    use iwarp::MemifOptions;
    let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
    let sock = std::env::temp_dir().join(format!("iwarp-example-ours-{}.sock", std::process::id()));
    let opts = |role, last: u8, core: usize| {
        let ip = std::net::Ipv4Addr::new(10, 77, 9, last);
        let mut o = MemifOptions::new(role, &sock, 0, ip, 24);
        o.host.core = Some(core % cores);
        o.host.polling = polling;
        o
    };
    let s = Context::memif(&opts(Role::Server, 1, 0)).expect("memif server");
    let c = Context::memif(&opts(Role::Client, 2, 1)).expect("memif client");
    (s, c)
}

/// Two DPDK memif ports on one socket in this process.
#[cfg(feature = "dpdk")]
fn memif(polling: Polling) -> (Context, Context) {
    use iwarp::dpdk::{Eal, MemifRole};
    use iwarp::DpdkOptions;
    // The EAL's main lcore floats over every CPU (see `af_packet`).
    let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
    let eal = Eal::init(iwarp::dpdk::floating_vdev_args(
        &[],
        &iwarp::dpdk::allowed_cpus(),
    ))
    .expect("EAL");
    let sock = std::env::temp_dir().join(format!("iwarp-example-{}.sock", std::process::id()));
    let opts = |index: u32, role, last: u8, core: usize| {
        let ip = std::net::Ipv4Addr::new(10, 77, 8, last);
        let mut o = DpdkOptions::memif(index, role, 0, &sock, ip, 24);
        o.host.core = Some(core % cores);
        o.host.polling = polling;
        o
    };
    let s = Context::dpdk(&eal, &opts(0, MemifRole::Server, 1, 0)).expect("memif server");
    let c = Context::dpdk(&eal, &opts(1, MemifRole::Client, 2, 1)).expect("memif client");
    (s, c)
}

/// DPDK's `net_af_packet` on each end of the veth, one EAL for both ports.
#[cfg(feature = "dpdk")]
fn af_packet(
    veth: &VethPair,
    ns: [&Netns; 2],
    polling: Polling,
) -> (Context, Context, &'static str) {
    use iwarp::dpdk::Eal;
    use iwarp::DpdkOptions;
    // EAL pins the thread that initialises it to its main lcore, and
    // threads spawned later inherit that: float it over our CPUs.
    let eal = Eal::init(iwarp::dpdk::floating_vdev_args(
        &[],
        &iwarp::dpdk::allowed_cpus(),
    ))
    .expect("EAL");
    let opts = |end: End, ns: &Netns, n: u8, core: usize| {
        let dev = format!("net_af_packet{n},iface={}", veth.name(end));
        let mut o = DpdkOptions::new(&dev, ip(n + 1), 24);
        o.host.netns = Some(ns.ns_path());
        o.host.core = Some(core);
        o.host.polling = polling;
        o
    };
    (
        Context::dpdk(&eal, &opts(End::A, ns[0], 0, 0)).expect("DPDK server"),
        Context::dpdk(&eal, &opts(End::B, ns[1], 1, 1)).expect("DPDK client"),
        "DPDK (net_af_packet) across two namespaces",
    )
}

/// AF_XDP on each end of the veth.
#[cfg(feature = "xdp")]
fn af_xdp(veth: &VethPair, ns: [&Netns; 2], polling: Polling) -> (Context, Context, &'static str) {
    let opts = |end: End, ns: &Netns, last: u8, core: usize| {
        let mut o = iwarp::XdpOptions::new(veth.name(end), ip(last), 24);
        o.host.netns = Some(ns.ns_path());
        o.host.core = Some(core);
        o.host.polling = polling;
        o
    };
    (
        Context::af_xdp(&opts(End::A, ns[0], 1, 0)).expect("AF_XDP server"),
        Context::af_xdp(&opts(End::B, ns[1], 2, 1)).expect("AF_XDP client"),
        "AF_XDP across two namespaces",
    )
}

#[cfg(not(feature = "dpdk"))]
fn memif(_: Polling) -> (Context, Context) {
    without("dpdk", "--dpdk-memif")
}

#[cfg(not(feature = "dpdk"))]
fn af_packet(_: &VethPair, _: [&Netns; 2], _: Polling) -> (Context, Context, &'static str) {
    unreachable!("refused before the lab was made")
}

#[cfg(not(feature = "xdp"))]
fn af_xdp(_: &VethPair, _: [&Netns; 2], _: Polling) -> (Context, Context, &'static str) {
    unreachable!("refused before the lab was made")
}

/// A mode asked for that this build left out.
fn without(feature: &str, flag: &str) -> ! {
    eprintln!("{flag}: built without iwarp's `{feature}` feature (cargo run --features {feature})");
    std::process::exit(2)
}

/// Percentile of sorted nanoseconds, in microseconds.
#[allow(dead_code)]
pub fn pct(sorted: &[u64], q: f64) -> f64 {
    if sorted.is_empty() {
        return 0.0;
    }
    sorted[((sorted.len() as f64 * q) as usize).min(sorted.len() - 1)] as f64 / 1000.0
}
