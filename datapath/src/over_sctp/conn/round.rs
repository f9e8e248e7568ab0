//! The SCTP part's round ([`SctpConns::poll`]): associations visited,
//! their outputs dispatched (an association a listener handed over
//! becomes a connection, events reach theirs), and the connections marked
//! driven ([`SctpConns::drive`]: posts, segments, teardown and reports).

use super::*;

impl SctpConns {
    /// This part's turn in the stack's round, after the stack marked the
    /// deadlines due and the idle sweep in `ready` (its
    /// [`fire`](Self::fire), [`mark_all`](Self::mark_all)): association
    /// events in (placement happens here), segments out, completions to
    /// CQs, CM events and outputs to `out`. It takes its own marks from
    /// `ready` ([`ReadySet::take`]): the associations', then the
    /// connections' (those the associations' visits marked among them),
    /// then the associations' again for the segments the connections gave
    /// them. Returns whether anything happened. An association a listener
    /// handed over becomes a connection of the port's record in
    /// `listeners` (the stack's one map over both transports: its ULP,
    /// its backlog count).
    #[inline]
    #[allow(clippy::too_many_arguments)]
    pub(crate) fn poll(
        &mut self,
        now: u64,
        conns: &mut Connections,
        mem: &mut MemoryTable,
        iface: &mut Interface,
        ready: &mut ReadySet<Ready>,
        listeners: &mut Listeners,
        tx: &mut dyn FrameSink,
        out: &mut dyn FnMut(Output),
    ) -> bool {
        // Nothing of this part marked and nothing waiting: the round is
        // left out (what the connections hold is as it was,
        // `was_active`), before the call of the round itself.
        self.active = false;
        if !self.host.has_pending() && !ready.holds(&Ready::SCTP_PART) {
            self.host.skip_round();
            return false;
        }
        self.round(now, conns, mem, iface, ready, listeners, tx, out)
    }

    /// [`poll`](Self::poll)'s round, when it has something to do.
    #[inline(never)]
    #[allow(clippy::too_many_arguments)]
    fn round(
        &mut self,
        now: u64,
        conns: &mut Connections,
        mem: &mut MemoryTable,
        iface: &mut Interface,
        ready: &mut ReadySet<Ready>,
        listeners: &mut Listeners,
        tx: &mut dyn FrameSink,
        out: &mut dyn FnMut(Output),
    ) -> bool {
        let mut host_out = std::mem::take(&mut self.host_out);
        // Segments given by reference are written into each packet from
        // their queue pair's records (`SctpQp::fill`).
        let SctpConns {
            host,
            by_assoc,
            active,
            ..
        } = self;
        // The host's round only when it has something (a connection
        // alone was marked: a command, a packet that left its association
        // nothing to do, a deadline of its own).
        let mut busy = if host.has_pending() || ready.holds(&Ready::ASSOC) {
            host.poll_with(
                iface,
                ready,
                now,
                tx,
                &mut |o| host_out.push(o),
                &mut |a, key, dst| fill_segment(by_assoc, conns, mem, a, key, dst),
            )
        } else {
            host.skip_round();
            false
        };
        *active = !host.polled().is_empty() || !host_out.is_empty();
        // The connections of the associations just visited: a packet
        // arrived (a SACK may have made room for segments waiting, a
        // segment placed may have completed a receive), a timer ran, or
        // the association had work.
        for a in host.polled() {
            let Some(&id) = by_assoc.get(a) else {
                continue;
            };
            if let Some(c) = conn_mut(conns, id) {
                c.mark(ready, id);
            }
        }
        if !host_out.is_empty() {
            busy = true;
            for o in host_out.drain(..) {
                self.dispatch(o, now, conns, mem, ready, listeners, out);
            }
        }
        // This round drives the connections marked (in id order; `drive`
        // may end a connection), in a list kept between rounds: no
        // allocation every round. Marks made from here on are for the
        // next round.
        let mut ids = std::mem::take(&mut self.ids);
        ids.clear();
        ready.take(&Ready::SCTP, &mut ids);
        self.active |= !ids.is_empty();
        for &key in &ids {
            if let Some(id) = key.as_sctp() {
                // (One gone since it was marked is skipped there.)
                busy |= self.drive(id, now, conns, mem, ready, out);
            }
        }
        self.ids = ids;
        // Send what the queue pairs just gave their associations this
        // round rather than the next (packets only: timers, ARP and events
        // wait for the next round).
        let SctpConns { host, by_assoc, .. } = self;
        crate::stages::mark(crate::stages::Mark::TxPass);
        busy |= host.transmit_with(iface, ready, now, tx, &mut |a, key, dst| {
            fill_segment(by_assoc, conns, mem, a, key, dst)
        });
        crate::stages::mark(crate::stages::Mark::TxPassEnd);
        self.host_out = host_out;
        busy
    }

    #[allow(clippy::too_many_arguments)]
    fn dispatch(
        &mut self,
        o: SctpOutput,
        now: u64,
        conns: &mut Connections,
        mem: &mut MemoryTable,
        ready: &mut ReadySet<Ready>,
        listeners: &mut Listeners,
        out: &mut dyn FnMut(Output),
    ) {
        match o {
            SctpOutput::Accepted {
                assoc,
                remote,
                port: _,
            } => {
                // Which of our ports: the association knows.
                let lport = self
                    .host
                    .assoc(assoc)
                    .map(|a| a.sctp().local_port())
                    .unwrap_or(0);
                let ulp = match listeners.get_mut(&lport) {
                    Some(Listening {
                        unaccepted,
                        on: ListenOn::Sctp(ulp),
                    }) if *unaccepted < self.backlog => {
                        *unaccepted += 1;
                        Some(ulp.clone())
                    }
                    Some(Listening {
                        on: ListenOn::Sctp(_),
                        ..
                    }) => {
                        self.backlog_aborts += 1;
                        tracing::debug!(port = lport, "SCTP backlog full: association aborted");
                        None
                    }
                    // (The port stopped listening since the host accepted.)
                    _ => None,
                };
                let Some(ulp) = ulp else {
                    if let Some(a) = self.host.assoc_mut(ready, assoc) {
                        a.abort();
                    }
                    return;
                };
                let id = self.id_source.take();
                let mut c = SctpConn::new(assoc, lport, Ipv4Address(remote), ulp, Role::Responder);
                c.head.backlog_of = Some(lport);
                // Opened when SCTP's handshake is done, as a TCP
                // listener hands over its connection.
                c.life.opened(now);
                c.life.setup_begins(now, c.ulp.timeouts.request);
                // The listener's rings, this connection's own clone (`Gone`).
                c.ulp.cq = c.ulp.cq.as_ref().map(QpCqs::for_connection);
                c.mark(ready, id);
                conns.insert(id, Connection::Sctp(Box::new(c)));
                self.members.insert(id);
                self.by_assoc.insert(assoc, id);
                tracing::debug!(sock = id, port = lport, "SCTP association accepted");
            }
            SctpOutput::Event(assoc, ev) => {
                let Some(&id) = self.by_assoc.get(&assoc) else {
                    return;
                };
                self.event(id, ev, now, conns, mem, ready, out);
            }
            SctpOutput::Refused(assoc, e) => {
                tracing::debug!(assoc, error = ?e, "SCTP command refused");
            }
            SctpOutput::Listening { .. }
            | SctpOutput::Opening { .. }
            | SctpOutput::NoSuchAssoc(_) => {}
        }
    }

    #[allow(clippy::too_many_arguments)]
    fn event(
        &mut self,
        id: SockId,
        ev: DdpEvent,
        now: u64,
        conns: &mut Connections,
        mem: &mut MemoryTable,
        ready: &mut ReadySet<Ready>,
        out: &mut dyn FnMut(Output),
    ) {
        let Some(c) = conn_mut(conns, id) else {
            return;
        };
        c.mark(ready, id);
        let assoc = c.assoc;
        c.note_end(&ev);
        if let Some(qp) = c.qp.as_mut() {
            if qp.handle_event(&ev, mem) {
                if let DdpEvent::Closed(_) = ev {
                    c.life.enter(State::Closed);
                    self.by_assoc.remove(&assoc);
                }
                return;
            }
        }
        match ev {
            DdpEvent::Connected => {
                // The token keeps naming the connection (the stack's `by_token`) until
                // it is freed: receives the application posts with its
                // connect (`Command::IwarpOpening`) may come in after the
                // association is up, and must find it (as over TCP).
                if let Some(token) = c.head.token.take() {
                    out(Output::Connected {
                        token,
                        sock: id,
                        stream: None,
                    });
                    tracing::info!(sock = id, remote = %c.head.remote, "SCTP association up");
                }
                if c.life.state() == State::Opening {
                    let r = Exchange::session_initiator(c.ulp.ird, c.ulp.ord, &c.ulp.private_data);
                    match r {
                        Ok((ex, bytes)) => match self
                            .host
                            .assoc_mut(ready, assoc)
                            .map(|a| a.initiate(STREAM, &bytes))
                        {
                            Some(Ok(())) => {
                                c.setup = Some(ex);
                                c.life.setup_begins(now, c.ulp.timeouts.reply);
                            }
                            _ => c.fail(SetupError {
                                code: TermCode::MPA_LOCAL_CATASTROPHIC,
                                reason: SetupFailure::BadConfig,
                                peer_private_data: Vec::new(),
                            }),
                        },
                        Err(e) => c.fail(e),
                    }
                }
            }
            DdpEvent::SessionRequested {
                stream,
                private_data,
            } => {
                let a = self.host.assoc_mut(ready, assoc);
                if stream != STREAM || !c.awaiting_setup(Role::Responder) {
                    // One session per association, on stream 0.
                    if let Some(a) = a {
                        let _ = a.reject(stream, b"");
                    }
                    return;
                }
                let ulp = &c.ulp;
                let mut ex =
                    Exchange::session_responder(ulp.ird, ulp.ord, ulp.private_data.clone());
                // (An Initiate taken is held: `pending_request`.)
                let req = ex
                    .receive(Incoming::Initiate(&private_data))
                    .and_then(|_| ex.pending_request().cloned().ok_or_else(crate::no_request));
                match req {
                    Ok(req) => {
                        c.setup = Some(ex);
                        out(Output::Accepted {
                            port: c.port,
                            sock: id,
                            remote: c.head.remote,
                            stream: None,
                            order: self.accept_order.fetch_add(1, Ordering::Relaxed),
                        });
                        if c.ulp.manual {
                            let decision = c.ulp.timeouts.decision;
                            c.life.decision_awaited(now, req, decision);
                            return;
                        }
                        // A listener that does not ask its application
                        // accepts at once with its own settings, the way
                        // the application's Accept does (as a non-manual
                        // listener over MPA answers the Request with its
                        // Reply).
                        c.life.enter(State::AwaitingDecision);
                        let listener = AcceptQp { cq: None, pd: None };
                        let accepted = self.accept(conns, ready, id, None, listener, mem, now);
                        if let Err(e) = accepted {
                            tracing::info!(sock = id, error = ?e, "SCTP Initiate not acceptable");
                            if let Some(a) = self.host.assoc_mut(ready, assoc) {
                                let _ = a.reject(stream, b"");
                            }
                            if let Some(c) = conn_mut(conns, id) {
                                c.setup = None;
                                c.begin_close();
                            }
                        }
                    }
                    Err(e) => {
                        tracing::info!(sock = id, error = ?e, "SCTP Initiate refused");
                        if let Some(a) = a {
                            let _ = a.reject(stream, b"");
                        }
                        // The application never saw it: just go.
                        c.begin_close();
                    }
                }
            }
            DdpEvent::SessionAccepted {
                stream,
                private_data,
            } if stream == STREAM && c.awaiting_setup(Role::Initiator) => {
                let r = match c.setup.as_mut() {
                    Some(ex) => ex.receive(Incoming::Accept(&private_data)),
                    None => Err(crate::no_request()),
                };
                match r {
                    Ok(Progress::Established(n, _)) => {
                        let mulpdu = self.host.assoc(assoc).map(|a| a.mulpdu()).unwrap_or(0);
                        c.start(now, n, mulpdu, self.max_held, mem);
                        tracing::info!(sock = id, "SCTP session established");
                    }
                    // (An Accept settles the initiator's exchange or fails it.)
                    Ok(_) => c.fail(crate::no_request()),
                    Err(e) => {
                        if let Some(a) = self.host.assoc_mut(ready, assoc) {
                            let _ = a.terminate(now, STREAM);
                        }
                        c.fail(e);
                    }
                }
            }
            DdpEvent::SessionEnded {
                stream,
                why,
                private_data,
            } if stream == STREAM => match (c.life.state(), c.life.role()) {
                (State::AwaitingSetup, Role::Initiator) => {
                    let e = match (why, c.setup.as_mut()) {
                        (SessionEnd::Rejected, Some(ex)) => {
                            ex.receive(Incoming::Reject(&private_data)).err()
                        }
                        _ => None,
                    };
                    c.fail(e.unwrap_or_else(crate::no_request));
                }
                (State::AwaitingDecision | State::AwaitingSetup, Role::Responder) => {
                    c.fail(SetupError {
                        code: TermCode::MPA_CONN_LOST,
                        reason: SetupFailure::WrongKind,
                        peer_private_data: Vec::new(),
                    });
                }
                (s, _) if !s.is_closing() => c.begin_close(),
                _ => {}
            },
            DdpEvent::Segment {
                stream,
                ddp_ssn,
                segment,
            } if stream == STREAM && c.awaiting_setup(Role::Initiator) => {
                if c.early.hold_segment(ddp_ssn, segment).is_err() {
                    if let Some(a) = self.host.assoc_mut(ready, assoc) {
                        let _ = a.terminate(now, STREAM);
                    }
                    c.fail(SetupError {
                        code: TermCode::MPA_BAD_REQ_REP,
                        reason: SetupFailure::EarlyData,
                        peer_private_data: Vec::new(),
                    });
                } else {
                    self.early_segments += 1;
                }
            }
            DdpEvent::Closed(reason) => {
                self.by_assoc.remove(&assoc);
                if let Some(token) = c.head.token.take() {
                    out(Output::Failed {
                        token,
                        error: close_error(&reason),
                    });
                } else if c.awaiting_setup(Role::Initiator)
                    || c.life.state() == State::AwaitingDecision
                {
                    c.fail(SetupError {
                        code: TermCode::MPA_CONN_LOST,
                        reason: SetupFailure::WrongKind,
                        peer_private_data: Vec::new(),
                    });
                }
                c.life.enter(State::Closed);
            }
            _ => {}
        }
    }

    /// Posts, segments, teardown and reports of one connection: its visit
    /// of a round (it leaves the ready list, and what it waits for after
    /// goes in the deadline set), one lookup of it.
    fn drive(
        &mut self,
        id: SockId,
        now: u64,
        conns: &mut Connections,
        mem: &mut MemoryTable,
        ready: &mut ReadySet<Ready>,
        out: &mut dyn FnMut(Output),
    ) -> bool {
        let Some(c) = conn_mut(conns, id) else {
            return false;
        };
        c.head.slot.visited();
        self.drives += 1;
        let mut busy = false;
        if c.life.timers.due(Timer::Setup, now) {
            busy = true;
            let timed_out = SetupError {
                code: TermCode::MPA_BAD_REQ_REP,
                reason: SetupFailure::TimedOut,
                peer_private_data: Vec::new(),
            };
            match c.life.state() {
                // The peer never asked (RFC 5043 §6.2: the active side
                // sends the Session Initiate once the association is up):
                // ABORT, not SHUTDOWN. We sent nothing on the association
                // and the application never saw it, so a graceful close
                // would deliver nothing; to a peer gone silent after its
                // COOKIE-ECHO the SHUTDOWN would only be retransmitted
                // with back-off up to Association.Max.Retrans times
                // (RFC 9260 §9.2, §8.1: about six minutes at RTO.Max
                // 60 s), keeping one of the host's `max_assocs` slots,
                // which our own connects share. An ABORT is sent once and
                // ends the association at once (§9.1). So an association
                // nobody accepted holds its slot for at most
                // `timeouts.request`, and a place in the backlog
                // meanwhile.
                State::AwaitingSetup if c.life.role() == Role::Responder => {
                    c.begin_close();
                    if let Some(a) = self.host.assoc_mut(ready, c.assoc) {
                        a.abort();
                    }
                    c.shutdown_sent = true;
                }
                // RFC 5043 §6.3: our application did not answer; the
                // peer learns it from a Reject.
                State::AwaitingDecision => {
                    let reject = c.setup.as_mut().and_then(Exchange::give_up);
                    if let Some(a) = self.host.assoc_mut(ready, c.assoc) {
                        let _ = a.reject(STREAM, reject.as_deref().unwrap_or_default());
                    }
                    c.fail(timed_out);
                }
                State::AwaitingSetup => {
                    if let Some(a) = self.host.assoc_mut(ready, c.assoc) {
                        let _ = a.terminate(now, STREAM);
                    }
                    c.fail(timed_out);
                }
                _ => c.life.timers.clear(Timer::Setup),
            }
        }
        // The association's state, read while it is at hand (only
        // received packets move it, so it holds for this whole call;
        // `Some(None)`: it is gone).
        let mut assoc_state = None;
        let closed = c.closed();
        if let (Some(qp), false) = (c.qp.as_mut(), closed) {
            // Offered without marking the association: most drives give
            // it nothing (a connection driven for its completions), and
            // an association visited drives its connection.
            if let Some(a) = self.host.assoc_unmarked(c.assoc) {
                let over = qp.session_over();
                let sent = qp.transmit(mem, &mut AssocRefSink(AssocSink { assoc: a, now }));
                busy |= sent > 0;
                assoc_state = Some(Some(a.sctp().state()));
                // Segments, or the session's Terminate (RFC 5043 §6.2).
                if sent > 0 || qp.session_over() != over {
                    self.host.mark(ready, c.assoc);
                }
            }
        }
        // Teardown: the endpoint's one sequence ([`Lifecycle::teardown`])
        // over the association ([`AssocLower`]). A close ends as over MPA:
        // once it waits only for the answers to our Reads, for at most
        // `close` after the peer's last segment (then abortive: a
        // Terminate, then SHUTDOWN or ABORT, the Reads flushed); once it
        // is left to the association, for at most `close` after the
        // peer's last progress (then ABORT).
        let qp = match &c.qp {
            None => QpFacts::NONE,
            Some(q) => {
                let r = q.qp_ref();
                let ended = q.session_over() || r.state() == QpState::Error;
                QpFacts {
                    exists: true,
                    ended,
                    // A session that is over sends nothing more.
                    tx_idle: q.tx_idle() || ended,
                    reads_outstanding: r.outstanding_reads() > 0,
                    fpdus_rx: r.stats().fpdus_rx,
                    setup_failed: false,
                }
            }
        };
        let state =
            assoc_state.unwrap_or_else(|| self.host.assoc(c.assoc).map(|a| a.sctp().state()));
        let mut lower = AssocLower {
            host: &mut self.host,
            ready,
            assoc: c.assoc,
            state,
            shutdown_sent: &mut c.shutdown_sent,
            now,
            acted: false,
        };
        let done = c.life.teardown(now, &qp, &mut lower, c.ulp.timeouts.close);
        busy |= lower.acted;
        if done.reads_timed_out {
            self.close_timeouts += 1;
            tracing::info!(sock = id, "SCTP close timed out waiting for Read responses");
            self.abort(conns, ready, id, now);
            self.drive(id, now, conns, mem, ready, out);
            return true;
        }
        if done.linger_timed_out {
            tracing::info!(sock = id, "SCTP close timed out: ABORT");
            self.linger_aborts += 1;
        }
        // Work posted after a close or before a failure.
        if c.life.state().is_closing() {
            let refusal = c.refusal();
            while let Some((cmd, _)) = c.pending.pop_front() {
                c.outputs.push_back(HostOutput::refused(&cmd, refusal));
            }
        }
        let cq = c.ulp.cq.as_ref();
        while let Some(o) = c.outputs.pop_front() {
            route(id, o, cq, out);
            busy = true;
        }
        if let Some(qp) = c.qp.as_mut() {
            while let Some((x, posted)) = qp.qp().poll_completion_tagged() {
                self.completion_latency.record(&x, posted, now);
                route(id, HostOutput::Completion(x), cq, out);
                busy = true;
            }
            while let Some(e) = qp.qp().poll_event() {
                route(id, HostOutput::Event(e), cq, out);
                busy = true;
            }
        }
        // (`CmEvent::Disconnected` last, once the association is gone:
        // everything flushed and reported above.)
        while let Some(e) = c.life.poll_event() {
            if let (CmEvent::Established(_), Some(ns)) = (&e, c.life.setup_time()) {
                match c.life.role() {
                    Role::Initiator => self.setup_active.record(ns),
                    Role::Responder => self.setup_passive.record(ns),
                }
            }
            out(Output::Cm(id, e));
            busy = true;
        }
        // Out of the setup exchange (accepted, failed or closing): out of
        // its listener's backlog.
        if c.head.backlog_of.is_some()
            && !(c.awaiting_setup(Role::Responder) || c.life.state() == State::AwaitingDecision)
        {
            self.left_backlog.extend(c.head.backlog_of.take());
        }
        if c.closed() && !c.head.reported_closed {
            c.head.reported_closed = true;
            busy = true;
        }
        // A queue pair the application holds stays (refusing posts) until
        // it closes it; one it never had goes now.
        if c.closed() && (c.qp.is_none() || c.goes_when_closed) {
            self.forget(conns, ready, id);
            return busy;
        }
        // What it waits for now is a packet, a command (each marks it) or
        // its own deadline.
        if !c.head.slot.is_ready() {
            if let Some(t) = c.deadline() {
                ready.defer(&mut c.head.slot, Ready::sctp(id), t);
            }
        }
        busy
    }
}
