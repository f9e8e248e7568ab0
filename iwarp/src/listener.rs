//! The passive side: a listening port ([`Listener`]) and the connection
//! requests it takes ([`ConnectRequest`]), accepted or rejected.

use std::net::Ipv4Addr;
use std::time::{Duration, Instant};

use iwarp_datapath::over_tcp::{CmEvent, HostCommand};
use iwarp_datapath::stack::{Command, SockId};

use crate::options::qp_cqs;
use crate::router::{Accepted, Router};
use crate::{AcceptOptions, Context, Cq, Error, PeerRequest, Qp, SgList, Sge};
#[cfg(doc)]
use crate::{ListenOptions, MpaConfig};

/// A listening port; dropping it stops listening (connections already
/// accepted stay).
#[derive(Debug)]
pub struct Listener {
    pub(crate) ctx: Context,
    pub(crate) port: u16,
}

impl Drop for Listener {
    /// Closes the port before returning, like closing a listening socket: a
    /// connect made afterwards is refused.
    fn drop(&mut self) {
        let port = self.port;
        // Nothing to report from a destructor: a stopped loop listens no
        // more, and the wait is bounded. Every loop listens on the port.
        for i in 0..self.ctx.inner.loops.len() {
            if self.ctx.inner.post_to(i, Command::Unlisten(port)).is_ok() {
                let _ = self.ctx.inner.wait(Duration::from_secs(5), |r| {
                    r.unlistened.remove(&(i, port)).then_some(())
                });
            }
        }
        // Connections accepted by TCP that nobody asked for: abort them.
        self.ctx.inner.pump();
        let pending = match self.ctx.inner.router.lock() {
            Ok(mut r) => r.accepted.remove(&port),
            Err(p) => p.into_inner().accepted.remove(&port),
        };
        for Accepted { sock, .. } in pending.into_iter().flatten() {
            let _ = self.ctx.inner.post(Command::Abort(sock));
            self.ctx.inner.forget(sock);
        }
    }
}

impl Listener {
    /// The next connection request (the peer's MPA Request, or its DDP
    /// Stream Session Initiate over SCTP), waiting up to `timeout`
    /// ([`Error::TimedOut`] then). A connection whose request has not
    /// come yet stays queued for a later call, and one that ends before
    /// its request is dropped on the way. Requests come in the order the
    /// stack accepted their connections, on a context of several loops
    /// too (the loops number them together; the router queues them in
    /// that order).
    pub fn get_request(&self, timeout: Duration) -> Result<ConnectRequest, Error> {
        let port = self.port;
        let deadline = Instant::now() + timeout;
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            // The first connection, in the order the loops accepted them,
            // whose Request (or end) has come: one whose peer has not
            // sent its Request yet stays queued for a later call, behind
            // none of the others. (Taking it and
            // aborting it when this call's time ran out reset every peer
            // slower than the caller's wait: verbs waits 20 ms at a time.)
            let (sock, remote, event) = self.ctx.inner.wait(left, |r| {
                let Router { accepted, cm, .. } = r;
                let q = accepted.get_mut(&port)?;
                let i = q
                    .iter()
                    .position(|a| cm.get(&a.sock).is_some_and(|e| !e.is_empty()))?;
                let Accepted { sock, remote, .. } = q.remove(i)?;
                let event = cm.get_mut(&sock)?.pop_front()?;
                Some((sock, remote, event))
            })?;
            match event {
                CmEvent::ConnectRequest(peer) => {
                    return Ok(ConnectRequest {
                        ctx: self.ctx.clone(),
                        sock,
                        remote: Ipv4Addr::from(remote.0),
                        peer,
                        answered: false,
                    })
                }
                // It ended before its Request (the peer reset it, or sent
                // no valid Request in time): nobody has a request to
                // answer, and the caller waits on for the next one (an
                // error here would end a listener loop that stops on
                // errors, as verbs' does, for one peer's reset).
                CmEvent::SetupFailed(_) | CmEvent::Disconnected | CmEvent::Established(_) => {
                    let _ = self.ctx.inner.post(Command::Abort(sock));
                    self.ctx.inner.forget(sock);
                }
            }
        }
    }
}

/// A peer's connection request, held until accepted or rejected. The stack
/// rejects it on the wire by itself (a Reply with R = 1) if it stays
/// unanswered for [`MpaConfig::decision_timeout`] (10 s by default), or if
/// the peer sends more than [`MpaConfig::max_early_data`] octets behind its
/// Request meanwhile (RFC 5044 §7.1); accepting it then fails.
#[derive(Debug)]
pub struct ConnectRequest {
    ctx: Context,
    sock: SockId,
    remote: Ipv4Addr,
    peer: PeerRequest,
    /// Accepted or rejected (else dropping it rejects).
    answered: bool,
}

impl Drop for ConnectRequest {
    /// A request dropped unanswered is rejected (no private data).
    fn drop(&mut self) {
        if !self.answered {
            let _ = self.ctx.inner.post(Command::Reject {
                sock: self.sock,
                private_data: Vec::new(),
            });
            self.ctx.inner.forget(self.sock);
        }
    }
}

impl ConnectRequest {
    /// The peer's address.
    pub fn remote(&self) -> Ipv4Addr {
        self.remote
    }

    /// The poll loop that owns the connection (0, or on a context of
    /// several loops the one its frames reach); the accepted [`Qp`]'s
    /// [`Qp::loop_index`].
    pub fn loop_index(&self) -> usize {
        self.ctx.inner.loop_of(self.sock)
    }

    /// What the peer asks for: private data, IRD/ORD, CRC, markers, RTR.
    pub fn peer(&self) -> &PeerRequest {
        &self.peer
    }

    /// Post a receive buffer to the queue pair this request will become:
    /// it is in place before the peer can send its first message. If the
    /// connection fails before it is in full operation, the receive
    /// completes in error on the receive CQ of the [`accept`](Self::accept)
    /// ([`AcceptOptions::recv_cq`], else its CQ; refused with why the
    /// connection ended), even when the accept is what fails.
    pub fn post_recv(&self, wr_id: u64, sge: Sge) -> Result<(), Error> {
        self.post_recv_list(wr_id, sge.into())
    }

    /// [`post_recv`](Self::post_recv) with a scatter list.
    pub fn post_recv_list(&self, wr_id: u64, sgl: SgList) -> Result<(), Error> {
        self.ctx
            .inner
            .post(Command::Iwarp(self.sock, HostCommand::PostRecv(wr_id, sgl)))
    }

    /// Accept: completions of the new queue pair go to `cq` (receive
    /// completions to [`AcceptOptions::recv_cq`] if it is set).
    pub fn accept(mut self, opts: &AcceptOptions, cq: &Cq) -> Result<Qp, Error> {
        let cqs = qp_cqs(cq, opts.recv_cq.as_ref());
        // Inline: polls of its CQs drive its loop from now on.
        let lp = self.ctx.inner.loop_of(self.sock);
        cq.serve_loop(lp);
        if let Some(r) = &opts.recv_cq {
            r.serve_loop(lp);
        }
        if let Some(srq) = &opts.srq {
            self.ctx.inner.post(Command::SetSrq {
                sock: self.sock,
                srq: srq.inner.clone(),
            })?;
        }
        self.ctx.inner.post(Command::Accept {
            sock: self.sock,
            private_data: opts.private_data.clone(),
            ird: opts.ird,
            ord: opts.ord,
            cq: Some(cqs.clone()),
            pd: opts.pd.as_ref().map(|p| p.id),
        })?;
        self.answered = true;
        match self.ctx.established(self.sock, opts.timeout, cqs) {
            Ok(qp) => Ok(qp),
            Err(e) => {
                let _ = self.ctx.inner.post(Command::Abort(self.sock));
                self.ctx.inner.forget(self.sock);
                Err(e)
            }
        }
    }

    /// Reject with `private_data` (at most 512 octets) explaining why.
    pub fn reject(mut self, private_data: &[u8]) -> Result<(), Error> {
        if private_data.len() > 512 {
            return Err(Error::InvalidArgument("private data over 512 octets"));
        }
        self.ctx.inner.post(Command::Reject {
            sock: self.sock,
            private_data: private_data.to_vec(),
        })?;
        self.answered = true;
        self.ctx.inner.forget(self.sock);
        Ok(())
    }
}
