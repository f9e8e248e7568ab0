//! The stack's counters and what it reports of its connections
//! ([`Stack::stats`], per-connection TCP and queue-pair counters, the
//! listeners' holds), for `Context::stats` and `/metrics`.

use super::*;

/// Counters.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct StackStats {
    /// Segments for no connection or listener (answered with RST).
    pub rx_no_socket: u64,
    /// Data segments dropped because the application was not reading.
    pub rx_backpressure_drops: u64,
    /// Segments the interface refused to send.
    pub tx_errors: u64,
    /// ACKs that would have completed a handshake at a listener whose
    /// backlog was full, dropped (Linux's `ListenOverflows`).
    pub listen_overflows: u64,
    /// TCP counters summed over connections that have ended.
    pub tcp_closed: tcp::Stats,
    /// Octets held now for peers, over every connection (TCP and SCTP)
    /// and listener ([`crate::budget`]; against
    /// `StackConfig::max_held_total`).
    pub held_octets: u64,
    /// The most one connection holds now (against
    /// `StackConfig::max_held_per_conn`).
    pub held_max_conn: u64,
    /// Connections aborted for going over either limit.
    pub budget_aborts: u64,
    /// Rounds left out: no frame or command since the last round, nothing
    /// ready, nothing due (`Engine::poll` returned at once).
    pub idle_rounds: u64,
    /// From the post of each successful send-queue request of an iWARP
    /// connection (over TCP or SCTP) to its completion, as the loop saw them (the
    /// times of the rounds that took the post and produced the
    /// completion: one that completes in the round that took it, a short
    /// Write copied into TCP's buffer, counts 0), per kind of request.
    pub completion_latency: CompletionLatency,
    /// From a `Connect` to full operation (the MPA exchange, or the DDP
    /// Stream Session Initiate and Accept, done), per connection over TCP
    /// or SCTP that got there.
    pub setup_active: Histogram,
    /// From the listener handing over the accepted connection (TCP's or
    /// SCTP's handshake done) to full operation, the application's
    /// decision included.
    pub setup_passive: Histogram,
}

/// Add the counters of `t` to `sum`.
pub fn add_tcp_stats(sum: &mut tcp::Stats, t: &tcp::Stats) {
    sum.rto_retransmits += t.rto_retransmits;
    sum.rescue_retransmits += t.rescue_retransmits;
    sum.recovery_probes += t.recovery_probes;
    sum.fast_retransmits += t.fast_retransmits;
    sum.ooo_segments += t.ooo_segments;
    sum.challenge_acks += t.challenge_acks;
    sum.challenge_acks_suppressed += t.challenge_acks_suppressed;
    sum.delivered += t.delivered;
    sum.sack_skipped += t.sack_skipped;
    sum.spurious_rto_undone += t.spurious_rto_undone;
    sum.ooo_dropped += t.ooo_dropped;
    sum.no_timestamp_drops += t.no_timestamp_drops;
    sum.persist_aborts += t.persist_aborts;
    sum.sack_recoveries += t.sack_recoveries;
    sum.reasm_steps += t.reasm_steps;
    sum.rack_losses += t.rack_losses;
    sum.lost_retransmits += t.lost_retransmits;
    sum.tlp_probes += t.tlp_probes;
    sum.dsacks_received += t.dsacks_received;
    sum.dsack_undos += t.dsack_undos;
    sum.cwnd_limited_ns += t.cwnd_limited_ns;
    sum.rwnd_limited_ns += t.rwnd_limited_ns;
    sum.app_limited_ns += t.app_limited_ns;
    sum.cwv_nvp_reductions += t.cwv_nvp_reductions;
    sum.cwv_loss_reductions += t.cwv_loss_reductions;
    sum.rto_sacked_above += t.rto_sacked_above;
    sum.rto_hole_resent += t.rto_hole_resent;
    sum.rto_after_probe += t.rto_after_probe;
    sum.rto_repeated += t.rto_repeated;
}

impl StackStats {
    /// Add the counters of `o` (another loop of one context): sums, the
    /// larger `held_max_conn`, histograms merged.
    pub fn add(&mut self, o: &StackStats) {
        let StackStats {
            rx_no_socket,
            rx_backpressure_drops,
            tx_errors,
            listen_overflows,
            tcp_closed,
            held_octets,
            held_max_conn,
            budget_aborts,
            idle_rounds,
            completion_latency,
            setup_active,
            setup_passive,
        } = o;
        self.rx_no_socket += rx_no_socket;
        self.rx_backpressure_drops += rx_backpressure_drops;
        self.tx_errors += tx_errors;
        self.listen_overflows += listen_overflows;
        add_tcp_stats(&mut self.tcp_closed, tcp_closed);
        self.held_octets += held_octets;
        self.held_max_conn = self.held_max_conn.max(*held_max_conn);
        self.budget_aborts += budget_aborts;
        self.idle_rounds += idle_rounds;
        self.completion_latency.merge(completion_latency);
        self.setup_active.merge(setup_active);
        self.setup_passive.merge(setup_passive);
    }
}

impl Stack {
    /// Counters, with what connections hold now ([`crate::budget`]).
    pub fn stats(&self) -> StackStats {
        let mut s = self.stats;
        let mut max = 0;
        let total = self.held_total(&mut |h| max = max.max(h.held));
        s.held_octets = total as u64;
        s.held_max_conn = max as u64;
        s.budget_aborts = self.budget.aborts;
        if let Some(sc) = self.sctp.as_deref() {
            sc.add_latencies(&mut s);
        }
        s
    }

    /// The interface (for its counters).
    pub fn iface(&self) -> &Interface {
        &self.iface
    }

    /// Why iWARP connection `sock` ended or is ending, over TCP or SCTP;
    /// also for one already freed (the newest 1,024 of each, `GONE_KEPT`).
    /// `None` while it runs, or when nothing recorded why.
    pub fn disconnect_cause(&self, sock: SockId) -> Option<iwarp_proto::qp::DisconnectCause> {
        match self.conns.get(&sock) {
            Some(Connection::Tcp(Sock {
                kind: SockKind::Iwarp(i),
                ..
            })) => i.disconnect_cause(),
            Some(Connection::Sctp(c)) => c.cause(),
            Some(Connection::Tcp(_)) => None,
            None => self.gone.get(sock).and_then(|g| g.1),
        }
    }

    /// Octets at the start of a TCP connection's stream that its peer has
    /// acknowledged (`None`: no such TCP connection). Over iWARP the
    /// first are the active side's MPA Request: once any are, the peer's
    /// stack has taken the connection past its handshake (accepted it).
    pub fn tcp_acked(&self, sock: SockId) -> Option<u64> {
        self.conns
            .get(&sock)
            .and_then(Connection::tcp)
            .map(|s| s.tcp().acked_offset())
    }

    /// TCP counters of a connection.
    pub fn tcp_stats(&self, sock: SockId) -> Option<tcp::Stats> {
        self.conns
            .get(&sock)
            .and_then(Connection::tcp)
            .map(|s| s.tcp().stats())
    }

    /// TCP counters summed over every connection: those still open and
    /// those that have ended ([`StackStats::tcp_closed`]).
    pub fn tcp_totals(&self) -> tcp::Stats {
        let mut sum = self.stats.tcp_closed;
        for s in self.conns.values().filter_map(Connection::tcp) {
            add_tcp_stats(&mut sum, &s.tcp().stats());
        }
        sum
    }

    /// Connections the stack holds over either transport: TCP connections
    /// opening, open, closing or in TIME-WAIT, and SCTP connections in any
    /// phase (until freed, as `SctpCounters::connections` counts them).
    pub fn connections(&self) -> usize {
        self.conns.len()
    }

    /// Of [`connections`](Self::connections), those over SCTP.
    pub fn sctp_connections(&self) -> usize {
        self.sctp.as_deref().map_or(0, SctpConns::members)
    }

    /// Where SCTP connection `sock` is in its life ([`crate::endpoint`]),
    /// if it is still there.
    pub fn sctp_state(&self, sock: SockId) -> Option<crate::endpoint::State> {
        self.conns.get(&sock)?.sctp().map(|c| c.state())
    }

    /// Whether `sock` names a connection over SCTP (not freed yet).
    pub fn is_sctp(&self, sock: SockId) -> bool {
        matches!(self.conns.get(&sock), Some(Connection::Sctp(_)))
    }

    /// The SCTP part's counters (`None` before an SCTP command made it):
    /// its host's, its associations' summed, and its connections'.
    pub fn sctp_counters(&self) -> Option<crate::over_sctp::conn::SctpCounters> {
        let sc = self.sctp.as_deref()?;
        Some(sc.counters(&self.conns))
    }

    /// Ports with a listener, over either transport (one per port).
    pub fn listening_ports(&self) -> usize {
        self.listeners.len()
    }

    /// What listeners hold for connections not handed out yet: half-open
    /// handshakes, and established connections in their accept queues
    /// plus the payload kept for them (entries), summed over listeners.
    pub fn listener_holds(&self) -> (usize, usize) {
        let l = self.listeners.values().filter_map(Listening::tcp);
        let half_open = l.clone().map(|l| l.listener.half_open_len()).sum();
        let ready = l.map(|l| l.listener.ready_len() + l.early.len()).sum();
        (half_open, ready)
    }

    /// Connections listeners handed out that the application has not
    /// accepted yet, summed over listeners (each listener's count is
    /// within its backlog).
    pub fn unaccepted(&self) -> usize {
        self.listeners.values().map(|l| l.unaccepted).sum()
    }

    /// Counters of an iWARP connection's queue pair (`None`: no such
    /// connection, a byte stream, or the MPA exchange has not finished).
    pub fn qp_stats(&self, sock: SockId) -> Option<iwarp_proto::qp::QpStats> {
        match self.conns.get(&sock)? {
            Connection::Tcp(Sock {
                kind: SockKind::Iwarp(i),
                ..
            }) => i.iwarp.as_ref()?.qp_ref().map(|q| q.stats()),
            Connection::Tcp(_) => None,
            Connection::Sctp(c) => c.qp_stats(),
        }
    }
}
