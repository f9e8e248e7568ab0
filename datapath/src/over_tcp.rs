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
