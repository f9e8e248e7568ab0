//! Helpers shared by the SctpHost tests: start an engine on a device,
//! wait for its outputs (bounded), make and collect DDP segments.

#![allow(dead_code)] // each test file uses a part

use std::collections::{BTreeMap, VecDeque};
use std::time::{Duration, Instant};

use ddp_sctp::DdpEvent;
use iwarp_datapath::over_sctp::{
    AssocId, SctpCommand, SctpHost, SctpHostConfig, SctpOutput, SCTP_UDP_PORT,
};
use iwarp_datapath::runtime::{spawn, LoopHandle, Mode};
use iwarp_frame::FrameDevice;

/// Octets of every test segment.
pub const SEG: usize = 1000;
/// How long any one step may take before the test fails (a bound on the
/// wait loops, not a measurement).
pub const STEP: Duration = Duration::from_secs(20);

/// Starts an engine; `udp` turns on UDP encapsulation on port 9899
/// (RFC 6951), with SCTP packets 8 octets smaller.
pub fn start<D: FrameDevice + 'static>(
    mac: [u8; 6],
    ip: [u8; 4],
    dev: D,
    udp: bool,
) -> LoopHandle<SctpHost> {
    let mut cfg = SctpHostConfig::new(mac, ip, [mac[5]; 16]);
    cfg.sctp.streams = 4;
    if udp {
        cfg.udp_port = Some(SCTP_UDP_PORT);
        cfg.sctp.max_packet -= 8;
    }
    // Short RTO.Min so a frame a busy host drops is resent quickly, and a
    // delayed SACK shorter than it (RFC 9260's defaults keep 200 ms under
    // 1 s; 200 ms over 50 ms made a spurious T3 retransmission every run).
    cfg.sctp.rto_min = 50_000_000;
    cfg.sctp.rto_initial = 200_000_000;
    cfg.sctp.sack_delay = 10_000_000;
    spawn(
        SctpHost::new(cfg).unwrap(),
        dev,
        None,
        Mode::Adaptive {
            spins: 1_000,
            max_sleep: Duration::from_micros(200),
        },
        4096,
    )
}

/// Waits for outputs of one host, keeping those not asked for.
pub struct Host {
    pub h: LoopHandle<SctpHost>,
    pub name: &'static str,
    pub kept: VecDeque<SctpOutput>,
}

impl Host {
    pub fn post(&self, c: SctpCommand) {
        // Bounded: the loop drains 64 commands per round.
        for _ in 0..100_000 {
            match self.h.post(c.clone()) {
                Ok(()) => return,
                Err(_) => std::thread::yield_now(),
            }
        }
        panic!("{}: command queue stays full", self.name);
    }

    /// The first output `pick` accepts, waiting up to [`STEP`].
    pub fn wait<T>(&mut self, what: &str, pick: impl FnMut(&SctpOutput) -> Option<T>) -> T {
        match self.wait_for(STEP, pick) {
            Some(t) => t,
            None => panic!(
                "{}: no {what} within {STEP:?}; outputs so far: {:?}",
                self.name, self.kept
            ),
        }
    }

    /// The first output `pick` accepts, waiting up to `limit`.
    pub fn wait_for<T>(
        &mut self,
        limit: Duration,
        mut pick: impl FnMut(&SctpOutput) -> Option<T>,
    ) -> Option<T> {
        if let Some(i) = self.kept.iter().position(|o| pick(o).is_some()) {
            let o = self.kept.remove(i)?;
            return pick(&o);
        }
        let end = Instant::now() + limit;
        while Instant::now() < end {
            match self.h.poll() {
                Some(o) => match pick(&o) {
                    Some(t) => return Some(t),
                    None => self.kept.push_back(o),
                },
                None => std::thread::sleep(Duration::from_micros(100)),
            }
        }
        None
    }
}

pub fn segment(from: u8, i: usize) -> Vec<u8> {
    (0..SEG)
        .map(|k| (k as u8) ^ (i as u8).wrapping_mul(31) ^ from)
        .collect()
}

/// Collects `n` segments on stream 0 for association `id`: DDP-SSN → bytes.
pub fn receive(h: &mut Host, id: AssocId, n: usize) -> BTreeMap<u16, Vec<u8>> {
    let mut got = BTreeMap::new();
    while got.len() < n {
        let (ssn, seg) = h.wait("segment", |o| match o {
            SctpOutput::Event(
                a,
                DdpEvent::Segment {
                    stream: 0,
                    ddp_ssn,
                    segment,
                },
            ) if *a == id => Some((*ddp_ssn, segment.clone())),
            _ => None,
        });
        assert!(
            got.insert(ssn, seg).is_none(),
            "{}: DDP-SSN {ssn} twice",
            h.name
        );
    }
    got
}

impl Host {
    /// Wraps a running engine.
    pub fn new(h: LoopHandle<SctpHost>, name: &'static str) -> Self {
        Host {
            h,
            name,
            kept: VecDeque::new(),
        }
    }
}
