//! One round of the stack's poll loop ([`Engine::poll`]): frames queued,
//! timers, listeners, the ready connections' polls, outputs in order, the
//! SCTP part, the memory budget and the hooks.
//!
//! [`Engine::poll`]: crate::runtime::Engine::poll

use super::*;

/// Segments one poll of an iWARP connection may send; one that sends this
/// many is polled again next round.
const POLL_SEGMENTS: usize = 64;

impl Stack {
    /// One round of [`Engine::poll`](crate::runtime::Engine::poll).
    pub(super) fn poll_round(
        &mut self,
        now: u64,
        tx: &mut dyn FrameSink,
        out: &mut dyn FnMut(Output),
    ) -> bool {
        let mut busy = false;
        // (Empty most rounds: a drain of nothing still costs its set-up.)
        if !self.pending_tx.is_empty() {
            for f in self.pending_tx.drain(..) {
                tx.send_parts(&[&f]);
                busy = true;
            }
        }
        self.iface.poll(now, &mut |f| {
            tx.send_parts(&[f]);
        });
        let Stack {
            iface,
            stats,
            resets,
            listeners,
            listeners_pending,
            conns,
            mem,
            ready,
            budget,
            tcp_held,
            over,
            sctp,
            ..
        } = self;
        // Connections and associations whose deadline has passed join the
        // ready list, each marked in its owner's slot.
        while let Some((at, key)) = ready.pop_due(now) {
            // A connection's, over either transport, or an association's.
            match key.as_tcp().or_else(|| key.as_sctp()) {
                Some(id) => {
                    if let Some(c) = conns.get_mut(&id) {
                        ready.fire(c.slot_mut(), key, at);
                    }
                }
                None => {
                    if let Some(sc) = sctp.as_deref_mut() {
                        sc.fire(ready, key, at);
                    }
                }
            }
        }
        // The safety net (`StackConfig::idle_sweep`): every connection
        // and association, of both transports.
        if ready.sweep_due(now) {
            Self::sweep(conns, ready, sctp.as_deref_mut());
        }
        if !resets.is_empty() {
            Self::emit_resets(iface, stats, resets, now, tx);
            busy = true;
        }
        // Listeners: half-open connections' timers and segments, then
        // those with an established connection to hand over (after the
        // connections' polls, which leave listeners alone), in one pass.
        let mut ports = std::mem::take(&mut self.ports);
        ports.clear();
        // (Only while one may have something: `listeners_pending`.)
        if *listeners_pending {
            let (pending, sent) =
                Self::poll_listeners(listeners, iface, stats, &mut ports, now, tx);
            *listeners_pending = pending;
            busy |= sent;
        }
        let mut ids = std::mem::take(&mut self.ids);
        ids.clear();
        // This round polls the TCP connections marked (in id order); the
        // ready list fills again for the next round as it goes. The SCTP
        // part takes its own marks at its turn below.
        ready.take(&Ready::TCP, &mut ids);
        // (Empty most rounds: a retain of nothing still costs its set-up.)
        let poll_one = |&key: &Ready| {
            let id = key.tcp_id();
            let Some(sock) = conns.get_mut(&id).and_then(Connection::tcp_mut) else {
                return false; // gone since it became ready
            };
            sock.head.slot.visited();
            let dst = sock.head.remote;
            match &mut sock.kind {
                SockKind::Stream(s) => {
                    Self::poll_stream(s, now);
                    busy |= s.tcp.poll_transmit(now, 64, &mut |seg| {
                        Self::emit(iface, stats, dst, seg, now, tx)
                    }) > 0;
                    // Its application side is a ring: look every round.
                    mark_ready(ready, sock, id);
                    if sock.account(tcp_held, budget) {
                        over.push(id);
                    }
                }
                SockKind::Iwarp(i) => {
                    // A segment with a payload fill is built in place in
                    // the device's buffer, its payload written there once.
                    crate::stages::mark(crate::stages::Mark::TxPass);
                    let sent = i.poll(now, mem, POLL_SEGMENTS, &mut |seg, fill| match fill {
                        Some(fill) => {
                            if iface.send_tcp_filled(dst, seg, fill, now, tx).is_err() {
                                stats.tx_errors += 1;
                            }
                        }
                        None => Self::emit(iface, stats, dst, seg, now, tx),
                    });
                    crate::stages::mark(crate::stages::Mark::TxPassEnd);
                    busy |= sent > 0;
                    // What it did not send now waits for an ACK (a
                    // segment), a deadline or a post, each of which wakes
                    // it; only a poll cut short by the segment limit has
                    // more to send at once.
                    if sent >= POLL_SEGMENTS {
                        mark_ready(ready, sock, id);
                    }
                    // Its deadline goes in the timer set after its drain
                    // below, unless it is polled next round anyway.
                    if sock.account(tcp_held, budget) {
                        over.push(id);
                    }
                }
            }
            true
        };
        if !ids.is_empty() {
            ids.retain(poll_one);
            // What they sent reaches the peer now, not after the rest of
            // the round (events, completions, timers, budget, hooks): a
            // reply leaves before the bookkeeping of the round that sent
            // it, where the device holds frames until its flush (memif).
            if busy {
                tx.publish();
            }
        }
        // Listeners with an established connection to hand over (settled
        // above, each round).
        for &p in &ports {
            self.accept_ready(p, now);
        }
        self.ports = ports;
        // Opening/Accepted (and command answers) before any event of the
        // connections they announce: an application learns of a
        // connection before its first CM event.
        while let Some(o) = self.pending_out.pop_front() {
            out(o);
            busy = true;
        }
        // The connections polled this round (in id order): their events,
        // completions and state changes.
        for &key in &ids {
            let id = key.tcp_id();
            if let Some(sock) = self.conns.get_mut(&id).and_then(Connection::tcp_mut) {
                if let SockKind::Iwarp(i) = &mut sock.kind {
                    let cq = &sock.cq;
                    let mut did = false;
                    while let Some(e) = i.poll_cm_event() {
                        if let (CmEvent::Established(_), Some(ns)) = (&e, i.setup_time()) {
                            match i.role() {
                                Role::Initiator => self.stats.setup_active.record(ns),
                                Role::Responder => self.stats.setup_passive.record(ns),
                            }
                        }
                        out(Output::Cm(id, e));
                        did = true;
                    }
                    // Posts held until full operation go to the queue
                    // pair in this drain: their FPDUs next round.
                    let again = did || i.holds_posts();
                    let lat = &mut self.stats.completion_latency;
                    did |= i.drain(now, &self.mem, lat, &mut |o| route(id, o, cq.as_ref(), out));
                    // A CM event or posts moved: look again next round
                    // (completions and events of the queue pair need no
                    // poll of their own).
                    if again {
                        self.ready.mark(&mut sock.head.slot, key);
                    }
                    busy |= did;
                    // A connection polled next round (in the ready set)
                    // looks at its deadlines then: only one that waits
                    // needs its deadline in the timer set (most rounds of
                    // a busy connection touch it not at all).
                    if !sock.head.slot.is_ready() {
                        if let Some(t) = i.poll_timeout() {
                            self.ready.defer(&mut sock.head.slot, key, t);
                        }
                    }
                }
            }
            self.settle(id);
        }
        self.ids = ids;
        while let Some(o) = self.pending_out.pop_front() {
            out(o);
            busy = true;
        }
        let mut sctp_held = 0;
        if let Some(sc) = self.sctp.as_deref_mut() {
            if sc.poll(
                now,
                &mut self.conns,
                &mut self.mem,
                &mut self.iface,
                &mut self.ready,
                &mut self.listeners,
                tx,
                out,
            ) {
                busy = true;
                // As the TCP connections' frames above.
                tx.publish();
            }
        }
        self.sctp_freed();
        if let Some(sc) = self.sctp.as_deref_mut() {
            // What they hold changes only in a round that visited an
            // association or drove a connection (`SctpConns::was_active`).
            if sc.was_active() {
                for h in sc.holders(&self.conns) {
                    sctp_held += h.held;
                    if !h.releasing && self.budget.over_conn(h.held) {
                        self.over.push(h.id);
                    }
                }
                sc.set_held_total(sctp_held);
            } else {
                sctp_held = sc.held_total();
            }
        }
        // The memory budget: connections over their own limit, then the
        // context's (`crate::budget`).
        if !self.over.is_empty() {
            self.abort_over(now);
            busy = true;
        }
        let before = self.budget.aborts;
        self.enforce_context_budget(now, sctp_held);
        busy |= self.budget.aborts != before;
        // Run-to-completion application code, after this round's
        // completions reached their CQs; what it posts the loop handles
        // before this round ends (its commands, then a second poll).
        if !self.hooks.is_empty() {
            busy |= self.run_hooks();
        }
        busy
    }

    /// Abort the connections found over their own memory limit.
    #[cold]
    #[inline(never)]
    fn abort_over(&mut self, now: u64) {
        let mut over = std::mem::take(&mut self.over);
        for id in over.drain(..) {
            self.abort_over_budget(id, now, "connection");
        }
        self.over = over;
    }

    /// The idle sweep (`StackConfig::idle_sweep`): every connection and
    /// association of both transports marked. Out of line, as the other
    /// parts of a round that most rounds skip, so that their code stays
    /// out of the instruction cache lines of the rounds that pass them by
    /// (docs/datapath.md, "Cold paths out of line").
    #[cold]
    #[inline(never)]
    fn sweep(conns: &mut Connections, ready: &mut ReadySet<Ready>, sctp: Option<&mut SctpConns>) {
        for (&id, c) in conns.iter_mut() {
            match c {
                Connection::Tcp(sock) => {
                    mark_ready(ready, sock, id);
                    if let SockKind::Iwarp(i) = &mut sock.kind {
                        i.trim();
                    }
                }
                Connection::Sctp(c) => c.mark(ready, id),
            }
        }
        if let Some(sc) = sctp {
            sc.mark_all(ready);
        }
    }

    /// Resets owed to segments of no connection.
    #[cold]
    #[inline(never)]
    fn emit_resets(
        iface: &mut Interface,
        stats: &mut StackStats,
        resets: &mut Vec<(Ipv4Address, TcpRepr<'static>)>,
        now: u64,
        tx: &mut dyn FrameSink,
    ) {
        for (dst, rst) in resets.drain(..) {
            Self::emit(iface, stats, dst, &rst, now, tx);
        }
    }

    /// TCP listeners: half-open connections' timers and segments, and
    /// the ports with an established connection to hand over (into
    /// `ports`). Whether one still has either, and whether a segment
    /// went out.
    #[inline(never)]
    fn poll_listeners(
        listeners: &mut Listeners,
        iface: &mut Interface,
        stats: &mut StackStats,
        ports: &mut Vec<u16>,
        now: u64,
        tx: &mut dyn FrameSink,
    ) -> (bool, bool) {
        let (mut pending, mut sent) = (false, false);
        for (&port, l) in listeners.iter_mut() {
            let ListenOn::Tcp(l) = &mut l.on else {
                continue;
            };
            if l.listener.half_open_len() > 0 {
                for (remote, c) in l.listener.half_open_iter_mut() {
                    c.handle_timeout(now);
                    let dst = *remote;
                    sent |= c.poll_transmit(now, 16, &mut |seg| {
                        Self::emit(iface, stats, dst, seg, now, tx)
                    }) > 0;
                }
                l.listener.settle();
            }
            if l.listener.ready_len() > 0 {
                ports.push(port);
            }
            pending |= l.listener.half_open_len() > 0 || l.listener.ready_len() > 0;
        }
        (pending, sent)
    }

    fn emit(
        iface: &mut Interface,
        stats: &mut StackStats,
        dst: Ipv4Address,
        seg: &TcpRepr<'_>,
        now: u64,
        tx: &mut dyn FrameSink,
    ) {
        if iface.send_tcp(dst, seg, now, tx).is_err() {
            stats.tx_errors += 1;
        }
    }

    fn poll_stream(s: &mut StreamSock, now: u64) {
        // Drain the backlog into the ring as room appears.
        while let Some(v) = s.rx_backlog.pop_front() {
            let len = v.len();
            if let Err(v) = s.shared.rx.push(v) {
                s.rx_backlog.push_front(v);
                break;
            }
            s.rx_backlog_len -= len;
        }
        s.tcp.set_rcv_held(s.rx_backlog_len);
        if s.shared.abort.load(Ordering::Acquire) && s.tcp.state() != TcpState::Closed {
            s.tcp.abort();
        }
        // Move queued data into TCP's send buffer.
        loop {
            if s.tx_partial.is_none() {
                s.tx_partial = s.shared.tx.pop().map(|v| (v, 0));
            }
            let Some((buf, off)) = s.tx_partial.as_mut() else {
                break;
            };
            let took = s.tcp.send(&buf[*off..]);
            *off += took;
            if *off < buf.len() {
                break;
            }
            s.tx_partial = None;
        }
        // `close` first: the application sets it after its last push
        // (Release), so once it reads true (Acquire) every push is visible
        // and an empty ring means all was taken. Checking the ring first
        // would race: pushes and `close` could both land between the two
        // reads, and the FIN would go out ahead of data the application
        // was told was sent.
        if !s.fin_sent
            && s.shared.close.load(Ordering::Acquire)
            && s.tx_partial.is_none()
            && s.shared.tx.is_empty()
        {
            s.tcp.close();
            s.fin_sent = true;
        }
        s.tcp.handle_timeout(now);
    }

    /// Report state changes of connection `id`; frees it once closed.
    fn settle(&mut self, id: SockId) {
        let Some(mut sock) = self.conns.get_mut(&id).and_then(Connection::tcp_mut) else {
            return;
        };
        // Out of MPA setup (accepted, failed or closed): out of the backlog
        // (the connection looked up again only then).
        let setup_over = match &sock.kind {
            SockKind::Iwarp(i) if sock.head.backlog_of.is_some() => {
                use crate::over_tcp::State;
                let st = i.state();
                (!matches!(
                    st,
                    State::Opening | State::AwaitingSetup | State::AwaitingDecision
                ))
                .then_some(st == State::Operational)
            }
            _ => None,
        };
        if let Some(accepted) = setup_over {
            self.leave_backlog(id, accepted);
            sock = match self.conns.get_mut(&id).and_then(Connection::tcp_mut) {
                Some(s) => s,
                None => return,
            };
        }
        let state = sock.tcp().state();
        let error = sock.tcp().error().map(ConnError::from);
        let rto = sock.tcp().stats().rto_retransmits;
        if rto > sock.rto_seen {
            tracing::info!(
                sock = id,
                remote = %sock.head.remote,
                new = rto - sock.rto_seen,
                total = rto,
                "TCP retransmission timeout"
            );
            sock.rto_seen = rto;
        }
        if let Some(token) = sock.head.token {
            if let Some(e) = error {
                tracing::info!(sock = id, remote = %sock.head.remote, error = %e, "connect failed");
                self.pending_out
                    .push_back(Output::Failed { token, error: e });
                sock.head.token = None;
                sock.head.reported_closed = true;
            } else if !matches!(
                state,
                TcpState::SynSent | TcpState::SynReceived | TcpState::Closed
            ) {
                sock.head.token = None;
                tracing::info!(sock = id, remote = %sock.head.remote, "connected (TCP established)");
                let stream = match &sock.kind {
                    SockKind::Stream(s) => Some(s.shared.clone()),
                    SockKind::Iwarp(_) => None,
                };
                self.pending_out.push_back(Output::Connected {
                    token,
                    sock: id,
                    stream,
                });
            }
        }
        if let SockKind::Stream(s) = &sock.kind {
            let rx_done = matches!(
                state,
                TcpState::CloseWait
                    | TcpState::LastAck
                    | TcpState::Closing
                    | TcpState::TimeWait
                    | TcpState::Closed
            );
            if rx_done && s.rx_backlog.is_empty() {
                s.shared.state.fetch_or(flags::RX_EOF, Ordering::AcqRel);
            }
            if let Some(e) = error {
                let _ = s.shared.error.set(e);
                s.shared.state.fetch_or(flags::FAILED, Ordering::AcqRel);
            } else if matches!(state, TcpState::TimeWait | TcpState::Closed) && s.fin_sent {
                s.shared.state.fetch_or(flags::CLOSED, Ordering::AcqRel);
            }
            s.shared.wake();
        }
        let finished = matches!(state, TcpState::TimeWait | TcpState::Closed);
        if finished && !sock.head.reported_closed {
            sock.head.reported_closed = true;
            match error {
                Some(e) => tracing::info!(sock = id, error = %e, "connection failed"),
                None => tracing::debug!(sock = id, "connection closed"),
            }
            self.pending_out
                .push_back(Output::Closed { sock: id, error });
        }
        if state == TcpState::Closed {
            let keep = matches!(&sock.kind, SockKind::Stream(s) if !s.rx_backlog.is_empty());
            if !keep {
                let t = sock.tcp().stats();
                add_tcp_stats(&mut self.stats.tcp_closed, &t);
                let key = (
                    sock.head.remote,
                    sock.tcp().remote_port(),
                    sock.tcp().local_port(),
                );
                self.by_tuple.remove(&key);
                self.by_token.retain(|_, s| *s != id);
                self.tcp_held = self.tcp_held.saturating_sub(sock.held);
                self.ready.forget(&mut sock.head.slot, Ready::tcp(id));
                if let SockKind::Iwarp(i) = &sock.kind {
                    self.gone.insert(id, sock.cq.clone(), i.disconnect_cause());
                }
                self.conns.remove(&id);
            }
        }
    }
}
