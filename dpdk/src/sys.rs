//! The C shim's functions (`shim/shim.h` is the binding; keep the two in
//! step). Hand-written rather than generated: see the crate docs.

use std::ffi::c_char;

/// `struct rte_mempool`, opaque.
#[repr(C)]
#[derive(Debug)]
pub struct RteMempool {
    _opaque: [u8; 0],
}

/// `struct rte_mbuf`, opaque.
#[repr(C)]
#[derive(Debug)]
pub struct RteMbuf {
    _opaque: [u8; 0],
}

extern "C" {
    pub fn shim_eal_init(argc: i32, argv: *mut *mut c_char) -> i32;
    pub fn shim_eal_cleanup() -> i32;
    pub fn shim_errno() -> i32;

    pub fn shim_pool_create(
        name: *const c_char,
        n: u32,
        cache: u32,
        data_room: u16,
    ) -> *mut RteMempool;
    pub fn shim_pool_free(pool: *mut RteMempool);
    pub fn shim_pool_avail(pool: *const RteMempool) -> u32;
    pub fn shim_thread_lcore(registered: *mut i32) -> i32;
    pub fn shim_thread_unregister();
    pub fn shim_lcore_id() -> i32;

    pub fn shim_dev_probe(devargs: *const c_char) -> i32;
    pub fn shim_port_by_name(name: *const c_char, port: *mut u16) -> i32;
    pub fn shim_port_driver(port: u16, buf: *mut c_char, len: usize) -> i32;
    pub fn shim_port_limits(
        port: u16,
        min_mtu: *mut u16,
        max_mtu: *mut u16,
        max_rx_pktlen: *mut u32,
    ) -> i32;
    pub fn shim_port_queue_limits(
        port: u16,
        max_rx_queues: *mut u16,
        max_tx_queues: *mut u16,
        rss_hf: *mut u64,
        hash_key_size: *mut u8,
    ) -> i32;
    #[allow(clippy::too_many_arguments)] // the C function's, one for one
    pub fn shim_port_init(
        port: u16,
        pool: *mut RteMempool,
        nb_queues: u16,
        nb_rxd: u16,
        nb_txd: u16,
        mtu: u16,
        rss_hf: u64,
        rss_key: *const u8,
        rss_key_len: u8,
    ) -> i32;
    pub fn shim_port_rss_conf(
        port: u16,
        key: *mut u8,
        cap: u8,
        key_len: *mut u8,
        rss_hf: *mut u64,
    ) -> i32;
    pub fn shim_port_mac(port: u16, mac: *mut u8) -> i32;
    pub fn shim_port_mtu(port: u16, mtu: *mut u16) -> i32;
    pub fn shim_port_stats(
        port: u16,
        ipackets: *mut u64,
        opackets: *mut u64,
        imissed: *mut u64,
        ierrors: *mut u64,
        oerrors: *mut u64,
        rx_nombuf: *mut u64,
    ) -> i32;
    pub fn shim_port_link_up(port: u16) -> i32;
    pub fn shim_port_close(port: u16, remove: i32) -> i32;

    pub fn shim_rx_burst(port: u16, queue: u16, pkts: *mut *mut RteMbuf, n: u16) -> u16;
    pub fn shim_tx_burst(port: u16, queue: u16, pkts: *mut *mut RteMbuf, n: u16) -> u16;
    pub fn shim_rss_hf_ipv4() -> u64;
    pub fn shim_rss_hf_ipv4_tcp() -> u64;
    pub fn shim_rss_hf_ipv4_sctp() -> u64;
    pub fn shim_mbuf_data(m: *const RteMbuf, seg_len: *mut u16, pkt_len: *mut u32) -> *const u8;
    pub fn shim_mbuf_copy(m: *const RteMbuf, buf: *mut u8, cap: u32) -> u32;
    pub fn shim_mbuf_from_parts(
        pool: *mut RteMempool,
        parts: *const ShimPart,
        n: u32,
    ) -> *mut RteMbuf;
    pub fn shim_mbuf_alloc_len(pool: *mut RteMempool, len: u16, out: *mut *mut RteMbuf) -> *mut u8;
    pub fn shim_mbuf_trim(m: *mut RteMbuf, len: u16) -> i32;
    pub fn shim_mbuf_free_bulk(pkts: *mut *mut RteMbuf, n: u32);
}

/// `struct shim_part`: one piece of a frame for `shim_mbuf_from_parts`.
#[repr(C)]
#[derive(Debug, Clone, Copy)]
pub struct ShimPart {
    /// First octet.
    pub data: *const u8,
    /// Octets.
    pub len: u32,
}
