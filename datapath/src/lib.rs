//! The per-connection iWARP engine of the fast path.
//!
//! A [`Connection`] sits on one reliable byte stream (tcp-lite today in the
//! simulator, AF_XDP/DPDK-fed tcp-lite later): it runs the MPA Request/Reply
//! exchange through `iwarp-control`, then hands every received octet straight
//! to the queue pair's deframer, which places payload into registered memory
//! as it arrives. [`over_tcp`] runs it over tcp-lite's TCP; [`runtime`] holds
//! the core-pinned poll loops that drive engines from frame devices, with
//! lock-free queues to application threads.
#![forbid(unsafe_code)]
#![warn(missing_docs)]

pub mod over_tcp;
pub mod runtime;

use iwarp_control::{Initiator, MpaConfig, Negotiated, Responder, ResponderOutcome, SetupError};
use iwarp_proto::mem::{MemoryTable, PdId};
use iwarp_proto::mpa::mulpdu;
use iwarp_proto::qp::{Qp, QpConfig, QpState};

/// Per-stream parameters that do not come from the MPA exchange.
#[derive(Debug, Clone, Copy)]
pub struct StreamParams {
    /// Protection domain of the queue pair.
    pub pd: PdId,
    /// Effective MSS of the TCP connection (sizes FPDUs).
    pub emss: u16,
    /// Send queue depth.
    pub sq_depth: usize,
    /// Receive queue depth.
    pub rq_depth: usize,
}

#[derive(Debug)]
enum Phase {
    AwaitReply(Initiator),
    AwaitRequest(Responder),
    Rdma(Box<Qp>),
    Failed,
}

/// Connection phase as seen from outside.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ConnState {
    /// MPA exchange in progress.
    Connecting,
    /// Full operation (or terminated: see the QP's state).
    Rdma(QpState),
    /// Setup failed; close the transport.
    Failed,
}

/// One iWARP connection over a byte stream.
#[derive(Debug)]
pub struct Connection {
    phase: Phase,
    params: StreamParams,
    out: Vec<u8>,
    negotiated: Option<Negotiated>,
    /// Hold FPDUs until the peer's first FPDU arrived (RFC 6581 responder waits
    /// for the RTR; RFC 5044 Rev 1: the initiator sends first).
    hold_until_rx: bool,
    setup_error: Option<SetupError>,
}

impl Connection {
    /// Active side: the Request is queued for transmission at once.
    pub fn initiator(cfg: MpaConfig, params: StreamParams) -> Result<Self, SetupError> {
        let (ini, req) = Initiator::new(cfg)?;
        Ok(Connection {
            phase: Phase::AwaitReply(ini),
            params,
            out: req,
            negotiated: None,
            hold_until_rx: false,
            setup_error: None,
        })
    }

    /// Passive side: waits for the Request.
    pub fn responder(cfg: MpaConfig, params: StreamParams) -> Self {
        Connection {
            phase: Phase::AwaitRequest(Responder::new(cfg)),
            params,
            out: Vec::new(),
            negotiated: None,
            hold_until_rx: false,
            setup_error: None,
        }
    }

    /// Phase.
    pub fn state(&self) -> ConnState {
        match &self.phase {
            Phase::AwaitReply(_) | Phase::AwaitRequest(_) => ConnState::Connecting,
            Phase::Rdma(q) => ConnState::Rdma(q.state()),
            Phase::Failed => ConnState::Failed,
        }
    }

    /// What the exchange settled, once in full operation.
    pub fn negotiated(&self) -> Option<&Negotiated> {
        self.negotiated.as_ref()
    }

    /// Why setup failed.
    pub fn setup_error(&self) -> Option<&SetupError> {
        self.setup_error.as_ref()
    }

    /// The queue pair, once in full operation.
    pub fn qp(&mut self) -> Option<&mut Qp> {
        match &mut self.phase {
            Phase::Rdma(q) => Some(q),
            _ => None,
        }
    }

    /// The queue pair, read-only.
    pub fn qp_ref(&self) -> Option<&Qp> {
        match &self.phase {
            Phase::Rdma(q) => Some(q),
            _ => None,
        }
    }

    fn enter_rdma(&mut self, n: Negotiated, initiator: bool) {
        let markers_tx = n.markers_tx;
        let cfg = QpConfig {
            pd: self.params.pd,
            ird: n.ird,
            ord: n.ord,
            mulpdu: mulpdu(self.params.emss, markers_tx),
            crc: n.crc,
            markers_tx,
            markers_rx: n.markers_rx,
            sq_depth: self.params.sq_depth,
            rq_depth: self.params.rq_depth,
        };
        let mut qp = Qp::new(cfg);
        if initiator {
            if let Some(kind) = n.rtr {
                // RFC 6581: the initiator sends the RTR right after the Reply.
                let _ = qp.post_rtr(kind);
            }
        } else {
            self.hold_until_rx = n.rtr.is_some() || n.rev < 2;
        }
        self.negotiated = Some(n);
        self.phase = Phase::Rdma(Box::new(qp));
    }

    /// Feed octets received from the transport.
    pub fn receive(&mut self, data: &[u8], mem: &mut MemoryTable) {
        let mut rest = data;
        match &mut self.phase {
            Phase::AwaitReply(ini) => match ini.receive(rest) {
                Ok(None) => return,
                Ok(Some((n, used))) => {
                    rest = &rest[used..];
                    self.enter_rdma(n, true);
                }
                Err(e) => {
                    self.setup_error = Some(e);
                    self.phase = Phase::Failed;
                    return;
                }
            },
            Phase::AwaitRequest(resp) => match resp.receive(rest) {
                Ok(None) => return,
                Ok(Some(ResponderOutcome::Accepted {
                    negotiated,
                    reply,
                    consumed,
                })) => {
                    rest = &rest[consumed..];
                    self.out.extend_from_slice(&reply);
                    self.enter_rdma(negotiated, false);
                }
                Ok(Some(ResponderOutcome::Rejected { error, reply })) => {
                    self.out.extend_from_slice(&reply);
                    self.setup_error = Some(error);
                    self.phase = Phase::Failed;
                    return;
                }
                Err(e) => {
                    self.setup_error = Some(e);
                    self.phase = Phase::Failed;
                    return;
                }
            },
            Phase::Rdma(_) | Phase::Failed => {}
        }
        if let Phase::Rdma(qp) = &mut self.phase {
            if !rest.is_empty() {
                qp.receive(rest, mem);
                if qp.stats().fpdus_rx > 0 {
                    self.hold_until_rx = false;
                }
            }
        }
    }

    /// Append what should go on the wire next: pending setup frames (each
    /// returned alone, as a segment of its own), else FPDUs within
    /// `max_bytes` / `max_fpdus`. Returns octets appended.
    pub fn poll_transmit(
        &mut self,
        mem: &MemoryTable,
        out: &mut Vec<u8>,
        max_bytes: usize,
        max_fpdus: usize,
    ) -> usize {
        if !self.out.is_empty() {
            let n = self.out.len().min(max_bytes);
            out.extend(self.out.drain(..n));
            return n;
        }
        if self.hold_until_rx {
            return 0;
        }
        match &mut self.phase {
            Phase::Rdma(qp) => qp.poll_transmit(mem, out, max_bytes, max_fpdus),
            _ => 0,
        }
    }

    /// Setup octets (MPA Request/Reply) wait to be sent; the next
    /// [`poll_transmit`](Self::poll_transmit) returns them, not FPDUs.
    pub fn pending_setup(&self) -> bool {
        !self.out.is_empty()
    }

    /// Nothing waiting to be sent.
    pub fn tx_idle(&self) -> bool {
        self.out.is_empty()
            && match &self.phase {
                Phase::Rdma(q) => self.hold_until_rx || q.tx_idle(),
                _ => true,
            }
    }
}
