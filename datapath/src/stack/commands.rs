//! The host's [`Command`]s, taken apart by concern for
//! [`Engine::handle_command`](crate::runtime::Engine::handle_command):
//! what every command does first (requests answered, connections woken),
//! connection setup (connect, listen, unlisten, accept, reject), posts
//! (to a connection, to one still opening, the refusal for one already
//! gone) and teardown (close, abort). The post is the hot path:
//! `handle_command` hands it to `cmd_post` before anything else, which
//! finds its connection, over either transport, by one lookup of the one
//! table; it and the first step of the other commands are `#[inline]`
//! (into `handle_command`).

use super::*;
use crate::runtime::Engine as _;

impl Stack {
    /// What every command does first: an answer to a request releases
    /// what was held for it, and a command for a connection wakes it.
    #[inline]
    pub(super) fn command_arrived(&mut self, cmd: &Command) {
        // An answer to a request releases what was held for it: to the
        // Accept's CQ, before anything the accept itself makes.
        match cmd {
            Command::Accept { sock, cq, .. } => self.answered(*sock, cq.as_ref()),
            Command::Reject { sock: id, .. } | Command::Close(id) | Command::Abort(id) => {
                self.answered(*id, None)
            }
            _ => {}
        }
        // A command for a connection wakes it for the next round.
        let target = match cmd {
            // (A post is marked where it is posted: `cmd_post`.)
            Command::Close(id) | Command::Abort(id) => Some(*id),
            Command::Accept { sock, .. }
            | Command::Reject { sock, .. }
            | Command::SetSrq { sock, .. } => Some(*sock),
            Command::IwarpOpening(token, _) => self.by_token.get(token).copied(),
            _ => None,
        };
        if let Some(id) = target {
            if let Some(s) = self.conns.get_mut(&id).and_then(Connection::tcp_mut) {
                mark_ready(&mut self.ready, s, id);
            }
        }
    }

    /// [`Command::Connect`]: an active open, announced by `Opening`.
    pub(super) fn cmd_connect(
        &mut self,
        token: u64,
        remote: Ipv4Address,
        port: u16,
        ulp: Ulp,
        now: u64,
    ) {
        let Some(lport) = self.ephemeral_port(remote, port) else {
            tracing::warn!(%remote, port, "no free local port steers the answers to this loop's queue");
            self.pending_out.push_back(Output::Failed {
                token,
                error: crate::ConnError::Local(
                    "no free local port whose answers RSS steers to this loop's queue",
                ),
            });
            return;
        };
        let isn = self.isn_for(remote, port, lport, now);
        let tcp = Tcp::connect(self.cfg.tcp, lport, port, isn);
        let (mut sock, _) = self.make_sock(tcp, remote, &ulp, Role::Initiator, now);
        sock.head.token = Some(token);
        let id = self.insert(sock);
        self.by_token.insert(token, id);
        tracing::debug!(sock = id, %remote, port, local_port = lport, "connecting");
        self.pending_out
            .push_back(Output::Opening { token, sock: id });
    }

    /// [`Command::Listen`], answered by `Listening`.
    pub(super) fn cmd_listen(&mut self, port: u16, ulp: Ulp) {
        let result = if self.listeners.contains_key(&port) {
            Err(ListenError::PortInUse)
        } else {
            let mut listener =
                Listener::new(self.cfg.tcp, port, self.cfg.backlog, self.cfg.max_half_open);
            // SYN cookies once the half-open table is full (RFC 4987
            // §3.6), keyed apart from the ISN hash.
            listener.enable_syn_cookies(self.cfg.isn_secret.map(|b| b ^ 0x3c));
            if matches!(ulp, Ulp::Iwarp { .. }) {
                listener.set_rcv_cap(Some(self.cfg.unaccepted_window));
            }
            let on = ListenOn::Tcp(Box::new(TcpListening {
                listener,
                ulp,
                early: HashMap::new(),
            }));
            self.listeners.insert(port, Listening { unaccepted: 0, on });
            Ok(())
        };
        self.pending_out
            .push_back(Output::Listening { port, result });
    }

    /// [`Command::Unlisten`], answered by `Unlistened`.
    pub(super) fn cmd_unlisten(&mut self, port: u16) {
        let removed = self.listeners.remove(&port);
        if removed.is_some() {
            // A later listener on the port starts with its own count: no
            // connection, over either transport, counts against it now.
            for c in self.conns.values_mut() {
                let head = c.head_mut();
                if head.backlog_of == Some(port) {
                    head.backlog_of = None;
                }
            }
        }
        if let Some(ListenOn::Sctp(_)) = removed.as_ref().map(|l| &l.on) {
            if let Some(sc) = self.sctp.as_deref_mut() {
                sc.unlisten(port);
            }
        }
        let removed = removed.is_some();
        self.pending_out
            .push_back(Output::Unlistened { port, removed });
    }

    /// [`Command::IwarpOpening`]: the post goes to the connection once its
    /// `Connect` made one.
    pub(super) fn cmd_iwarp_opening(&mut self, token: u64, cmd: HostCommand, now: u64) {
        match self.by_token.get(&token).copied() {
            Some(id) => self.handle_command(Command::Iwarp(id, cmd), now),
            None => {
                // The connection already failed: refuse like a closed QP.
                self.pending_out.push_back(Output::Iwarp(
                    usize::MAX,
                    HostOutput::refused(
                        &cmd,
                        iwarp_proto::qp::PostError::NotReady(iwarp_proto::qp::QpState::Error),
                    ),
                ));
            }
        }
    }

    /// [`Command::Iwarp`]: the post (the data path's hot path), on a
    /// connection over either transport found by one lookup, or its
    /// refusal when the connection is not there (or is a byte stream).
    #[inline]
    pub(super) fn cmd_post(&mut self, id: SockId, cmd: HostCommand, now: u64) {
        let Stack {
            conns,
            ready,
            mem,
            pending_out,
            ..
        } = self;
        let out = &mut |x| pending_out.push_back(x);
        match conns.get_mut(&id) {
            Some(Connection::Tcp(sock)) => {
                mark_ready(ready, sock, id);
                if let Sock {
                    kind: SockKind::Iwarp(i),
                    cq,
                    ..
                } = sock
                {
                    i.post(cmd, now, mem, &mut |o| route(id, o, cq.as_ref(), out));
                    return;
                }
            }
            Some(Connection::Sctp(c)) => return c.post(id, ready, cmd, mem, now, out),
            None => {}
        }
        self.refuse_post(id, &cmd);
    }

    /// A post to a connection that is over and freed: the post is refused
    /// with why it ended, on the connection's CQ (kept while a handle holds
    /// it, `Gone`); one we know nothing of any more, to the outputs.
    pub(super) fn refuse_post(&mut self, id: SockId, cmd: &HostCommand) {
        let (cq, cause) = self
            .gone
            .get(id)
            .map_or((None, None), |g| (g.0.as_ref(), g.1));
        let error = cause.map_or(
            iwarp_proto::qp::PostError::NotReady(iwarp_proto::qp::QpState::Error),
            iwarp_proto::qp::PostError::Disconnected,
        );
        let out = &mut self.pending_out;
        route(id, HostOutput::refused(cmd, error), cq, &mut |x| {
            out.push_back(x)
        });
    }

    /// [`Command::Close`].
    pub(super) fn cmd_close(&mut self, id: SockId) {
        if let Some(s) = self.conns.get_mut(&id).and_then(Connection::tcp_mut) {
            match &mut s.kind {
                SockKind::Iwarp(i) => i.disconnect(),
                SockKind::Stream(st) => st.shared.close.store(true, Ordering::Release),
            }
        }
    }

    /// [`Command::Abort`].
    pub(super) fn cmd_abort(&mut self, id: SockId, now: u64) {
        if let Some(s) = self.conns.get_mut(&id).and_then(Connection::tcp_mut) {
            match &mut s.kind {
                SockKind::Iwarp(i) => i.abort(now),
                SockKind::Stream(st) => st.shared.abort.store(true, Ordering::Release),
            }
        }
    }

    /// [`Command::Accept`].
    pub(super) fn cmd_accept(
        &mut self,
        sock: SockId,
        private_data: Vec<u8>,
        ird: u16,
        ord: u16,
        cq: Option<QpCqs>,
        pd: Option<iwarp_proto::mem::PdId>,
    ) {
        if let Some(Sock {
            kind: SockKind::Iwarp(i),
            cq: sock_cq,
            ..
        }) = self.conns.get_mut(&sock).and_then(Connection::tcp_mut)
        {
            if cq.is_some() {
                *sock_cq = cq;
            }
            if let Some(pd) = pd {
                i.set_pd(pd);
            }
            match i.accept(private_data, ird, ord, &mut self.mem) {
                Ok(()) => {
                    tracing::info!(sock, ird, ord, "connection request accepted");
                    self.leave_backlog(sock, true);
                }
                Err(e) => {
                    tracing::info!(sock, error = ?e, "accept refused");
                    self.pending_out.push_back(Output::CmRefused(sock, e));
                }
            }
        } else {
            // No iWARP connection by that id (never, or freed): refused,
            // as a request not held, over either transport.
            self.pending_out
                .push_back(Output::CmRefused(sock, crate::no_request()));
        }
    }

    /// [`Command::SetSrq`].
    pub(super) fn cmd_set_srq(&mut self, sock: SockId, srq: iwarp_proto::qp::Srq) {
        if let Some(Sock {
            kind: SockKind::Iwarp(i),
            ..
        }) = self.conns.get_mut(&sock).and_then(Connection::tcp_mut)
        {
            i.set_srq(srq);
        }
    }

    /// [`Command::Reject`].
    pub(super) fn cmd_reject(&mut self, sock: SockId, private_data: Vec<u8>) {
        if let Some(Sock {
            kind: SockKind::Iwarp(i),
            ..
        }) = self.conns.get_mut(&sock).and_then(Connection::tcp_mut)
        {
            match i.reject(&private_data) {
                Ok(()) => tracing::info!(
                    sock,
                    private_data_len = private_data.len(),
                    "connection request rejected"
                ),
                Err(e) => {
                    tracing::info!(sock, error = ?e, "reject refused");
                    self.pending_out.push_back(Output::CmRefused(sock, e));
                }
            }
        } else {
            self.pending_out
                .push_back(Output::CmRefused(sock, crate::no_request()));
        }
    }
}
