//! What the examples share: two contexts, over the simulated link (no
//! arguments) or over AF_XDP across two network namespaces (`--netns`,
//! needs root).

use std::net::Ipv4Addr;

use iwarp::{Context, Polling, XdpOptions};
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
    if !std::env::args().any(|a| a == "--netns") {
        let (s, c) = Context::sim_pair();
        return (s, c, None, "simulated link");
    }
    if let Some(why) = netns_harness::skip_reason() {
        eprintln!("--netns: {why}");
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
    let opts = |end: End, ns: &Netns, last: u8, core: usize| {
        let mut o = XdpOptions::new(veth.name(end), Ipv4Addr::new(10, 77, 7, last), 24);
        o.netns = Some(ns.ns_path());
        o.core = Some(core);
        // `--busy`: loops spin without pause (one core each).
        o.polling = if std::env::args().any(|a| a == "--busy") {
            Polling::Busy
        } else {
            Polling::Adaptive
        };
        o
    };
    let server = Context::af_xdp(&opts(End::A, &a, 1, 0)).expect("AF_XDP server");
    let client = Context::af_xdp(&opts(End::B, &b, 2, 1)).expect("AF_XDP client");
    (
        server,
        client,
        Some(Lab { veth, a, b }),
        "AF_XDP across two namespaces",
    )
}

/// Percentile of sorted nanoseconds, in microseconds.
#[allow(dead_code)]
pub fn pct(sorted: &[u64], q: f64) -> f64 {
    if sorted.is_empty() {
        return 0.0;
    }
    sorted[((sorted.len() as f64 * q) as usize).min(sorted.len() - 1)] as f64 / 1000.0
}
