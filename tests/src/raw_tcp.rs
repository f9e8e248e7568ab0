//! A hostile TCP peer of a [`Stack`], in virtual time: its own Ethernet/IPv4
//! interface (ARP answered as any host does) and hand-made TCP segments,
//! so it can finish handshakes and then send whatever it likes — out of
//! order, above gaps, garbage — on many connections. No threads, no
//! clock: [`RawPeer::step`] advances time by a fixed tick, delivers what
//! each side sent and polls the stack.

use iwarp_datapath::stack::{Output, Stack};
use tcp_lite::iface::{IfaceConfig, Interface, TcpInterface};
use tcp_lite::wire::{EthernetAddress, Ipv4Address, TcpFlags, TcpRepr};

/// One connection as the peer sees it.
#[derive(Debug, Clone)]
pub struct RawConn {
    /// Our port.
    pub port: u16,
    /// Our next sequence number.
    pub snd_nxt: u32,
    /// The stack's next sequence number we expect (set by its SYN-ACK).
    pub rcv_nxt: Option<u32>,
    /// Octets of payload the stack sent us (in order or not).
    pub rx_octets: usize,
    /// The stack reset the connection.
    pub reset: bool,
}

/// The peer and the stack it talks to. See the [module docs](self).
#[derive(Debug)]
pub struct RawPeer {
    /// The stack under test.
    pub stack: Stack,
    /// Its outputs since the test last took them.
    pub outputs: Vec<Output>,
    /// Our connections, by index.
    pub conns: Vec<RawConn>,
    iface: Interface,
    stack_ip: Ipv4Address,
    server_port: u16,
    now: u64,
    tick: u64,
    to_stack: Vec<Vec<u8>>,
}

impl RawPeer {
    /// A peer at `ip` (MAC ending in `last`) talking to `stack`, which
    /// listens (or will) at `stack_ip:server_port`; `tick` ns per step.
    pub fn new(
        stack: Stack,
        stack_ip: Ipv4Address,
        server_port: u16,
        ip: Ipv4Address,
        last: u8,
        tick: u64,
    ) -> Self {
        let cfg = IfaceConfig::new(EthernetAddress([0x02, 0, 0, 0, 0x77, last]), ip, 24);
        RawPeer {
            stack,
            outputs: Vec::new(),
            conns: Vec::new(),
            iface: Interface::new(cfg),
            stack_ip,
            server_port,
            now: 1_000_000,
            tick,
            to_stack: Vec::new(),
        }
    }

    /// Virtual time now (ns).
    pub fn now(&self) -> u64 {
        self.now
    }

    /// Open a connection from `port` (SYN with MSS 1460, window scale 7,
    /// SACK permitted); its index in [`conns`](Self::conns).
    pub fn open(&mut self, port: u16) -> usize {
        let iss = 0x1000_0000u32.wrapping_mul(u32::from(port));
        let mut syn = TcpRepr::new(port, self.server_port, iss, TcpFlags::SYN);
        syn.window = 65_535;
        syn.max_seg_size = Some(1460);
        syn.window_scale = Some(7);
        syn.sack_permitted = true;
        self.send(&syn);
        self.conns.push(RawConn {
            port,
            snd_nxt: iss.wrapping_add(1),
            rcv_nxt: None,
            rx_octets: 0,
            reset: false,
        });
        self.conns.len() - 1
    }

    /// Send `payload` on connection `i` at `offset` octets past our next
    /// sequence number (0: in order; more: above a gap), acknowledging
    /// what the stack sent. In order, our next sequence number advances.
    pub fn send_at(&mut self, i: usize, offset: u32, payload: &[u8]) {
        let c = &self.conns[i];
        let mut seg = TcpRepr::new(
            c.port,
            self.server_port,
            c.snd_nxt.wrapping_add(offset),
            TcpFlags::ACK | TcpFlags::PSH,
        );
        seg.ack_number = c.rcv_nxt.unwrap_or(0);
        seg.window = 65_535;
        seg.payload = payload;
        self.send(&seg);
        if offset == 0 {
            let c = &mut self.conns[i];
            c.snd_nxt = c.snd_nxt.wrapping_add(payload.len() as u32);
        }
    }

    /// Reset connection `i` (RST at our next sequence number, which the
    /// stack accepts: RFC 5961 §3.2's exact match).
    pub fn reset(&mut self, i: usize) {
        let c = &self.conns[i];
        let rst = TcpRepr::new(c.port, self.server_port, c.snd_nxt, TcpFlags::RST);
        self.send(&rst);
    }

    fn send(&mut self, seg: &TcpRepr<'_>) {
        let to = &mut self.to_stack;
        let now = self.now;
        let _ = self
            .iface
            .send_tcp(self.stack_ip, seg, now, &mut |p: &[&[u8]]| {
                to.push(p.concat())
            });
    }

    /// One tick: frames to the stack, a stack round, its frames to us
    /// (SYN-ACKs answered with the handshake's ACK).
    pub fn step(&mut self) {
        self.now += self.tick;
        let now = self.now;
        let from_stack =
            crate::stack_round(&mut self.stack, &mut self.to_stack, &mut self.outputs, now);
        let mut acks = Vec::new();
        for f in &from_stack {
            let to = &mut self.to_stack;
            let Some(ing) = self.iface.receive(f, now, &mut |r| to.push(r.to_vec())) else {
                continue;
            };
            let seg = ing.seg;
            let Some(i) = self.conns.iter().position(|c| c.port == seg.dst_port) else {
                continue;
            };
            let c = &mut self.conns[i];
            if seg.flags.contains(TcpFlags::RST) {
                c.reset = true;
                continue;
            }
            if seg.flags.contains(TcpFlags::SYN) {
                if c.rcv_nxt.is_none() {
                    c.rcv_nxt = Some(seg.seq_number.wrapping_add(1));
                    acks.push(i);
                }
                continue;
            }
            c.rx_octets += seg.payload.len();
            if let Some(n) = c.rcv_nxt {
                let end = seg.seq_number.wrapping_add(seg.payload.len() as u32);
                if (end.wrapping_sub(n) as i32) > 0 && (seg.seq_number.wrapping_sub(n) as i32) <= 0
                {
                    c.rcv_nxt = Some(end);
                }
            }
        }
        for i in acks {
            self.send_at(i, 0, &[]);
        }
        let to = &mut self.to_stack;
        self.iface.poll(now, &mut |f| to.push(f.to_vec()));
    }

    /// `n` steps.
    pub fn run(&mut self, n: usize) {
        for _ in 0..n {
            self.step();
        }
    }
}
