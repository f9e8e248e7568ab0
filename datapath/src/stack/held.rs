//! What the stack's connections and listeners hold for peers, and the
//! context's memory limit enforced over it ([`crate::budget`]).

use super::*;

impl Stack {
    /// Octets listeners keep for handshakes not handed out yet. (Out of
    /// line: a loop that only connects has no listener.)
    #[inline(never)]
    pub(super) fn listeners_held(&self) -> usize {
        let tcp = self.listeners.values().filter_map(Listening::tcp);
        let early = tcp.flat_map(|l| l.early.values());
        early.map(Vec::capacity).sum()
    }

    /// Octets held in the context: TCP connections as of their last poll,
    /// SCTP connections now, listeners' handshake payload. `each` sees
    /// every connection's figure.
    pub(super) fn held_total(&self, each: &mut dyn FnMut(Holder)) -> usize {
        let mut total = self.tcp_held + self.listeners_held();
        let sctp = self.sctp.as_deref();
        for (&id, c) in &self.conns {
            match c {
                Connection::Tcp(s) => each(Holder {
                    id,
                    held: s.held,
                    releasing: s.head.over_budget,
                }),
                Connection::Sctp(c) => {
                    if let Some(h) = sctp.map(|sc| sc.holder(id, c)) {
                        total += h.held;
                        each(h);
                    }
                }
            }
        }
        total
    }

    /// Enforce the context limit: while the connections not already
    /// being aborted hold more than it, abort the one holding the most
    /// (one per round). Scans every connection only when over the limit.
    /// `sctp_held`: what SCTP connections hold now.
    pub(super) fn enforce_context_budget(&mut self, now: u64, sctp_held: usize) {
        let quick = self.tcp_held + self.listeners_held() + sctp_held;
        if quick > self.budget.context {
            self.abort_most_held(now);
        }
    }

    /// Over the context's limit: abort the connection holding the most.
    #[cold]
    #[inline(never)]
    fn abort_most_held(&mut self, now: u64) {
        let mut all = Vec::new();
        let total = self.held_total(&mut |h| all.push(h));
        let Some(id) = self.budget.victim(total, all.into_iter()) else {
            return;
        };
        self.abort_over_budget(id, now, "context");
    }

    /// Abort connection `id` for the memory budget (`which` limit).
    pub(super) fn abort_over_budget(&mut self, id: SockId, now: u64, which: &'static str) {
        let limit = if which == "context" {
            self.budget.context
        } else {
            self.budget.per_conn
        };
        // Once per connection, over either transport (`ConnHead`).
        let Some(c) = self.conns.get(&id).filter(|c| !c.head().over_budget) else {
            return;
        };
        let remote = c.head().remote;
        if let Connection::Sctp(_) = c {
            let Some(sc) = self.sctp.as_deref_mut() else {
                return;
            };
            if sc.abort_over_budget(&mut self.conns, &mut self.ready, id) {
                self.budget.aborts += 1;
                tracing::warn!(
                    sock = id,
                    remote = %remote,
                    limit,
                    which,
                    "SCTP association over the memory budget: ABORT"
                );
            }
            return;
        }
        if let Some(sock) = self.conns.get_mut(&id).and_then(Connection::tcp_mut) {
            tracing::warn!(
                sock = id,
                remote = %remote,
                held = sock.held,
                limit,
                which,
                "connection over the memory budget: aborted"
            );
            sock.abort_over_budget(now);
            mark_ready(&mut self.ready, sock, id);
            self.budget.aborts += 1;
        }
    }
}
