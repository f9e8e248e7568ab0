//! Passive opens: a listener with a bounded backlog and a bound on half-open
//! connections, and RFC 6528 initial sequence numbers.

use std::collections::VecDeque;
use std::hash::{Hash, Hasher};

use crate::tcp::{Config, Connection, State};
use crate::wire::{Ipv4Address, TcpFlags, TcpRepr};

/// RFC 6528 §3: ISN = M + F(localip, localport, remoteip, remoteport, secretkey),
/// M a 4-microsecond timer. F here is SipHash (std's `DefaultHasher`) keyed
/// by hashing the secret first; the caller draws the secret at start-up.
#[derive(Debug, Clone)]
pub struct IsnGenerator {
    secret: [u8; 16],
}

impl IsnGenerator {
    /// A generator with a secret the caller drew from a good random source.
    pub fn new(secret: [u8; 16]) -> Self {
        IsnGenerator { secret }
    }

    /// The ISN for a connection at `now` (nanoseconds).
    pub fn isn(&self, local: (Ipv4Address, u16), remote: (Ipv4Address, u16), now: u64) -> u32 {
        let mut h = std::collections::hash_map::DefaultHasher::new();
        self.secret.hash(&mut h);
        local.0 .0.hash(&mut h);
        local.1.hash(&mut h);
        remote.0 .0.hash(&mut h);
        remote.1.hash(&mut h);
        let f = h.finish() as u32;
        ((now / 4_000) as u32).wrapping_add(f)
    }
}

/// Why a SYN was not taken.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Refusal {
    /// Too many half-open connections (SYN flood bound).
    HalfOpenFull,
    /// The accept queue is full.
    BacklogFull,
    /// Not a SYN.
    NotSyn,
}

/// One listening port.
#[derive(Debug)]
pub struct Listener {
    cfg: Config,
    port: u16,
    backlog: usize,
    max_half_open: usize,
    half_open: Vec<(Ipv4Address, Connection)>,
    ready: VecDeque<(Ipv4Address, Connection)>,
    /// SYNs refused for a full half-open table.
    pub refused_half_open: u64,
    /// SYNs refused for a full backlog.
    pub refused_backlog: u64,
}

impl Listener {
    /// Listen on `port`.
    pub fn new(cfg: Config, port: u16, backlog: usize, max_half_open: usize) -> Self {
        Listener {
            cfg,
            port,
            backlog,
            max_half_open,
            half_open: Vec::new(),
            ready: VecDeque::new(),
            refused_half_open: 0,
            refused_backlog: 0,
        }
    }

    /// Port.
    pub fn port(&self) -> u16 {
        self.port
    }

    /// Take a SYN for this port from `src`. On refusal the caller answers
    /// with nothing (half-open bound: let the peer retry) or RST.
    pub fn on_syn(&mut self, src: Ipv4Address, syn: &TcpRepr<'_>, isn: u32) -> Result<(), Refusal> {
        if !syn.flags.contains(TcpFlags::SYN) || syn.flags.contains(TcpFlags::ACK) {
            return Err(Refusal::NotSyn);
        }
        // A retransmitted SYN for a half-open connection we already have.
        if self
            .half_open
            .iter()
            .any(|(a, c)| *a == src && c.remote_port() == syn.src_port)
        {
            return Ok(());
        }
        if self.half_open.len() >= self.max_half_open {
            self.refused_half_open += 1;
            return Err(Refusal::HalfOpenFull);
        }
        if self.ready.len() + self.half_open.len() >= self.backlog {
            self.refused_backlog += 1;
            return Err(Refusal::BacklogFull);
        }
        self.half_open
            .push((src, Connection::accept(self.cfg, syn, isn)));
        Ok(())
    }

    /// The half-open connection a segment belongs to, if any.
    pub fn half_open_mut(&mut self, src: Ipv4Address, src_port: u16) -> Option<&mut Connection> {
        self.half_open
            .iter_mut()
            .find(|(a, c)| *a == src && c.remote_port() == src_port)
            .map(|(_, c)| c)
    }

    /// Iterate half-open connections (to poll their transmissions and timers).
    pub fn half_open_iter_mut(&mut self) -> impl Iterator<Item = &mut (Ipv4Address, Connection)> {
        self.half_open.iter_mut()
    }

    /// Move established connections to the accept queue; drop dead ones.
    pub fn settle(&mut self) {
        let mut i = 0;
        while i < self.half_open.len() {
            match self.half_open[i].1.state() {
                State::SynReceived => i += 1,
                State::Closed => {
                    self.half_open.swap_remove(i);
                }
                _ => {
                    let c = self.half_open.swap_remove(i);
                    self.ready.push_back(c);
                }
            }
        }
    }

    /// Next established connection.
    pub fn accept(&mut self) -> Option<(Ipv4Address, Connection)> {
        self.settle();
        self.ready.pop_front()
    }

    /// Half-open connections.
    pub fn half_open_len(&self) -> usize {
        self.half_open.len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const PEER: Ipv4Address = Ipv4Address([10, 0, 0, 9]);

    fn syn(port: u16) -> TcpRepr<'static> {
        let mut r = TcpRepr::new(port, 80, 1000, TcpFlags::SYN);
        r.window = 65535;
        r.max_seg_size = Some(1460);
        r
    }

    #[test]
    fn isn_depends_on_tuple_secret_and_time() {
        let g = IsnGenerator::new([7; 16]);
        let l = (Ipv4Address([10, 0, 0, 1]), 80);
        let a = g.isn(l, (PEER, 1000), 0);
        assert_ne!(a, g.isn(l, (PEER, 1001), 0));
        assert_ne!(a, IsnGenerator::new([8; 16]).isn(l, (PEER, 1000), 0));
        assert_eq!(g.isn(l, (PEER, 1000), 4_000_000).wrapping_sub(a), 1000); // M ticks every 4 µs
    }

    #[test]
    fn half_open_bound_and_backlog() {
        let mut l = Listener::new(Config::default(), 80, 3, 2);
        assert_eq!(l.on_syn(PEER, &syn(1), 1), Ok(()));
        assert_eq!(l.on_syn(PEER, &syn(1), 1), Ok(()), "retransmitted SYN");
        assert_eq!(l.half_open_len(), 1);
        assert_eq!(l.on_syn(PEER, &syn(2), 1), Ok(()));
        assert_eq!(l.on_syn(PEER, &syn(3), 1), Err(Refusal::HalfOpenFull));
        assert_eq!(l.refused_half_open, 1);
        for (_, c) in l.half_open_iter_mut() {
            c.poll_transmit(0, 1, &mut |r| {
                assert!(r.flags.contains(TcpFlags::SYN | TcpFlags::ACK))
            });
        }
        let mut ack = TcpRepr::new(1, 80, 1001, TcpFlags::ACK);
        ack.ack_number = 2; // ISN 1 + 1
        ack.window = 100;
        l.half_open_mut(PEER, 1)
            .unwrap()
            .handle_segment(&ack, 0, &mut |_| {});
        let (a, c) = l.accept().unwrap();
        assert_eq!((a, c.state()), (PEER, State::Established));
        assert_eq!(l.on_syn(PEER, &syn(4), 1), Ok(()));
        assert_eq!(l.on_syn(PEER, &syn(5), 1), Err(Refusal::HalfOpenFull));
        assert_eq!(
            l.on_syn(PEER, &TcpRepr::new(6, 80, 0, TcpFlags::ACK), 1),
            Err(Refusal::NotSyn)
        );
    }
}
