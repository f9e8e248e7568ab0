//! One timer table for an iWARP connection over either transport (issue
//! 26 item 2): the deadlines of the connection itself, above its
//! transport's own (TCP's retransmission and delayed-ACK timers live in
//! tcp-lite, SCTP's T1/T2/T3 in sctp-lite). It lives in the one state
//! machine of both transports (`endpoint::Lifecycle`), which arms the
//! same kinds from the same settings
//! (`MpaConfig`'s `reply_timeout`, `request_timeout`, `decision_timeout`,
//! `close_timeout`, and [`crate::ABORT_GRACE_NS`]), so every bound
//! applies to both transports by construction.

/// What a connection waits for with a deadline.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Timer {
    /// Setup is late: the peer's MPA Request/Reply or DDP Stream Session
    /// Initiate/Accept, or our application's decision on a request.
    Setup,
    /// The first-FPDU hold after the Reply ends (`first_fpdu_delay`; MPA
    /// only).
    Hold,
    /// A graceful close has waited `close_timeout` for the answers to our
    /// Reads with nothing received: it becomes abortive.
    CloseReads,
    /// Our side of a close is done and the peer has made no progress for
    /// `close_timeout` (TCP: FIN-WAIT-2 without the peer's FIN; SCTP: the
    /// association's last data or SHUTDOWN unanswered): reset or abort.
    Linger,
    /// An abort's Terminate was not acknowledged within
    /// [`crate::ABORT_GRACE_NS`]: reset or abort anyway.
    Abort,
}

const TIMERS: usize = 5;

/// One deadline (ns, the loop's clock) per [`Timer`]; `None` when not armed.
#[derive(Debug, Clone, Copy, Default)]
pub(crate) struct Timers([Option<u64>; TIMERS]);

impl Timers {
    /// The deadline of `t`, if armed.
    #[inline]
    pub(crate) fn get(&self, t: Timer) -> Option<u64> {
        self.0[t as usize]
    }

    /// Arm `t` for `at`.
    #[inline]
    pub(crate) fn set(&mut self, t: Timer, at: u64) {
        self.0[t as usize] = Some(at);
    }

    /// Arm `t` for `dur` ns after `now`; a `dur` of 0 disarms it (a
    /// setting of 0 turns the timer off).
    #[inline]
    pub(crate) fn arm(&mut self, t: Timer, now: u64, dur: u64) {
        self.0[t as usize] = (dur > 0).then(|| now.saturating_add(dur));
    }

    /// Disarm `t`.
    #[inline]
    pub(crate) fn clear(&mut self, t: Timer) {
        self.0[t as usize] = None;
    }

    /// Armed and due at `now`.
    #[inline]
    pub(crate) fn due(&self, t: Timer, now: u64) -> bool {
        self.get(t).is_some_and(|at| now >= at)
    }

    /// Nothing armed.
    #[inline]
    pub(crate) fn none_armed(&self) -> bool {
        self.0.iter().all(Option::is_none)
    }

    /// The earliest armed deadline.
    #[inline]
    pub(crate) fn next(&self) -> Option<u64> {
        // Unarmed as `u64::MAX`, then a plain minimum: no branch per
        // timer (a deadline at `u64::MAX` ns never comes, so it counts as
        // none).
        let m = self
            .0
            .iter()
            .map(|t| t.unwrap_or(u64::MAX))
            .fold(u64::MAX, u64::min);
        (m != u64::MAX).then_some(m)
    }
}

/// The earlier of two optional deadlines (a fold of `Option`s, without the
/// iterator adapters `flatten().min()` costs per poll).
#[inline]
pub(crate) fn earliest(a: Option<u64>, b: Option<u64>) -> Option<u64> {
    match (a, b) {
        (Some(x), Some(y)) => Some(x.min(y)),
        (x, None) => x,
        (None, y) => y,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_earliest_armed_deadline_is_next() {
        let mut t = Timers::default();
        assert_eq!(t.next(), None);
        assert!(t.none_armed());
        t.arm(Timer::Setup, 100, 50);
        assert!(!t.none_armed());
        t.set(Timer::Abort, 120);
        t.arm(Timer::Linger, 100, 0);
        assert_eq!(t.get(Timer::Linger), None, "0 turns a timer off");
        assert_eq!(t.next(), Some(120));
        assert!(!t.due(Timer::Setup, 149) && t.due(Timer::Setup, 150));
        t.clear(Timer::Abort);
        assert_eq!(t.next(), Some(150));
        t.arm(Timer::Hold, u64::MAX - 1, 10);
        assert_eq!(t.get(Timer::Hold), Some(u64::MAX), "saturates");
        assert_eq!(t.next(), Some(150));
        t.clear(Timer::Setup);
        assert_eq!(t.next(), None, "a deadline at u64::MAX never comes");
        assert!(!t.none_armed(), "though it is armed");
    }
}
