//! An iWARP connection over a tcp-lite TCP connection: the receive side hands
//! each in-order TCP payload slice straight to the MPA deframer (and so to DDP
//! placement) without a stream buffer; the send side moves whole FPDUs into
//! TCP's send buffer, never more than it has room for.

use iwarp_control::MpaConfig;
use iwarp_proto::mem::MemoryTable;
use tcp_lite::tcp::{Connection as Tcp, State as TcpState};
use tcp_lite::wire::TcpRepr;

use crate::{Connection, StreamParams};

/// Which side opens MPA.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Role {
    /// Sends the MPA Request.
    Initiator,
    /// Answers it.
    Responder,
}

/// iWARP over tcp-lite.
#[derive(Debug)]
pub struct IwarpOverTcp {
    /// The TCP connection.
    pub tcp: Tcp,
    /// The iWARP connection, created once TCP is established.
    pub iwarp: Option<Connection>,
    role: Role,
    mpa: MpaConfig,
    params: StreamParams,
    scratch: Vec<u8>,
}

impl IwarpOverTcp {
    /// Wrap a TCP connection (opening or accepted).
    pub fn new(tcp: Tcp, role: Role, mpa: MpaConfig, params: StreamParams) -> Self {
        IwarpOverTcp {
            tcp,
            iwarp: None,
            role,
            mpa,
            params,
            scratch: Vec::new(),
        }
    }

    fn ensure_iwarp(&mut self) {
        if self.iwarp.is_some()
            || !matches!(
                self.tcp.state(),
                TcpState::Established | TcpState::CloseWait
            )
        {
            return;
        }
        let params = StreamParams {
            emss: self.tcp.mss().min(usize::from(u16::MAX)) as u16,
            ..self.params
        };
        self.iwarp = match self.role {
            Role::Initiator => Connection::initiator(self.mpa.clone(), params).ok(),
            Role::Responder => Some(Connection::responder(self.mpa.clone(), params)),
        };
    }

    /// A received TCP segment for this connection.
    pub fn handle_segment(&mut self, seg: &TcpRepr<'_>, now: u64, mem: &mut MemoryTable) {
        self.ensure_iwarp();
        let IwarpOverTcp { tcp, iwarp, .. } = self;
        match iwarp {
            Some(c) => tcp.handle_segment(seg, now, &mut |d| c.receive(d, mem)),
            None => {
                // The segment that completes the handshake may carry data
                // already (the MPA Request): keep it until the connection exists.
                let mut early = Vec::new();
                tcp.handle_segment(seg, now, &mut |d| early.extend_from_slice(d));
                self.ensure_iwarp();
                if let Some(c) = &mut self.iwarp {
                    if !early.is_empty() {
                        c.receive(&early, mem);
                    }
                }
            }
        }
    }

    /// Run timers, move FPDUs into TCP, and hand up to `max` segments to `emit`.
    pub fn poll(
        &mut self,
        now: u64,
        mem: &MemoryTable,
        max: usize,
        emit: &mut dyn FnMut(&TcpRepr<'_>),
    ) -> usize {
        self.tcp.handle_timeout(now);
        self.ensure_iwarp();
        if let Some(c) = &mut self.iwarp {
            let room = self.tcp.send_room();
            if room > 0 {
                self.scratch.clear();
                let n = c.poll_transmit(mem, &mut self.scratch, room, usize::MAX);
                if n > 0 {
                    let took = self.tcp.send(&self.scratch);
                    debug_assert_eq!(took, n);
                }
            }
        }
        self.tcp.poll_transmit(now, max, emit)
    }

    /// Next timer deadline.
    pub fn poll_timeout(&self) -> Option<u64> {
        self.tcp.poll_timeout()
    }
}

/// Work an application thread hands to a [`TcpHost`] running in a poll loop.
#[derive(Debug, Clone, Copy)]
pub enum HostCommand {
    /// Post to the send queue.
    PostSend(iwarp_proto::qp::WorkRequest),
    /// Post a receive buffer.
    PostRecv(u64, iwarp_proto::qp::Sge),
}

/// What a [`TcpHost`] hands back.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum HostOutput {
    /// A work completion.
    Completion(iwarp_proto::qp::Completion),
    /// A stream event.
    Event(iwarp_proto::qp::QpEvent),
    /// A post the QP refused (or made before full operation).
    Refused(iwarp_proto::qp::PostError),
}

/// One host for a poll loop: an iWARP-over-TCP stack and its memory. Frames
/// are TCP segments with checksums over a fixed pseudo-header (the in-memory
/// link has no Ethernet/IPv4 layer yet).
#[derive(Debug)]
pub struct TcpHost {
    /// The stack.
    pub stack: IwarpOverTcp,
    /// Registered memory.
    pub mem: MemoryTable,
    local: tcp_lite::wire::Ipv4Address,
    remote: tcp_lite::wire::Ipv4Address,
    pending: std::collections::VecDeque<HostCommand>,
}

impl TcpHost {
    /// A host with its stack, memory, and the addresses used for checksums.
    pub fn new(stack: IwarpOverTcp, mem: MemoryTable, local: [u8; 4], remote: [u8; 4]) -> Self {
        TcpHost {
            stack,
            mem,
            local: tcp_lite::wire::Ipv4Address(local),
            remote: tcp_lite::wire::Ipv4Address(remote),
            pending: std::collections::VecDeque::new(),
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

    fn handle_command(&mut self, cmd: HostCommand, _now: u64) {
        // Commands that arrive before the MPA exchange finished wait here.
        self.pending.push_back(cmd);
    }

    fn poll(
        &mut self,
        now: u64,
        tx: &mut dyn FnMut(&[u8]),
        out: &mut dyn FnMut(HostOutput),
    ) -> bool {
        let mut busy = false;
        if let Some(qp) = self.stack.iwarp.as_mut().and_then(|c| c.qp()) {
            while let Some(cmd) = self.pending.pop_front() {
                let r = match cmd {
                    HostCommand::PostSend(wr) => qp.post_send(&self.mem, wr),
                    HostCommand::PostRecv(id, sge) => qp.post_recv(&self.mem, id, sge),
                };
                if let Err(e) = r {
                    out(HostOutput::Refused(e));
                }
                busy = true;
            }
        }
        let (local, remote) = (self.local, self.remote);
        let mut buf = Vec::new();
        let n = self.stack.poll(now, &self.mem, 64, &mut |r| {
            buf.clear();
            buf.resize(r.buffer_len(), 0);
            let mut p = tcp_lite::wire::TcpPacket::new_unchecked(&mut buf[..]);
            if r.emit(&mut p, &local, &remote).is_ok() {
                tx(&buf);
            }
        });
        busy |= n > 0;
        if let Some(qp) = self.stack.iwarp.as_mut().and_then(|c| c.qp()) {
            while let Some(c) = qp.poll_completion() {
                out(HostOutput::Completion(c));
                busy = true;
            }
            while let Some(e) = qp.poll_event() {
                out(HostOutput::Event(e));
                busy = true;
            }
        }
        busy
    }
}
