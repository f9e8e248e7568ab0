//! One-copy transmit, shown: every octet the sender reads out of a
//! registered region for a large RDMA Write is read once, straight into a
//! frame buffer the device lent (`FrameSink::send_built`) when MPA's CRC
//! is off, and into the loop thread's bounce buffer when it is on (where
//! the CRC is taken, and whence the frame gets the octets: a copy in the
//! cache, `iwarp_proto::txq::bounce_span`); none anywhere else (no send
//! buffer, no scratch frame). The same transfer with `StackConfig::copy_tx`
//! (FPDUs framed into TCP's send buffer) reads every octet into TCP's ring
//! instead: the check can fail.
//!
//! Two stacks driven by hand on one thread (no poll loop), frames handed
//! across as the sink gets them.

#![allow(clippy::unwrap_used)] // test harness: a failed unwrap is a failed test

use std::sync::{Arc, Mutex};

use iwarp_control::MpaConfig;
use iwarp_datapath::over_tcp::{CmEvent, HostCommand, HostOutput};
use iwarp_datapath::runtime::{Engine, FrameSink};
use iwarp_datapath::stack::{Command, Output, Stack, StackConfig, Transport, Ulp};
use iwarp_datapath::StreamParams;
use iwarp_proto::mem::{Access, MemoryTable, PdId, RegionMemory, STag};
use iwarp_proto::qp::{Sge, WcStatus, WorkRequest};
use tcp_lite::iface::IfaceConfig;
use tcp_lite::wire::{EthernetAddress, Ipv4Address};

const IP_A: Ipv4Address = Ipv4Address::new(10, 6, 0, 1);
const IP_B: Ipv4Address = Ipv4Address::new(10, 6, 0, 2);
const MSG: usize = 64 * 1024;
const WRITES: u64 = 16;

/// Where the sender's source octets went: into the buffer the device had
/// lent at that moment, or elsewhere.
#[derive(Debug, Default)]
struct Reads {
    /// Address ranges of the buffers being built now (one, or a jumbo
    /// frame's chunks).
    lent: Vec<(usize, usize)>,
    into_lent: u64,
    /// Into this thread's bounce buffer (MPA's CRC on).
    into_bounce: u64,
    elsewhere: u64,
}

/// A region that reports where each read lands.
#[derive(Debug)]
struct Watched {
    data: Vec<u8>,
    reads: Arc<Mutex<Reads>>,
}

impl RegionMemory for Watched {
    fn len(&self) -> usize {
        self.data.len()
    }
    fn write_at(&mut self, offset: usize, src: &[u8]) -> bool {
        self.data.write_at(offset, src)
    }
    fn read_at(&self, offset: usize, dst: &mut [u8]) -> bool {
        let (lo, hi) = (dst.as_ptr() as usize, dst.as_ptr() as usize + dst.len());
        let mut r = self.reads.lock().unwrap();
        let bounce = iwarp_proto::txq::bounce_span();
        if r.lent.iter().any(|&(a, b)| a <= lo && hi <= b) {
            r.into_lent += dst.len() as u64;
        } else if bounce.start <= lo && hi <= bounce.end && lo < hi {
            r.into_bounce += dst.len() as u64;
        } else {
            r.elsewhere += dst.len() as u64;
        }
        drop(r);
        self.data.read_at(offset, dst)
    }
}

/// A device: built frames go into a buffer it lends (its range noted while
/// the build runs), or into chunks of `chunk` octets each where the frame
/// is longer (as AF_XDP lends a jumbo frame's UMEM chunks); parts are
/// joined; every frame is queued for the peer.
struct Sink<'a> {
    frames: &'a mut Vec<Vec<u8>>,
    reads: &'a Mutex<Reads>,
    chunk: usize,
}

impl FrameSink for Sink<'_> {
    fn send_parts(&mut self, parts: &[&[u8]]) -> bool {
        self.frames.push(parts.concat());
        true
    }
    fn send_built(&mut self, len: usize, build: &mut dyn FnMut(&mut [u8]) -> bool) -> bool {
        let mut buf = vec![0u8; len];
        let at = buf.as_ptr() as usize;
        self.reads.lock().unwrap().lent = vec![(at, at + len)];
        let ok = build(&mut buf);
        self.reads.lock().unwrap().lent.clear();
        if ok {
            self.frames.push(buf);
        }
        ok
    }
    fn send_built_sg(
        &mut self,
        len: usize,
        build: &mut dyn FnMut(&mut [&mut [u8]]) -> bool,
    ) -> bool {
        let mut chunks: Vec<Vec<u8>> = Vec::new();
        let mut left = len;
        while left > 0 {
            let n = left.min(self.chunk);
            chunks.push(vec![0u8; n]);
            left -= n;
        }
        self.reads.lock().unwrap().lent = chunks
            .iter()
            .map(|c| (c.as_ptr() as usize, c.as_ptr() as usize + c.len()))
            .collect();
        let mut pieces: Vec<&mut [u8]> = chunks.iter_mut().map(|c| &mut c[..]).collect();
        let ok = build(&mut pieces);
        self.reads.lock().unwrap().lent.clear();
        if ok {
            self.frames.push(chunks.concat());
        }
        ok
    }
}

fn stack(ip: Ipv4Address, last: u8, copy_tx: bool, mtu: usize, mem: MemoryTable) -> Stack {
    let mut iface = IfaceConfig::new(EthernetAddress([0x02, 0, 0, 0, 0, last]), ip, 24);
    iface.mtu = mtu;
    let mut c = StackConfig::new(iface);
    c.tcp.mss = (mtu - 40) as u16;
    c.copy_tx = copy_tx;
    Stack::new(c, mem)
}

fn ulp(pd: PdId, crc: bool) -> Ulp {
    Ulp::Iwarp {
        // With the MPA CRC, a jumbo FPDU's CRC runs across its chunks.
        mpa: MpaConfig {
            crc,
            ..MpaConfig::default()
        },
        params: StreamParams {
            pd,
            emss: 8960,
            sq_depth: 64,
            rq_depth: 16,
        },
        manual: false,
        cq: None,
        srq: None,
    }
}

/// Move `WRITES` Writes of `MSG` octets from B's watched region into A's
/// at `mtu` (frames longer than 4096 octets lent as 4096-octet chunks);
/// returns what the watch saw and the segments B retransmitted.
fn transfer(copy_tx: bool, mtu: usize, crc: bool) -> (Reads, u64) {
    let reads = Arc::new(Mutex::new(Reads::default()));
    let mut mem_a = MemoryTable::new();
    let pd_a = mem_a.alloc_pd();
    let sink_stag = mem_a
        .register(pd_a, vec![0u8; MSG], Access::REMOTE_WRITE, 0)
        .unwrap();
    let mut mem_b = MemoryTable::new();
    let pd_b = mem_b.alloc_pd();
    let data: Vec<u8> = (0..MSG).map(|i| (i * 13 + i / 509) as u8).collect();
    let src: STag = mem_b
        .register(
            pd_b,
            Watched {
                data: data.clone(),
                reads: reads.clone(),
            },
            Access::LOCAL_READ,
            0,
        )
        .unwrap();
    let mut a = stack(IP_A, 1, copy_tx, mtu, mem_a);
    let mut b = stack(IP_B, 2, copy_tx, mtu, mem_b);
    a.handle_command(
        Command::Listen {
            transport: Transport::Tcp,
            port: 7000,
            ulp: ulp(pd_a, crc),
        },
        0,
    );
    b.handle_command(
        Command::Connect {
            transport: Transport::Tcp,
            token: 1,
            remote: IP_A,
            port: 7000,
            ulp: ulp(pd_b, crc),
        },
        0,
    );
    let (mut sock_b, mut posted, mut done) = (None, 0u64, 0u64);
    let (mut to_a, mut to_b) = (Vec::new(), Vec::new());
    let mut now = 0u64;
    for _ in 0..200_000 {
        now += 10_000;
        let mut outs_b = Vec::new();
        a.poll(
            now,
            &mut Sink {
                frames: &mut to_b,
                reads: &reads,
                chunk: 4096,
            },
            &mut |_| {},
        );
        b.poll(
            now,
            &mut Sink {
                frames: &mut to_a,
                reads: &reads,
                chunk: 4096,
            },
            &mut |o| outs_b.push(o),
        );
        for f in to_a.drain(..) {
            a.handle_frame(&f, now);
        }
        for f in to_b.drain(..) {
            b.handle_frame(&f, now);
        }
        for o in outs_b {
            match o {
                Output::Cm(id, CmEvent::Established(_)) => sock_b = Some(id),
                Output::Iwarp(_, HostOutput::Completion(c)) => {
                    assert_eq!(c.status, WcStatus::Success);
                    done += 1;
                }
                Output::Iwarp(_, other) => panic!("sender: {other:?}"),
                _ => {}
            }
        }
        if let Some(sock) = sock_b {
            while posted < WRITES && posted - done < 4 {
                let wr = WorkRequest::Write {
                    wr_id: posted,
                    signaled: true,
                    local: Sge {
                        stag: src,
                        to: 0,
                        len: MSG as u32,
                    }
                    .into(),
                    remote_stag: sink_stag,
                    remote_to: 0,
                };
                b.handle_command(Command::Iwarp(sock, HostCommand::PostSend(wr)), now);
                posted += 1;
            }
        }
        if done == WRITES {
            let rtx = b.tcp_totals();
            let resent = rtx.rto_retransmits + rtx.fast_retransmits + rtx.tlp_probes;
            let r = std::mem::take(&mut *reads.lock().unwrap());
            return (r, resent);
        }
    }
    panic!("{done} of {WRITES} Writes completed");
}

#[test]
fn a_written_octet_is_read_once_straight_into_the_lent_frame() {
    // MTU 1500: one buffer per frame; MTU 9000: a frame over three chunks,
    // its FPDU's CRC running across them. Without MPA's CRC each octet
    // goes straight into its frame; with it, through the bounce buffer.
    for crc in [false, true] {
        for mtu in [1500, 9000] {
            let (r, resent) = transfer(false, mtu, crc);
            let total = WRITES * MSG as u64;
            assert_eq!(
                r.elsewhere, 0,
                "MTU {mtu}, CRC {crc}: octets read into anything but a lent frame or the bounce buffer: {r:?}"
            );
            assert_eq!(resent, 0, "a lossless link: nothing sent twice");
            let (lent, bounce) = if crc { (0, total) } else { (total, 0) };
            assert_eq!(
                (r.into_lent, r.into_bounce),
                (lent, bounce),
                "MTU {mtu}, CRC {crc}: each octet read once: {r:?}"
            );
        }
    }
}

#[test]
fn the_copy_transmit_baseline_reads_into_the_send_buffer() {
    for mtu in [1500, 9000] {
        let (r, _) = transfer(true, mtu, true);
        assert_eq!((r.into_lent, r.into_bounce), (0, 0), "{r:?}");
        assert_eq!(r.elsewhere, WRITES * MSG as u64, "{r:?}");
    }
}
