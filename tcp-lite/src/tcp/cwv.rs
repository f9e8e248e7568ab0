//! Congestion window growth and RFC 7661 congestion window validation
//! (pipeACK, the non-validated phase), and the time the sender spent
//! limited by cwnd or by the application.

use super::*;

impl Connection {
    /// Close the interval of the last limit and open one of `limit`
    /// (only on a change: one comparison per transmit pass).
    pub(super) fn set_limit(&mut self, limit: Limit, now: u64) {
        self.last_pass = now;
        if limit == self.limit {
            return;
        }
        let d = now.saturating_sub(self.limit_since);
        match self.limit {
            Limit::Cwnd => self.stats.cwnd_limited_ns += d,
            Limit::App => self.stats.app_limited_ns += d,
            Limit::Rwnd => self.stats.rwnd_limited_ns += d,
            Limit::Other => {}
        }
        self.limit = limit;
        self.limit_since = now;
    }

    /// [`Stats::cwnd_limited_ns`] and [`Stats::app_limited_ns`] with the
    /// interval still open at `now` (the counters hold closed ones).
    pub fn limited_ns(&self, now: u64) -> (u64, u64) {
        let (mut cw, mut app) = (self.stats.cwnd_limited_ns, self.stats.app_limited_ns);
        let d = now.saturating_sub(self.limit_since);
        match self.limit {
            Limit::Cwnd => cw += d,
            Limit::App => app += d,
            Limit::Rwnd | Limit::Other => {}
        }
        (cw, app)
    }

    /// `acked` octets newly acknowledged outside recovery: the window may
    /// grow, unless RFC 7661 says it is not validated.
    pub(super) fn grow(&mut self, acked: usize, now: u64) {
        if self.cfg.cwv {
            self.pipeack_sample(acked, now);
            if self.non_validated(now) {
                // RFC 7661 §4.3: in the NVP cwnd MUST NOT grow on ACKs.
                self.nvp_since.get_or_insert(now);
                self.cwv_check(now);
                return;
            }
            self.nvp_since = None;
        }
        self.cc.on_ack(acked, self.snd_mss, now, self.srtt);
    }

    /// The length of one pipeACK sample: the smoothed RTT.
    fn pipeack_rtt(&self) -> Option<u64> {
        self.fine_srtt.or(self.srtt).map(|r| r.max(1))
    }

    /// RFC 7661 §4.2: measure the octets the network acknowledged per RTT.
    /// Our simple implementation (the RFC allows one): a sample is what
    /// new ACKs (cumulative, outside loss recovery: §4.2 MUST NOT count
    /// recovery) acknowledged over one smoothed RTT; pipeACK is the
    /// largest of the last three samples that ended within three RTTs,
    /// and of the one being measured (the sampling period is three
    /// RTTs, §4.2: at least one).
    fn pipeack_sample(&mut self, acked: usize, now: u64) {
        let Some(rtt) = self.pipeack_rtt() else {
            return;
        };
        let (start, octets) = self.pipeack_cur.get_or_insert((now, 0));
        *octets = octets.saturating_add(acked);
        if now.saturating_sub(*start) >= rtt {
            let done = (now, *octets);
            self.pipeack_cur = Some((now, 0));
            self.pipeack_samples.rotate_right(1);
            self.pipeack_samples[0] = done;
            self.pipeack_defined = true;
        }
    }

    /// RFC 7661 §4.2 pipeACK (octets), `None` while undefined.
    fn pipeack(&self, now: u64) -> Option<usize> {
        if !self.pipeack_defined {
            return None;
        }
        let period = self.pipeack_rtt().unwrap_or(0) * PIPEACK_SAMPLES as u64;
        let cur = self.pipeack_cur.map_or(0, |(_, o)| o);
        let live = self
            .pipeack_samples
            .iter()
            .filter(|&&(end, _)| now.saturating_sub(end) <= period)
            .map(|&(_, o)| o)
            .max()
            .unwrap_or(0);
        Some(live.max(cur))
    }

    /// RFC 7661 §4.1: the non-validated phase, pipeACK < cwnd/2 (an
    /// undefined pipeACK is validated). A window of at most the initial
    /// one is always validated: §4.4.2 never takes cwnd below IW, and a
    /// window restarting from one segment after a timeout must grow.
    fn non_validated(&self, now: u64) -> bool {
        let cwnd = self.cc.cwnd();
        cwnd > 10 * self.snd_mss
            && self
                .pipeack(now)
                .is_some_and(|p| p.saturating_mul(2) < cwnd)
    }

    /// RFC 7661 §4.4.2: after more than the NVP duration in the NVP, out
    /// of recovery, the window is reduced; the NVP timer restarts.
    pub(super) fn cwv_check(&mut self, now: u64) {
        let Some(since) = self.nvp_since else {
            return;
        };
        if self.in_recovery || now.saturating_sub(since) <= self.cfg.nvp_duration {
            return;
        }
        if !self.non_validated(now) {
            self.nvp_since = None;
            return;
        }
        let cwnd = self.cc.cwnd();
        let iw = 10 * self.snd_mss;
        // ssthresh = max(ssthresh, 3*cwnd/4); cwnd = max(cwnd/2, IW).
        let ss = self.cc.ssthresh().max(cwnd / 4 * 3);
        self.cc.set_ssthresh(ss);
        self.cc.set_cwnd((cwnd / 2).max(iw));
        self.nvp_since = Some(now);
        self.stats.cwv_nvp_reductions += 1;
    }

    /// A loss found by ACKs (recovery begins): if it is in the NVP,
    /// remember max(pipeACK, LossFlightSize) for RFC 7661 §4.4.1.
    pub(super) fn cwv_on_loss(&mut self, flight: usize, now: u64) {
        self.nvp_loss = None;
        if self.cfg.cwv && self.non_validated(now) {
            let p = self.pipeack(now).unwrap_or(0);
            self.nvp_loss = Some(p.max(flight));
        }
        // §4.2: recovery is not measured; the sample in progress ends
        // here (unfinished: dropped), the next starts after recovery.
        self.pipeack_cur = None;
    }

    /// Recovery from a loss in the NVP ended: RFC 7661 §4.4.1, cwnd =
    /// (max(pipeACK, LossFlightSize) - R)/2 with R the octets
    /// deemed lost and retransmitted in the episode, ssthresh = cwnd, and
    /// pipeACK undefined again (the sender leaves the NVP). Not below
    /// one segment.
    pub(super) fn cwv_recovery_end(&mut self) {
        let Some(m) = self.nvp_loss.take() else {
            return;
        };
        // Without SACK nothing tells which octets were lost: R = 0.
        let r = usize::try_from(self.episode_lost).unwrap_or(usize::MAX);
        let w = (m.saturating_sub(r) / 2).max(self.snd_mss);
        self.cc.set_cwnd(w);
        self.cc.set_ssthresh(w);
        self.pipeack_defined = false;
        self.pipeack_cur = None;
        self.nvp_since = None;
        self.stats.cwv_loss_reductions += 1;
    }
}
