//! TCP connections: made (ISN, ephemeral port, socket), found by their
//! 4-tuple for each received segment, and handed over by listeners
//! (passive open, and the backlog an iWARP connection counts against until
//! accepted).

use super::*;

impl Stack {
    /// Connection `id` stops counting against its listener's backlog:
    /// accepted (its window opens to `rcv_buf`), failed or gone.
    pub(super) fn leave_backlog(&mut self, id: SockId, accepted: bool) {
        let Some(sock) = self.conns.get_mut(&id).and_then(Connection::tcp_mut) else {
            return;
        };
        let Some(port) = sock.head.backlog_of.take() else {
            return;
        };
        if accepted {
            if let SockKind::Iwarp(i) = &mut sock.kind {
                i.tcp.set_rcv_cap(None);
            }
        }
        if let Some(Listening {
            unaccepted,
            on: ListenOn::Tcp(l),
        }) = self.listeners.get_mut(&port)
        {
            *unaccepted = unaccepted.saturating_sub(1);
            l.listener.set_unaccepted(*unaccepted);
        }
    }

    pub(super) fn isn_for(&self, remote: Ipv4Address, rport: u16, lport: u16, now: u64) -> u32 {
        self.cfg.fixed_isn.unwrap_or_else(|| {
            self.isn
                .isn((self.cfg.iface.ip, lport), (remote, rport), now)
        })
    }

    pub(super) fn insert(&mut self, mut sock: Sock) -> SockId {
        let key = (
            sock.head.remote,
            sock.tcp().remote_port(),
            sock.tcp().local_port(),
        );
        let id = self.ids_given.take();
        mark_ready(&mut self.ready, &mut sock, id);
        self.conns.insert(id, Connection::Tcp(sock));
        self.by_tuple.insert(key, id);
        id
    }

    pub(super) fn make_sock(
        &self,
        tcp: Tcp,
        remote: Ipv4Address,
        ulp: &Ulp,
        role: Role,
        now: u64,
    ) -> (Sock, Option<Arc<StreamShared>>) {
        let (kind, shared) = match ulp {
            Ulp::Stream => {
                let shared = Arc::new(StreamShared::new(self.cfg.ring_chunks));
                (
                    SockKind::Stream(Box::new(StreamSock {
                        tcp,
                        shared: shared.clone(),
                        rx_backlog: VecDeque::new(),
                        rx_backlog_len: 0,
                        tx_partial: None,
                        fin_sent: false,
                    })),
                    Some(shared),
                )
            }
            Ulp::Iwarp {
                mpa,
                params,
                manual,
                srq,
                ..
            } => {
                let mut i = IwarpOverTcp::new(tcp, role, mpa.clone(), *params).opened_at(now);
                if let Some(srq) = srq {
                    i = i.with_srq(srq.clone());
                }
                if *manual && role == Role::Responder {
                    i = i.manual_accept();
                }
                if self.cfg.copy_tx {
                    i = i.copy_transmit();
                }
                (SockKind::Iwarp(Box::new(i)), None)
            }
        };
        (
            Sock {
                head: ConnHead::new(remote),
                cq: match ulp {
                    Ulp::Iwarp { cq, .. } => cq.clone(),
                    Ulp::Stream => None,
                },
                kind,
                rto_seen: 0,
                held: 0,
            },
            shared,
        )
    }

    /// A local port for an active open to `remote:port`: the next free
    /// one, or with [`StackConfig::steering`] the next free one whose
    /// answers reach this stack's queue (`None` if no free port does).
    pub(super) fn ephemeral_port(&mut self, remote: Ipv4Address, port: u16) -> Option<u16> {
        let base = self.cfg.ephemeral_base;
        if let Some(st) = &self.cfg.steering {
            let open = iwarp_net::rss::ActiveOpen {
                local: self.cfg.iface.ip,
                remote,
                remote_port: port,
                proto: iwarp_net::wire::IpProtocol::TCP,
            };
            let (by_tuple, listeners) = (&self.by_tuple, &self.listeners);
            let p =
                st.rss
                    .port_for_queue(st.queue, &open, base..=u16::MAX, self.next_port, |p| {
                        by_tuple.contains_key(&(remote, port, p)) || listeners.contains_key(&p)
                    })?;
            self.next_port = if p == u16::MAX { base } else { p + 1 };
            return Some(p);
        }
        loop {
            let p = self.next_port;
            self.next_port = if p == u16::MAX { base } else { p + 1 };
            if !self.by_tuple.contains_key(&(remote, port, p)) && !self.listeners.contains_key(&p) {
                return Some(p);
            }
        }
    }

    /// The connection of a segment from `key` (remote address, remote
    /// port, local port): the last one's, if it still has that tuple, or
    /// from `by_tuple`.
    pub(super) fn lookup(&mut self, key: (Ipv4Address, u16, u16)) -> Option<SockId> {
        if let Some((k, id)) = self.last_rx {
            let same =
                |s: &Sock| (s.head.remote, s.tcp().remote_port(), s.tcp().local_port()) == key;
            if k == key
                && self
                    .conns
                    .get(&id)
                    .and_then(Connection::tcp)
                    .is_some_and(same)
            {
                return Some(id);
            }
        }
        let id = self.by_tuple.get(&key).copied();
        self.last_rx = id.map(|id| (key, id));
        id
    }

    /// Hand a segment to its connection, listener or a reset. True when
    /// it left nothing for the next round to do: it went to an iWARP
    /// connection that is idle after it (`IwarpOverTcp::idle_after_input`),
    /// whose deadline is in the ready set.
    pub(super) fn segment(&mut self, src: Ipv4Address, seg: &TcpRepr<'_>, now: u64) -> bool {
        let key = (src, seg.src_port, seg.dst_port);
        if let Some(id) = self.lookup(key) {
            let Some(sock) = self.conns.get_mut(&id).and_then(Connection::tcp_mut) else {
                return false;
            };
            if sock.head.over_budget && !seg.payload.is_empty() {
                mark_ready(&mut self.ready, sock, id);
                // Aborted for the memory budget: it holds nothing more
                // while its Terminate waits for an ACK.
                return false;
            }
            if matches!(sock.kind, SockKind::Stream(_)) {
                mark_ready(&mut self.ready, sock, id);
            }
            match &mut sock.kind {
                SockKind::Stream(s) => {
                    if !seg.payload.is_empty() && s.rx_backlog_len >= self.cfg.rx_backlog_limit {
                        self.stats.rx_backpressure_drops += 1;
                        return false;
                    }
                    let StreamSock {
                        tcp,
                        shared,
                        rx_backlog,
                        rx_backlog_len,
                        ..
                    } = &mut **s;
                    // Flow control: the window leaves room for the backlog.
                    tcp.set_rcv_held(*rx_backlog_len);
                    tcp.handle_segment(seg, now, &mut |d| {
                        if rx_backlog.is_empty() {
                            if let Err(v) = shared.rx.push(d.to_vec()) {
                                *rx_backlog_len += v.len();
                                rx_backlog.push_back(v);
                            }
                        } else {
                            *rx_backlog_len += d.len();
                            rx_backlog.push_back(d.to_vec());
                        }
                    });
                }
                SockKind::Iwarp(i) => {
                    i.handle_segment(seg, now, &mut self.mem);
                    // A segment that leaves nothing for a poll to do now
                    // (a Write placed, ours acknowledged) leaves the
                    // connection to its deadline, the delayed ACK's next
                    // round, or to the post of a reply this round, which
                    // carries that ACK: one poll of it per message instead
                    // of two (`IwarpOverTcp::idle_after_input`).
                    //
                    // Then the round after it has nothing to do either:
                    // it is left out as an idle one (`Stack::poll`), and a
                    // ping-pong's answer, posted by a hook or a thread that
                    // saw the Write placed, is the next round's work.
                    return match i.idle_after_input(now) {
                        Some(Some(t)) => {
                            self.ready.defer(&mut sock.head.slot, Ready::tcp(id), t);
                            true
                        }
                        Some(None) => true,
                        None => {
                            self.ready.mark(&mut sock.head.slot, Ready::tcp(id));
                            false
                        }
                    };
                }
            }
            return false;
        }
        let is_syn = seg.flags.contains(tcp_lite::wire::TcpFlags::SYN)
            && !seg.flags.contains(tcp_lite::wire::TcpFlags::ACK);
        // The ISN hash only for a SYN that may open a connection.
        let listens = |l: &Listening| l.tcp().is_some();
        let isn = if is_syn && self.listeners.get(&seg.dst_port).is_some_and(listens) {
            self.isn_for(src, seg.src_port, seg.dst_port, now)
        } else {
            0
        };
        // (A port that listens over SCTP has no TCP listener: a SYN to it
        // is answered with RST, as to a port nobody listens on.)
        if let Some(Listening {
            on: ListenOn::Tcp(l),
            ..
        }) = self.listeners.get_mut(&seg.dst_port)
        {
            let full = l.listener.accept_queue_full();
            if let Some(c) = l.listener.half_open_mut(src, seg.src_port) {
                use tcp_lite::wire::TcpFlags;
                if full
                    && seg.flags.contains(TcpFlags::ACK)
                    && !seg.flags.intersects(TcpFlags::SYN | TcpFlags::RST)
                {
                    // The backlog is full: the handshake stays half-open
                    // (its SYN-ACK retransmitted, the peer's ACK retried),
                    // as Linux leaves it with a full accept queue.
                    self.stats.listen_overflows += 1;
                    return false;
                }
                let mut early = Vec::new();
                c.handle_segment(seg, now, &mut |d| early.extend_from_slice(d));
                if !early.is_empty() {
                    l.early
                        .entry((src, seg.src_port))
                        .or_default()
                        .extend_from_slice(&early);
                }
            } else if is_syn {
                // Refusals (backlog or half-open bound) stay silent: the
                // peer retries its SYN. A full half-open table answers with
                // a stateless SYN cookie instead.
                if let Ok(Some(syn_ack)) = l.listener.on_syn_at(src, seg, isn, now) {
                    self.resets.push((src, syn_ack));
                }
            } else {
                let early = &mut l.early;
                match l.listener.on_cookie_ack(src, seg, now, &mut |d| {
                    early
                        .entry((src, seg.src_port))
                        .or_default()
                        .extend_from_slice(d)
                }) {
                    // An ACK for a SYN cookie: established, in the accept
                    // queue.
                    CookieAck::Accepted => {}
                    // A valid cookie with the backlog full: dropped
                    // unanswered, as the ACK completing a half-open
                    // handshake above (the peer retries what it sends).
                    CookieAck::Overflow => self.stats.listen_overflows += 1,
                    CookieAck::Invalid => {
                        if let Some(rst) = tcp::reset_for(seg) {
                            self.stats.rx_no_socket += 1;
                            self.resets.push((src, rst));
                        }
                    }
                }
            }
            // Its half-open handshakes' timers run from the next round on.
            self.listeners_pending = true;
            self.accept_ready(seg.dst_port, now);
            return false;
        }
        self.stats.rx_no_socket += 1;
        if let Some(rst) = tcp::reset_for(seg) {
            self.resets.push((src, rst));
        }
        false
    }

    pub(super) fn accept_ready(&mut self, port: u16, now: u64) {
        loop {
            let Some(Listening {
                unaccepted,
                on: ListenOn::Tcp(l),
            }) = self.listeners.get_mut(&port)
            else {
                return;
            };
            let Some((remote, tcp)) = l.listener.accept() else {
                return;
            };
            let early = l.early.remove(&(remote, tcp.remote_port()));
            let ulp = l.ulp.clone();
            // An iWARP connection is the application's once it accepts
            // the Request; a byte stream once handed out.
            if matches!(ulp, Ulp::Iwarp { .. }) {
                *unaccepted += 1;
                l.listener.set_unaccepted(*unaccepted);
            }
            let (mut sock, stream) = self.make_sock(tcp, remote, &ulp, Role::Responder, now);
            // The listener's rings, this connection's own clone (`Gone`).
            sock.cq = sock.cq.as_ref().map(QpCqs::for_connection);
            if matches!(ulp, Ulp::Iwarp { .. }) {
                sock.head.backlog_of = Some(port);
            }
            if let Some(early) = early {
                match &mut sock.kind {
                    SockKind::Stream(s) => {
                        if let Err(v) = s.shared.rx.push(early) {
                            s.rx_backlog_len += v.len();
                            s.rx_backlog.push_back(v);
                        }
                    }
                    SockKind::Iwarp(i) => i.receive_early(&early, &mut self.mem),
                }
            }
            let sock_id = self.insert(sock);
            tracing::debug!(sock = sock_id, %remote, port, "TCP connection accepted");
            self.pending_out.push_back(Output::Accepted {
                port,
                sock: sock_id,
                remote,
                stream,
                order: self.accept_order.fetch_add(1, Ordering::Relaxed),
            });
        }
    }
}
