//! [`TcpHost`]: one iWARP-over-TCP connection as a poll-loop engine over
//! bare TCP segments (no Ethernet or IPv4), for tests of the loop and the
//! connection engine without the host stack.

use iwarp_net::iface::FrameSink;
use iwarp_proto::mem::MemoryTable;
use tcp_lite::wire::TcpRepr;

use crate::latency::CompletionLatency;
use crate::over_tcp::{HostCommand, HostOutput, IwarpOverTcp};

/// One host for a poll loop: an iWARP-over-TCP stack and its memory. Frames
/// are TCP segments with checksums over a fixed pseudo-header (the in-memory
/// link has no Ethernet/IPv4 layer yet).
#[derive(Debug)]
pub struct TcpHost {
    /// The stack.
    pub stack: IwarpOverTcp,
    /// Registered memory.
    pub mem: MemoryTable,
    /// The send-queue completions' latencies ([`IwarpOverTcp::drain`]).
    pub latency: CompletionLatency,
    local: tcp_lite::wire::Ipv4Address,
    remote: tcp_lite::wire::Ipv4Address,
    /// Commands since the last poll, with their time (posted there, where
    /// refusals have somewhere to go).
    posted: std::collections::VecDeque<(HostCommand, u64)>,
}

impl TcpHost {
    /// A host with its stack, memory, and the addresses used for checksums.
    pub fn new(stack: IwarpOverTcp, mem: MemoryTable, local: [u8; 4], remote: [u8; 4]) -> Self {
        TcpHost {
            stack,
            mem,
            latency: CompletionLatency::default(),
            local: tcp_lite::wire::Ipv4Address(local),
            remote: tcp_lite::wire::Ipv4Address(remote),
            posted: std::collections::VecDeque::new(),
        }
    }
}

impl crate::runtime::Engine for TcpHost {
    type Command = HostCommand;
    type Output = HostOutput;

    fn handle_frame(&mut self, frame: &[u8], now: u64) {
        use tcp_lite::wire::TcpPacket;
        let Ok(p) = TcpPacket::new_checked(frame) else {
            return;
        };
        let Ok(r) = TcpRepr::parse(&p, &self.remote, &self.local) else {
            return;
        };
        self.stack.handle_segment(&r, now, &mut self.mem);
    }

    fn poll_timeout(&self) -> Option<u64> {
        if !self.posted.is_empty() {
            return Some(0);
        }
        self.stack.poll_timeout()
    }

    fn handle_command(&mut self, cmd: HostCommand, now: u64) {
        self.posted.push_back((cmd, now));
    }

    fn poll(&mut self, now: u64, tx: &mut dyn FrameSink, out: &mut dyn FnMut(HostOutput)) -> bool {
        let mut busy = !self.posted.is_empty();
        // Work posted before the MPA exchange finished waits in the
        // stack (`IwarpOverTcp::post`).
        while let Some((cmd, at)) = self.posted.pop_front() {
            self.stack.post(cmd, at, &self.mem, out);
        }
        let (local, remote) = (self.local, self.remote);
        let mut buf = Vec::new();
        let n = self
            .stack
            .poll(now, &self.mem, 64, &mut |r, fill| match fill {
                None => {
                    buf.clear();
                    buf.resize(r.buffer_len(), 0);
                    let mut p = tcp_lite::wire::TcpPacket::new_unchecked(&mut buf[..]);
                    if r.emit(&mut p, &local, &remote).is_ok() {
                        tx.send_parts(&[&buf]);
                    }
                }
                // The payload is written in place after the header, which then
                // carries a checksum over it where it lies.
                Some(fill) => {
                    let header_len = r.header_len();
                    tx.send_built(header_len + fill.len, &mut |seg| {
                        let (header, payload) = seg.split_at_mut(header_len);
                        (fill.write)(0, payload)
                            && r.emit_header_over(header, payload, &local, &remote).is_ok()
                    });
                }
            });
        busy |= n > 0;
        busy |= self.stack.drain(now, &self.mem, &mut self.latency, out);
        busy
    }
}
