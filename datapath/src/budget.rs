//! One memory budget per context: every octet a peer can make a stack hold
//! counts against a per-connection limit and a context-wide limit
//! ([`StackConfig::max_held_per_conn`], [`StackConfig::max_held_total`]).
//!
//! Nothing here threads a counter through allocations. Each connection
//! reports its own figure (TCP: the out-of-order buffer
//! [`tcp_lite::tcp::Connection::ooo_held`] plus, for a byte stream, the
//! octets received and not yet in the application's ring, for iWARP the
//! MPA early data and CM events; SCTP: the association's receive buffer
//! as sctp-lite charges it, chunk overhead included
//! ([`sctp_lite::assoc::Association::recv_buffered`]), DDP Segments
//! waiting for the queue pair, the queue pair's out-of-DDP-SSN-order hold
//! and the segments that overtook an Accept), and the stack adds the
//! payload its listeners keep for handshakes not handed out yet. The stack
//! refreshes a connection's figure whenever it polls it, so the total
//! costs nothing per idle connection.
//!
//! Over the per-connection limit the connection is aborted: over TCP an
//! iWARP connection sends an RDMAP Terminate (catastrophic error localized
//! to the stream, RFC 5040 §7.2) and then RST, a byte stream RST; over SCTP
//! the association is aborted with the error cause Out of Resource (RFC
//! 9260 §3.3.10.4). Over the context limit the connection holding the most
//! is aborted the same way, one per round, until the total of the
//! connections not already being aborted is within the limit. A
//! connection being aborted still counts until it is gone (an abort's
//! Terminate waits at most 100 ms for its ACK), but is not chosen again.
//!
//! [`StackConfig::max_held_per_conn`]: crate::stack::StackConfig::max_held_per_conn
//! [`StackConfig::max_held_total`]: crate::stack::StackConfig::max_held_total

use crate::stack::SockId;

/// [`StackConfig::max_held_per_conn`](crate::stack::StackConfig::max_held_per_conn)'s
/// default: 4 MiB, above what one connection holds by its other bounds
/// (a 1 MiB out-of-order window and a 1 MiB byte-stream backlog over TCP;
/// a 1 MiB association receive buffer plus a 1 MiB DDP hold over SCTP).
pub const MAX_HELD_PER_CONN: usize = 4 << 20;

/// [`StackConfig::max_held_total`](crate::stack::StackConfig::max_held_total)'s
/// default: 256 MiB for the whole context.
pub const MAX_HELD_TOTAL: usize = 256 << 20;

/// One connection's figure in a round.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Holder {
    /// The connection.
    pub id: SockId,
    /// Octets it holds now.
    pub held: usize,
    /// Already aborted for the budget (its octets go soon).
    pub releasing: bool,
}

/// The limits and what enforcing them did. See the [module docs](self).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct MemBudget {
    /// Octets one connection may hold.
    pub per_conn: usize,
    /// Octets all connections of the context may hold together.
    pub context: usize,
    /// Connections aborted for the budget.
    pub aborts: u64,
}

impl MemBudget {
    /// A budget with these limits.
    pub fn new(per_conn: usize, context: usize) -> Self {
        MemBudget {
            per_conn,
            context,
            aborts: 0,
        }
    }

    /// Whether a connection holding `held` octets is over its limit.
    pub fn over_conn(&self, held: usize) -> bool {
        held > self.per_conn
    }

    /// With `total` octets held in the context (`extra` of them by no
    /// connection, such as listeners' handshake payload), which connection
    /// to abort: the one holding the most, if the total less what
    /// connections being aborted hold is over the context limit. One scan,
    /// done only when `total` is over the limit.
    pub fn victim(&self, total: usize, holders: impl Iterator<Item = Holder>) -> Option<SockId> {
        if total <= self.context {
            return None;
        }
        let mut releasing = 0usize;
        let mut best: Option<Holder> = None;
        for h in holders {
            if h.releasing {
                releasing = releasing.saturating_add(h.held);
            } else if h.held > 0 && best.is_none_or(|b| h.held > b.held) {
                best = Some(h);
            }
        }
        if total.saturating_sub(releasing) <= self.context {
            return None;
        }
        best.map(|b| b.id)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn h(id: SockId, held: usize, releasing: bool) -> Holder {
        Holder {
            id,
            held,
            releasing,
        }
    }

    #[test]
    fn the_largest_holder_goes_when_the_context_is_over() {
        let b = MemBudget::new(100, 250);
        let all = [h(1, 90, false), h(2, 100, false), h(3, 70, false)];
        assert_eq!(b.victim(260, all.into_iter()), Some(2));
        assert_eq!(b.victim(250, all.into_iter()), None);
    }

    #[test]
    fn connections_already_going_are_not_chosen_and_not_held_against_others() {
        let b = MemBudget::new(100, 250);
        // 2 is being aborted: without its 100 the rest (160) fit.
        let all = [h(1, 90, false), h(2, 100, true), h(3, 70, false)];
        assert_eq!(b.victim(260, all.into_iter()), None);
        // Still over without it: the next largest goes.
        let all = [h(1, 190, false), h(2, 100, true), h(3, 70, false)];
        assert_eq!(b.victim(360, all.into_iter()), Some(1));
    }

    /// Of equal holders the first seen goes; one holding nothing never
    /// does (the excess is then held by no connection: listeners'
    /// handshake payload); exactly at the limit once the releasing
    /// connections are counted out is within it.
    #[test]
    fn ties_empty_holders_and_the_limit_after_releases() {
        let b = MemBudget::new(100, 250);
        let tie = [h(1, 50, false), h(2, 90, false), h(3, 90, false)];
        assert_eq!(b.victim(300, tie.into_iter()), Some(2));
        let empty = [h(1, 0, false), h(2, 0, false)];
        assert_eq!(b.victim(300, empty.into_iter()), None);
        let at = [h(1, 150, false), h(2, 100, true), h(3, 100, false)];
        assert_eq!(b.victim(350, at.into_iter()), None);
        assert_eq!(b.victim(351, at.into_iter()), Some(1));
    }

    #[test]
    fn per_connection_limit_is_inclusive() {
        let b = MemBudget::new(100, 250);
        assert!(!b.over_conn(100));
        assert!(b.over_conn(101));
    }
}
