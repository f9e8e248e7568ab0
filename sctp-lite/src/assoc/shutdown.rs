//! The end of an association: closing, ABORT (RFC 9260 §9.1), and the
//! graceful SHUTDOWN sequence (§9.2), collisions included.

use super::*;

impl Association {
    pub(super) fn close(&mut self, r: CloseReason) {
        if self.state != State::Closed {
            self.state = State::Closed;
            self.timers = [None; 5];
            self.events.push_back(Event::Closed(r));
        }
    }

    /// Sends ABORT (§9.1) and closes.
    pub fn abort(&mut self) {
        if self.state == State::Closed {
            return;
        }
        self.pending.abort = Some(wire::error_cause(cause_code::USER_INITIATED_ABORT, &[]));
        self.close(CloseReason::LocalAbort);
    }

    /// Sends ABORT with error cause `code` (§3.3.10; e.g.
    /// [`cause_code::OUT_OF_RESOURCE`] when the owner's memory budget ends
    /// the association) and closes with [`CloseReason::ProtocolError`].
    pub fn abort_with_cause(&mut self, code: u16) {
        self.abort_with(code, CloseReason::ProtocolError(code));
    }

    pub(super) fn abort_with(&mut self, code: u16, reason: CloseReason) {
        if self.state == State::Closed {
            return;
        }
        self.pending.abort = Some(wire::error_cause(code, &[]));
        self.close(reason);
    }

    /// Starts a graceful shutdown (§9.2): queued data is still delivered.
    pub fn shutdown(&mut self, now: u64) {
        match self.state {
            State::Established => {
                self.state = State::ShutdownPending;
                self.progress_shutdown(now);
            }
            State::CookieWait | State::CookieEchoed => self.close(CloseReason::Shutdown),
            _ => {}
        }
    }

    pub(super) fn progress_shutdown(&mut self, now: u64) {
        if !self.out.is_empty() {
            return;
        }
        match self.state {
            State::ShutdownPending => {
                self.state = State::ShutdownSent;
                self.pending.shutdown = true;
                self.stop_timer(Timer::T3);
                self.set_timer(Timer::T2, now.saturating_add(self.rto));
            }
            State::ShutdownReceived => {
                self.state = State::ShutdownAckSent;
                self.pending.shutdown_ack = true;
                self.stop_timer(Timer::T3);
                self.set_timer(Timer::T2, now.saturating_add(self.rto));
            }
            _ => {}
        }
    }

    pub(super) fn on_shutdown(&mut self, now: u64, cum: u32) {
        match self.state {
            State::Established | State::ShutdownPending => {
                self.on_sack(now, cum, None);
                if self.state == State::Closed {
                    return;
                }
                self.state = State::ShutdownReceived;
                self.events.push_back(Event::ShutdownReceived);
                self.progress_shutdown(now);
            }
            State::ShutdownReceived => self.on_sack(now, cum, None),
            State::ShutdownSent => {
                // §9.2: SHUTDOWN collision, answer with SHUTDOWN-ACK.
                self.on_sack(now, cum, None);
                self.state = State::ShutdownAckSent;
                self.pending.shutdown_ack = true;
                self.set_timer(Timer::T2, now.saturating_add(self.rto));
            }
            _ => {}
        }
    }
}
