//! An sctp-lite association set up by the real handshake, then driven by
//! the fuzzer as its peer (DATA chunks at arbitrary TSNs, streams, SSNs
//! and flags, raw chunk bytes with ports, tag and checksum fixed up,
//! reads, transmits, time), with a counting allocator: after every step
//! the heap the association holds grew by at most its receive buffer plus
//! a fixed slack, and its reassembly work stays within 24 entries per
//! chunk handed in. The proptest twin is `tests/tests/heap_bound.rs`.
#![no_main]
use std::alloc::{GlobalAlloc, Layout, System};
use std::cell::Cell;

use libfuzzer_sys::fuzz_target;
use sctp_lite::assoc::{Association, Config, ListenOutcome, Listener};
use sctp_lite::wire::{emit_packet, ChunkRepr, DataFlags, DataRepr, HeaderRepr, SctpPacket};

/// The system allocator, counting per thread the octets held.
struct Counting;

thread_local! {
    static HELD: Cell<isize> = const { Cell::new(0) };
}

fn count(delta: isize) {
    let _ = HELD.try_with(|h| h.set(h.get() + delta));
}

fn heap_held() -> isize {
    HELD.with(Cell::get)
}

// SAFETY: every method forwards to `System` with the caller's arguments
// unchanged; the counting touches only a const-initialized thread-local
// `Cell`, which never allocates.
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        // SAFETY: the caller upholds `alloc`'s contract.
        let p = unsafe { System.alloc(layout) };
        if !p.is_null() {
            count(layout.size() as isize);
        }
        p
    }
    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        // SAFETY: `ptr` came from `System` with `layout`.
        unsafe { System.dealloc(ptr, layout) };
        count(-(layout.size() as isize));
    }
    unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        // SAFETY: as for `alloc`.
        let p = unsafe { System.alloc_zeroed(layout) };
        if !p.is_null() {
            count(layout.size() as isize);
        }
        p
    }
    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        // SAFETY: `ptr` came from `System` with `layout`; the caller upholds
        // `realloc`'s contract for `new_size`.
        let p = unsafe { System.realloc(ptr, layout, new_size) };
        if !p.is_null() {
            count(new_size as isize - layout.size() as isize);
        }
        p
    }
}

#[global_allocator]
static ALLOC: Counting = Counting;

const RECV_BUFFER: u32 = 64 * 1024;
const SLACK: isize = 48 * 1024;

fn cfg(s: u8) -> Config {
    Config {
        secret: [s; 16],
        streams: 4,
        max_packet: 1200,
        recv_buffer: RECV_BUFFER,
        send_buffer: 64 * 1024,
        max_message: 16 * 1024,
        max_fragments: 64,
        max_tsn_window: 4096,
        ..Config::default()
    }
}

fuzz_target!(|data: &[u8]| {
    let mut a = Association::connect(cfg(1), 1, 2, 0, 0).expect("config");
    let mut l = Listener::new(cfg(2)).expect("config");
    let (mut buf, mut out) = (vec![0u8; 2048], vec![0u8; 2048]);
    let n = a.poll_transmit(0, &mut buf).expect("INIT");
    let ListenOutcome::Reply(m) = l.handle_packet(0, &buf[..n], &mut out) else {
        return;
    };
    a.handle_packet(0, &out[..m]);
    let n = a.poll_transmit(0, &mut buf).expect("COOKIE-ECHO");
    let ListenOutcome::Accept(b) = l.handle_packet(0, &buf[..n], &mut out) else {
        return;
    };
    let mut b = *b;
    while let Some(n) = b.poll_transmit(0, &mut out) {
        a.handle_packet(0, &out[..n]);
    }
    // One message from a shows the TSN b expects next.
    let _ = a.send(0, 0, false, b"x");
    let mut base = 0u32;
    while let Some(n) = a.poll_transmit(0, &mut buf) {
        if let Ok(p) = SctpPacket::new_checked(&buf[..n]) {
            for c in p.chunks().flatten() {
                if let Ok(ChunkRepr::Data(d)) = ChunkRepr::parse(&c) {
                    base = d.tsn.wrapping_add(1);
                }
            }
        }
        b.handle_packet(0, &buf[..n]);
    }
    while b.poll_event().is_some() {}
    let h = HeaderRepr {
        src_port: b.peer_port(),
        dst_port: b.local_port(),
        verification_tag: b.local_tag(),
    };
    let payload = vec![0xa5u8; 1200];
    let mut pkt = vec![0u8; 2048];
    let mut now = 0u64;
    let start = heap_held();
    // DATA chunks handed in (a raw packet may carry one per 16 octets)
    // and the reassembly work before the first: the work per chunk stays
    // bounded, amortised (as `tests/tests/heap_bound.rs` checks).
    let (mut chunks, work0) = (0u64, b.rx_work());
    let mut i = 0;
    while i + 6 <= data.len() {
        let op = &data[i..i + 6];
        i += 6;
        match op[0] % 8 {
            0..=4 => {
                let d = DataRepr {
                    flags: DataFlags {
                        immediate: op[1] & 8 != 0,
                        unordered: op[1] & 4 != 0,
                        begin: op[1] & 2 != 0,
                        end: op[1] & 1 != 0,
                    },
                    tsn: base.wrapping_add(u32::from(u16::from_le_bytes([op[2], op[3]]) % 1024)),
                    stream_id: u16::from(op[1] >> 4 & 7),
                    ssn: u16::from(op[4] & 15),
                    ppid: 0,
                    payload: &payload[..usize::from(op[5]) * 4 + 1],
                };
                if let Ok(n) = emit_packet(&h, &[ChunkRepr::Data(d)], &mut pkt) {
                    chunks += 1;
                    b.handle_packet(now, &pkt[..n]);
                }
            }
            5 => {
                let len = usize::from(op[1]).min(data.len() - i);
                chunks += len as u64 / 16 + 1;
                let n = 12 + len;
                pkt[12..n].copy_from_slice(&data[i..i + len]);
                i += len;
                let mut p = SctpPacket::new_unchecked(&mut pkt[..n]);
                p.set_src_port(h.src_port);
                p.set_dst_port(h.dst_port);
                p.set_verification_tag(h.verification_tag);
                p.fill_checksum();
                b.handle_packet(now, &pkt[..n]);
            }
            6 => {
                if op[1] & 1 == 0 {
                    while b.poll_event().is_some() {}
                } else {
                    while b.poll_transmit(now, &mut buf).is_some() {}
                }
            }
            _ => {
                now = now.saturating_add(u64::from(op[1]) * 20_000_000);
                if b.poll_timeout().is_some_and(|t| t <= now) {
                    b.handle_timeout(now);
                }
            }
        }
        assert!(b.recv_buffered() <= RECV_BUFFER as usize);
        let grew = heap_held() - start;
        assert!(
            grew <= RECV_BUFFER as isize + SLACK,
            "the association grew by {grew} octets (charged {})",
            b.recv_buffered()
        );
        let work = b.rx_work() - work0;
        assert!(
            work <= 24 * chunks,
            "{work} reassembly entries visited for {chunks} chunks"
        );
    }
});
