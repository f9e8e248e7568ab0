//! Connection requests the application has not answered yet, and what
//! their posts produced meanwhile ([`Requests`]).

use std::collections::BTreeMap;

use super::{route, Output, QpCqs, SockId, Stack, GONE_KEPT};
use crate::over_tcp::{CmEvent, HostOutput};

/// Connections handed to the application as a request
/// (`CmEvent::ConnectRequest`) that it has not answered yet (Accept,
/// Reject, Close or Abort), and the completions and refusals of their
/// posts that had no CQ to go to. A manual listener may have no CQ (the
/// API's `Listener` has none): the receives the application posts to a
/// request before accepting it are refused when the connection fails
/// first, and those refusals wait here for the CQ the Accept names — every
/// posted work request completes, in error when its queue pair goes away
/// (verbs' IBV_WC_WR_FLUSH_ERR) — or go to the outputs at any other
/// answer. Held outputs come from the application's own posts; an entry
/// with none whose connection is freed is pruned (amortised, as
/// [`Gone`]), so a peer's requests that nobody answers keep nothing.
#[derive(Debug, Default)]
pub(crate) struct Requests {
    /// A B-tree (our own ids): taken out of the stack and put back every
    /// round, where a new `HashMap` would seed its hasher each time, and an
    /// empty one is looked up without hashing.
    map: BTreeMap<SockId, Vec<HostOutput>>,
    /// Prune when the map reaches this size (at least twice what the last
    /// pruning left, [`GONE_KEPT`] at least).
    prune_at: usize,
}

impl Requests {
    /// Pass an output on to `out`, noting the requests it announces and
    /// holding the completions and refusals of those unanswered.
    #[inline]
    pub(super) fn pass(&mut self, o: Output, out: &mut dyn FnMut(Output)) {
        // Nearly always: no request unanswered, and this is not one.
        if self.map.is_empty() && !matches!(o, Output::Cm(_, CmEvent::ConnectRequest(_))) {
            return out(o);
        }
        match o {
            Output::Cm(id, CmEvent::ConnectRequest(_)) => {
                self.map.entry(id).or_default();
                out(o);
            }
            Output::Iwarp(id, ho) if !matches!(ho, HostOutput::Event(_)) => {
                match self.map.get_mut(&id) {
                    Some(held) => held.push(ho),
                    None => out(Output::Iwarp(id, ho)),
                }
            }
            o => out(o),
        }
    }

    /// Forget the requests with nothing held whose connection is freed
    /// (`alive` says which the stack still has), once there are more than
    /// the last pruning left.
    #[inline]
    pub(super) fn prune(&mut self, alive: &dyn Fn(SockId) -> bool) {
        if self.map.len() > self.prune_at.max(GONE_KEPT) {
            self.map.retain(|id, held| !held.is_empty() || alive(*id));
            self.prune_at = 2 * self.map.len();
        }
    }

    /// The application answered request `id`: what was held for it goes
    /// to `cq` (an Accept's) when there is one, else to `out`.
    /// Whether request `id` is unanswered.
    pub(super) fn holds(&self, id: SockId) -> bool {
        self.map.contains_key(&id)
    }

    pub(super) fn answered(&mut self, id: SockId, cq: Option<&QpCqs>, out: &mut dyn FnMut(Output)) {
        if let Some(held) = self.map.remove(&id) {
            for o in held {
                route(id, o, cq, out);
            }
        }
    }

    /// Requests tracked (tests: bounded).
    #[cfg(test)]
    pub(crate) fn len(&self) -> usize {
        self.map.len()
    }
}

impl Stack {
    /// The application answered request `id` ([`Requests::answered`]):
    /// first what this round's commands made for it and have not passed
    /// the record yet (a receive posted to the request and refused in the
    /// same round as the Accept) joins what is held, then all of it goes
    /// to `cq`, else to the outputs.
    #[cold]
    pub(super) fn answered(&mut self, id: SockId, cq: Option<&QpCqs>) {
        let requests = self.requests.get_or_insert_default();
        if requests.holds(id) && !self.pending_out.is_empty() {
            let out = &mut self.pending_out;
            for o in std::mem::take(out) {
                requests.pass(o, &mut |x| out.push_back(x));
            }
        }
        let out = &mut self.pending_out;
        requests.answered(id, cq, &mut |x| out.push_back(x));
    }
}
