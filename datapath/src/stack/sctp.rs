//! The stack's SCTP part ([`crate::over_sctp::conn`]): made on first use,
//! and what reaches it from the host (SCTP's commands, posts on its
//! connections) and from the interface (SCTP packets).

use super::*;

impl Stack {
    /// The SCTP part, once an SCTP command made it.
    pub fn sctp(&self) -> Option<&SctpConns> {
        self.sctp.as_deref()
    }

    /// The SCTP part, made on first use: the interface's MAC and address,
    /// SCTP packets of MTU − 20 octets, the TCP RTO bounds, a secret
    /// derived from the ISN secret (cookies, tags and TSNs).
    fn sctp_part(&mut self) -> Option<&mut SctpConns> {
        if self.sctp.is_none() {
            let i = &self.cfg.iface;
            let mut c = crate::over_sctp::SctpHostConfig::new(
                i.mac.0,
                i.ip.0,
                self.cfg.isn_secret.map(|b| b ^ 0xa5),
            );
            // SCTP packets arrive raw (IPv4 protocol 132) or inside UDP
            // to IANA's encapsulation port (RFC 6951); the UDP header
            // takes 8 octets of every packet's room, raw or not.
            c.udp_port = Some(crate::over_sctp::SCTP_UDP_PORT);
            c.sctp.max_packet = i.mtu.saturating_sub(28).min(65_535);
            // A link that cannot alter a packet: no CRC32c either way,
            // as no TCP checksum.
            c.sctp.trusted_link = i.trusted_link;
            // The retransmission timer follows the stack's TCP settings
            // (RFC 9260 §6.3.1 suggests RTO.Min 1 s, as RFC 6298 does for
            // TCP), but never below the peer's delayed SACK: TCP's LAN
            // minimum (5 ms) made Linux SCTP's 200 ms delayed SACK time
            // out every lone message (see RTO_MIN_ABOVE_DELAYED_SACK).
            let floor = sctp_lite::assoc::RTO_MIN_ABOVE_DELAYED_SACK;
            c.sctp.rto_min = self.cfg.tcp.rto_min.max(floor);
            c.sctp.rto_initial = self.cfg.tcp.rto_initial.max(c.sctp.rto_min);
            c.sctp.rto_max = self.cfg.tcp.rto_max.max(c.sctp.rto_min);
            match SctpConns::new(c, self.cfg.ephemeral_base) {
                Ok(mut p) => {
                    p.set_backlog(self.cfg.backlog);
                    p.set_max_held(self.cfg.sctp_max_held);
                    // Ids from the stack's one counter (on a loop of
                    // several, apart from the other loops'); active opens
                    // on ports that come back here.
                    p.set_ids(self.ids_given.clone());
                    p.set_steering(self.cfg.steering.clone());
                    p.set_accept_order(self.accept_order.clone());
                    self.sctp = Some(Box::new(p))
                }
                Err(why) => tracing::warn!(why, "cannot start SCTP"),
            }
        }
        self.sctp.as_deref_mut()
    }

    /// Take the commands that are SCTP's (the SCTP ones, and those naming
    /// an SCTP connection); give the others back.
    pub(super) fn sctp_command(&mut self, cmd: Command, now: u64) -> Option<Command> {
        // Connections over SCTP are the SCTP part's (one table: the
        // kind of its entry says).
        let ours = |s: &Self, id: SockId| s.is_sctp(id);
        match cmd {
            Command::Connect {
                token,
                remote,
                port,
                transport,
                ulp,
            } if transport.is_sctp() => {
                let mut outs = std::mem::take(&mut self.pending_out);
                let udp = (transport == Transport::SctpOverUdp)
                    .then_some(crate::over_sctp::SCTP_UDP_PORT);
                self.sctp_part();
                let Stack {
                    sctp,
                    conns,
                    ready,
                    by_token,
                    ..
                } = self;
                let why = match (SctpUlp::from_ulp(&ulp), sctp.as_deref_mut()) {
                    (Ok(ulp), Some(sc)) => {
                        // One map from tokens to connections over both
                        // transports (`Command::IwarpOpening`).
                        let to = (remote, port, udp);
                        if let Some(id) = sc.connect(conns, ready, token, to, ulp, now, &mut outs) {
                            by_token.insert(token, id);
                        }
                        None
                    }
                    (Err(why), _) => Some(why),
                    (Ok(_), None) => Some("this stack has no SCTP part"),
                };
                if let Some(why) = why {
                    outs.push_back(Output::Failed {
                        token,
                        error: ConnError::Local(why),
                    });
                }
                self.pending_out = outs;
                None
            }
            // One map of listening ports over both transports
            // (`Stack::listeners`), one listener per port number: the
            // answers (`Listening`, `Accepted`) name the port alone.
            // (`Unlisten` is the stack's, for both.)
            Command::Listen {
                port,
                transport,
                ulp,
            } if transport.is_sctp() => {
                let result = if self.listeners.contains_key(&port) {
                    Err(ListenError::PortInUse)
                } else {
                    match (SctpUlp::from_ulp(&ulp), self.sctp_part()) {
                        (Err(why), _) => Err(ListenError::Unsupported(why)),
                        (Ok(_), None) => {
                            Err(ListenError::Unsupported("this stack has no SCTP part"))
                        }
                        (Ok(ulp), Some(sc)) => {
                            if sc.listen(port) {
                                self.listeners.insert(
                                    port,
                                    Listening {
                                        unaccepted: 0,
                                        on: ListenOn::Sctp(ulp),
                                    },
                                );
                                Ok(())
                            } else {
                                Err(ListenError::PortInUse)
                            }
                        }
                    }
                };
                self.pending_out
                    .push_back(Output::Listening { port, result });
                None
            }
            Command::Close(id) if ours(self, id) => {
                if let Some(sc) = self.sctp.as_deref_mut() {
                    sc.close(&mut self.conns, &mut self.ready, id);
                    self.sctp_freed();
                }
                None
            }
            Command::Abort(id) if ours(self, id) => {
                if let Some(sc) = self.sctp.as_deref_mut() {
                    sc.abort(&mut self.conns, &mut self.ready, id, now);
                    self.sctp_freed();
                }
                None
            }
            Command::SetSrq { sock, srq } if ours(self, sock) => {
                if let Some(c) = self.conns.get_mut(&sock).and_then(Connection::sctp_mut) {
                    c.set_srq(srq);
                }
                None
            }
            Command::Accept {
                sock,
                private_data,
                ird,
                ord,
                cq,
                pd,
            } if ours(self, sock) => {
                let Stack {
                    sctp,
                    conns,
                    mem,
                    pending_out,
                    ready,
                    ..
                } = self;
                if let Some(sc) = sctp.as_deref_mut() {
                    if let Err(e) = sc.accept(
                        conns,
                        ready,
                        sock,
                        Some(crate::over_sctp::conn::AppAnswer {
                            private_data,
                            ird,
                            ord,
                        }),
                        crate::over_sctp::conn::AcceptQp { cq, pd },
                        mem,
                        now,
                    ) {
                        pending_out.push_back(Output::CmRefused(sock, e));
                    }
                }
                None
            }
            Command::Reject { sock, private_data } if ours(self, sock) => {
                if let Some(sc) = self.sctp.as_deref_mut() {
                    if let Err(e) = sc.reject(&mut self.conns, &mut self.ready, sock, &private_data)
                    {
                        self.pending_out.push_back(Output::CmRefused(sock, e));
                    }
                }
                None
            }
            other => Some(other),
        }
    }

    /// The SCTP part's connections freed by its last call go into the
    /// stack's record of freed connections ([`Gone`]: a later post is
    /// refused there with why it ended), and their tokens stop naming
    /// them, as a TCP connection's when it is removed.
    #[inline(always)]
    pub(super) fn sctp_freed(&mut self) {
        // Most calls free nothing: one test, inline, every round.
        if self.sctp.as_ref().is_some_and(|sc| sc.has_freed()) {
            self.sctp_take_freed();
        }
    }

    #[inline(never)]
    fn sctp_take_freed(&mut self) {
        let Stack {
            sctp,
            gone,
            by_token,
            listeners,
            ..
        } = self;
        if let Some(sc) = sctp.as_deref_mut() {
            for (id, cq, cause) in sc.take_freed() {
                gone.insert(id, cq, cause);
                by_token.retain(|_, s| *s != id);
            }
            // Out of their listeners' backlogs (the one count per port,
            // as over TCP: `Stack::leave_backlog`).
            for port in sc.take_left_backlog() {
                if let Some(l) = listeners.get_mut(&port) {
                    l.unaccepted = l.unaccepted.saturating_sub(1);
                }
            }
        }
    }

    /// An SCTP packet the interface handed up, to the SCTP part (out of
    /// `handle_frame`, which TCP's segments inline).
    #[inline(never)]
    /// True when the packet left its connection nothing to do
    /// (`SctpConns::handle_packet`).
    pub(super) fn sctp_packet(&mut self, pkt: &SctpIngress<'_>, now: u64) -> bool {
        self.sctp.as_deref_mut().is_some_and(|sc| {
            let (iface, ready, mem) = (&mut self.iface, &mut self.ready, &mut self.mem);
            sc.handle_packet(&mut self.conns, iface, ready, pkt, now, mem)
        })
    }
}
