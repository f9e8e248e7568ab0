//! Congestion control behind a small trait: NewReno (RFC 5681, with byte
//! counting, RFC 3465) and CUBIC (RFC 9438), chosen per connection by
//! [`Config::congestion`](crate::tcp::Config::congestion).
//!
//! The connection decides *when* (loss detection, recovery, PRR pacing of
//! the window during recovery, RFC 6937); the algorithm decides *how much*:
//! how the window grows on an ACK outside recovery, and what the slow-start
//! threshold becomes after a loss or a timeout. Every reduction saves the
//! state before it, so a reduction found spurious (Eifel, RFC 3522/4015;
//! DSACK, RFC 2883/3708) can be undone.

/// Which algorithm a connection uses.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Algorithm {
    /// RFC 5681 NewReno: halve on loss, one segment per window in
    /// congestion avoidance.
    NewReno,
    /// RFC 9438 CUBIC: multiplicative decrease by 0.7, cubic growth in time.
    #[default]
    Cubic,
}

/// What a congestion-control algorithm answers to.
pub trait CongestionControl: core::fmt::Debug + Send {
    /// Congestion window (octets).
    fn cwnd(&self) -> usize;
    /// Slow-start threshold (octets).
    fn ssthresh(&self) -> usize;
    /// Set the window (the connection's recovery logic, PRR and recovery
    /// exit set it directly, RFC 6937 §3.1).
    fn set_cwnd(&mut self, cwnd: usize);
    /// Set the slow-start threshold (RFC 7661 §4.4 sets it with cwnd).
    fn set_ssthresh(&mut self, ssthresh: usize);
    /// `acked` octets newly acknowledged outside recovery, at `now` (ns),
    /// with the smoothed RTT if known; `mss` the sender's segment size.
    fn on_ack(&mut self, acked: usize, mss: usize, now: u64, srtt: Option<u64>);
    /// A loss detected by ACKs (fast retransmit, SACK, RACK): set ssthresh
    /// from `flight` (octets outstanding); the caller enters recovery with
    /// cwnd = ssthresh (RFC 6675 §5 step 4.2, RFC 6937 on exit).
    fn on_loss(&mut self, flight: usize, mss: usize, now: u64);
    /// A retransmission timeout: ssthresh as for a loss, cwnd one segment
    /// (RFC 5681 §3.1 eq. 4, RFC 9438 §4.8).
    fn on_rto(&mut self, flight: usize, mss: usize, now: u64);
    /// Undo the last reduction (it was spurious). Returns whether there was
    /// one to undo.
    fn undo(&mut self) -> bool;
}

/// Build the algorithm for a connection with initial window `iw`.
pub fn new(algo: Algorithm, iw: usize) -> Box<dyn CongestionControl> {
    match algo {
        Algorithm::NewReno => Box::new(NewReno::new(iw)),
        Algorithm::Cubic => Box::new(Cubic::new(iw)),
    }
}

/// Slow start by octets (RFC 3465 §2.2): a stretch ACK grows the window by
/// what it covers (the receiver acknowledges once per poll round, often
/// dozens of segments), but by no more than up to ssthresh, or one segment.
fn slow_start(cwnd: usize, ssthresh: usize, acked: usize, mss: usize) -> usize {
    cwnd.saturating_add(acked)
        .min(ssthresh.max(cwnd.saturating_add(mss)))
}

/// RFC 5681 / RFC 3465 NewReno window.
#[derive(Debug, Clone)]
pub struct NewReno {
    cwnd: usize,
    ssthresh: usize,
    /// Octets acknowledged in congestion avoidance since cwnd last grew
    /// (byte counting, RFC 3465 §2.1).
    ca_acked: usize,
    saved: Option<(usize, usize)>,
}

impl NewReno {
    /// Initial window `iw`, ssthresh unbounded (RFC 5681 §3.1).
    pub fn new(iw: usize) -> Self {
        NewReno {
            cwnd: iw,
            ssthresh: usize::MAX,
            ca_acked: 0,
            saved: None,
        }
    }
}

impl CongestionControl for NewReno {
    fn cwnd(&self) -> usize {
        self.cwnd
    }
    fn ssthresh(&self) -> usize {
        self.ssthresh
    }
    fn set_cwnd(&mut self, cwnd: usize) {
        self.cwnd = cwnd;
    }
    fn set_ssthresh(&mut self, ssthresh: usize) {
        self.ssthresh = ssthresh;
    }
    fn on_ack(&mut self, acked: usize, mss: usize, _now: u64, _srtt: Option<u64>) {
        if self.cwnd < self.ssthresh {
            self.cwnd = slow_start(self.cwnd, self.ssthresh, acked, mss);
        } else {
            // RFC 5681 §3.1, RFC 3465 §2.1: one segment per window acknowledged.
            self.ca_acked = self.ca_acked.saturating_add(acked);
            while self.ca_acked >= self.cwnd.max(1) {
                self.ca_acked -= self.cwnd.max(1);
                self.cwnd = self.cwnd.saturating_add(mss);
            }
        }
    }
    fn on_loss(&mut self, flight: usize, mss: usize, _now: u64) {
        self.saved = Some((self.cwnd, self.ssthresh));
        // RFC 5681 §3.1 eq. 4 (RFC 6675 §5 step 4.2 uses FlightSize too).
        self.ssthresh = (flight / 2).max(2 * mss);
        self.ca_acked = 0;
    }
    fn on_rto(&mut self, flight: usize, mss: usize, now: u64) {
        self.on_loss(flight, mss, now);
        self.cwnd = mss;
    }
    fn undo(&mut self) -> bool {
        match self.saved.take() {
            Some((c, s)) => {
                self.cwnd = self.cwnd.max(c);
                self.ssthresh = s;
                true
            }
            None => false,
        }
    }
}

/// RFC 9438 §4.6: multiplicative decrease factor.
const BETA: f64 = 0.7;
/// RFC 9438 §4.2: the cubic's scaling constant (segments per second³).
const C: f64 = 0.4;

/// CUBIC state that a reduction changes (saved for undo).
#[derive(Debug, Clone, Copy)]
struct CubicState {
    cwnd: usize,
    ssthresh: usize,
    /// W_max in segments (RFC 9438 §4.2), after fast convergence (§4.7).
    w_max: f64,
    /// cwnd_prior in segments: the window just before the last reduction
    /// (§4.6); once W_est reaches it, alpha_cubic is 1 (§4.3).
    cwnd_prior: f64,
    /// Start of the current congestion-avoidance epoch (ns), if begun.
    epoch: Option<u64>,
    /// K in seconds (§4.2, eq. 2).
    k: f64,
    /// The Reno-friendly estimate W_est in segments (§4.3).
    w_est: f64,
}

/// RFC 9438 CUBIC.
#[derive(Debug, Clone)]
pub struct Cubic {
    s: CubicState,
    saved: Option<CubicState>,
}

impl Cubic {
    /// Initial window `iw`, ssthresh unbounded.
    pub fn new(iw: usize) -> Self {
        Cubic {
            s: CubicState {
                cwnd: iw,
                ssthresh: usize::MAX,
                w_max: 0.0,
                cwnd_prior: 0.0,
                epoch: None,
                k: 0.0,
                w_est: 0.0,
            },
            saved: None,
        }
    }

    /// RFC 9438 §4.6 multiplicative decrease with §4.7 fast convergence,
    /// `flight` octets outstanding when the congestion was detected.
    fn reduce(&mut self, flight: usize, mss: usize) {
        self.saved = Some(self.s);
        let s = &mut self.s;
        let cwnd_seg = s.cwnd as f64 / mss as f64;
        // §4.7: a congestion event below W_max (the one fast convergence
        // may already have lowered, not the window of the last event:
        // that was RFC 8312 §4.6) means the flow's share shrank: remember
        // less, to release bandwidth for newer flows.
        s.w_max = if cwnd_seg < s.w_max {
            cwnd_seg * (1.0 + BETA) / 2.0
        } else {
            cwnd_seg
        };
        s.cwnd_prior = cwnd_seg;
        // §4.6: ssthresh = flight_size * beta_cubic, at least two segments.
        // Not cwnd * beta: our cwnd keeps growing while the sender is
        // limited by the peer's window or the application (no RFC 7661
        // validation), and an implementation that uses cwnd MUST keep it
        // from growing beyond what is in flight (§4.6). With cwnd, a loss
        // after a clean start took a window of thousands of segments
        // that nothing filled down to 0.7 of that: no reduction at all.
        s.ssthresh = ((flight as f64 * BETA) as usize).max(2 * mss);
        s.epoch = None;
    }
}

impl CongestionControl for Cubic {
    fn cwnd(&self) -> usize {
        self.s.cwnd
    }
    fn ssthresh(&self) -> usize {
        self.s.ssthresh
    }
    fn set_cwnd(&mut self, cwnd: usize) {
        self.s.cwnd = cwnd;
    }
    fn set_ssthresh(&mut self, ssthresh: usize) {
        self.s.ssthresh = ssthresh;
    }
    fn on_ack(&mut self, acked: usize, mss: usize, now: u64, srtt: Option<u64>) {
        let s = &mut self.s;
        if s.cwnd < s.ssthresh {
            s.cwnd = slow_start(s.cwnd, s.ssthresh, acked, mss);
            return;
        }
        let mssf = mss.max(1) as f64;
        let cwnd_seg = s.cwnd as f64 / mssf;
        let epoch = match s.epoch {
            Some(e) => e,
            None => {
                // §4.2: a new epoch; with no W_max yet (no loss seen, e.g.
                // ssthresh reached from a configured value) start the
                // plateau at the current window.
                s.epoch = Some(now);
                if s.w_max < cwnd_seg {
                    s.w_max = cwnd_seg;
                    s.k = 0.0;
                } else {
                    s.k = ((s.w_max - cwnd_seg) / C).cbrt();
                }
                s.w_est = cwnd_seg;
                now
            }
        };
        let rtt = srtt.unwrap_or(0) as f64 / 1e9;
        let t = now.saturating_sub(epoch) as f64 / 1e9;
        // §4.2 eq. 1, evaluated one RTT ahead (§4.4), the target clamped to
        // [cwnd, 1.5 cwnd].
        let dt = t + rtt - s.k;
        let w_cubic = C * dt * dt * dt + s.w_max;
        let target = w_cubic.clamp(cwnd_seg, 1.5 * cwnd_seg);
        // §4.3: the Reno-friendly estimate, alpha = 3(1-beta)/(1+beta)
        // until W_est reaches cwnd_prior, then 1 (SHOULD): past the
        // window of the last congestion event, grow as fast as Reno.
        let alpha = if s.w_est >= s.cwnd_prior {
            1.0
        } else {
            3.0 * (1.0 - BETA) / (1.0 + BETA)
        };
        let acked_seg = acked as f64 / mssf;
        s.w_est += alpha * acked_seg / cwnd_seg.max(1.0);
        let grow = if w_cubic < s.w_est {
            // Reno-friendly region: follow W_est.
            (s.w_est - cwnd_seg).max(0.0)
        } else {
            // §4.4/4.5: (target - cwnd)/cwnd per acknowledged segment.
            (target - cwnd_seg) * acked_seg / cwnd_seg.max(1.0)
        };
        let add = (grow.min(acked_seg) * mssf) as usize;
        s.cwnd = s.cwnd.saturating_add(add);
    }
    fn on_loss(&mut self, flight: usize, mss: usize, _now: u64) {
        self.reduce(flight, mss);
    }
    fn on_rto(&mut self, flight: usize, mss: usize, _now: u64) {
        // §4.8: as a loss, then the window restarts from one segment.
        self.reduce(flight, mss);
        self.s.cwnd = mss;
    }
    fn undo(&mut self) -> bool {
        match self.saved.take() {
            Some(st) => {
                let cwnd = self.s.cwnd.max(st.cwnd);
                self.s = st;
                self.s.cwnd = cwnd;
                true
            }
            None => false,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const MSS: usize = 1000;

    #[test]
    fn newreno_halves_and_grows_one_segment_per_window() {
        let mut c = NewReno::new(10 * MSS);
        c.on_ack(10 * MSS, MSS, 0, None);
        assert_eq!(c.cwnd(), 20 * MSS, "slow start by octets (RFC 3465)");
        c.on_loss(20 * MSS, MSS, 0);
        assert_eq!(c.ssthresh(), 10 * MSS, "RFC 5681 eq. 4");
        c.set_cwnd(c.ssthresh());
        c.on_ack(5 * MSS, MSS, 0, None);
        assert_eq!(c.cwnd(), 10 * MSS);
        c.on_ack(5 * MSS, MSS, 0, None);
        assert_eq!(c.cwnd(), 11 * MSS, "one segment per window");
        assert!(c.undo());
        assert_eq!((c.cwnd(), c.ssthresh()), (20 * MSS, usize::MAX));
        assert!(!c.undo());
        c.on_rto(8 * MSS, MSS, 0);
        assert_eq!((c.cwnd(), c.ssthresh()), (MSS, 4 * MSS));
    }

    #[test]
    fn cubic_reduces_by_beta_and_returns_to_w_max() {
        let mut c = Cubic::new(100 * MSS);
        c.on_loss(100 * MSS, MSS, 0);
        // RFC 9438 §4.6: beta = 0.7.
        assert_eq!(c.ssthresh(), 70 * MSS);
        c.set_cwnd(c.ssthresh());
        // K = cbrt(100 * 0.3 / 0.4) ≈ 4.2 s: at K the window is back near
        // W_max, then it grows beyond it (convex region).
        // At 100 ms the cubic, not the Reno estimate, leads (§4.3).
        let rtt = 100_000_000u64;
        let mut now = 0;
        let mut at_k = 0;
        for _ in 0..100 {
            now += rtt;
            let w = c.cwnd();
            c.on_ack(w, MSS, now, Some(rtt));
            if now == 4_200_000_000 {
                at_k = c.cwnd();
            }
        }
        assert!(
            (95 * MSS..=105 * MSS).contains(&at_k),
            "near W_max at K: {at_k}"
        );
        assert!(c.cwnd() > 110 * MSS, "convex growth: {}", c.cwnd());
        // Fast convergence (§4.7): a loss below the last W_max remembers less.
        let mut c = Cubic::new(100 * MSS);
        c.on_loss(100 * MSS, MSS, 0);
        c.set_cwnd(80 * MSS);
        c.on_loss(80 * MSS, MSS, 0);
        assert!((c.s.w_max - 80.0 * 1.7 / 2.0).abs() < 1e-9);
        // Undo restores the state before the last reduction.
        assert!(c.undo());
        assert_eq!(c.cwnd(), 80 * MSS);
        assert_eq!(c.ssthresh(), 70 * MSS);
        c.on_rto(0, MSS, 0);
        assert_eq!(c.cwnd(), MSS);
    }

    #[test]
    fn cubic_is_reno_friendly_at_short_rtt_and_small_windows() {
        // §4.3: right after a loss with a small W_max, CUBIC grows at
        // least as fast as the Reno estimate (alpha ≈ 0.53 segments per RTT).
        let mut c = Cubic::new(10 * MSS);
        c.on_loss(10 * MSS, MSS, 0);
        c.set_cwnd(c.ssthresh());
        let start = c.cwnd();
        let mut now = 0;
        for _ in 0..20 {
            now += 1_000_000;
            let w = c.cwnd();
            c.on_ack(w, MSS, now, Some(1_000_000));
        }
        // 20 RTTs at alpha = 3 * 0.3 / 1.7 ≈ 0.53 segments each: 10.6.
        assert!(c.cwnd() >= start + 10 * MSS, "{} from {start}", c.cwnd());
    }

    #[test]
    fn rfc9438_fast_convergence_compares_with_w_max_not_the_last_window() {
        // §4.7: W_max = cwnd * (1 + beta) / 2 only when cwnd < W_max.
        let mut c = Cubic::new(100 * MSS);
        c.on_loss(100 * MSS, MSS, 0);
        assert_eq!(c.s.w_max, 100.0);
        c.set_cwnd(90 * MSS);
        c.on_loss(90 * MSS, MSS, 0);
        // 90 < 100: fast convergence, 90 * 0.85.
        assert!((c.s.w_max - 76.5).abs() < 1e-9, "{}", c.s.w_max);
        c.set_cwnd(80 * MSS);
        c.on_loss(80 * MSS, MSS, 0);
        // 80 >= 76.5: no fast convergence. RFC 8312 compared with the
        // window of the last event (90) and remembered 68.
        assert_eq!(c.s.w_max, 80.0);
    }

    #[test]
    fn rfc9438_ssthresh_is_beta_times_the_flight_size() {
        // §4.6: ssthresh = flight_size * beta_cubic. A window that grew
        // while the sender was limited by something else (1000 segments,
        // 100 in flight) is not the measure.
        let mut c = Cubic::new(1000 * MSS);
        c.on_loss(100 * MSS, MSS, 0);
        assert_eq!(c.ssthresh(), 70 * MSS);
        // At least two segments.
        c.on_loss(MSS, MSS, 0);
        assert_eq!(c.ssthresh(), 2 * MSS);
        // A timeout likewise, and the window restarts at one segment (§4.8).
        let mut c = Cubic::new(1000 * MSS);
        c.on_rto(50 * MSS, MSS, 0);
        assert_eq!((c.cwnd(), c.ssthresh()), (MSS, 35 * MSS));
    }

    #[test]
    fn rfc9438_reno_friendly_alpha_is_one_past_the_prior_window() {
        // §4.3: W_est grows by alpha_cubic = 0.529 segments per RTT until it
        // reaches cwnd_prior (10 here), then by 1 (SHOULD). Loss at 10
        // segments, restart at 7; K = cbrt(3 / 0.4) ≈ 1.96 s, so at a 1 ms
        // RTT the cubic stays near 7 and the Reno estimate leads.
        let mut c = Cubic::new(10 * MSS);
        c.on_loss(10 * MSS, MSS, 0);
        c.set_cwnd(c.ssthresh());
        assert_eq!(c.cwnd(), 7 * MSS);
        let rtt = 1_000_000u64;
        let mut now = 0;
        let mut after = Vec::new();
        for _ in 0..16 {
            now += rtt;
            let w = c.cwnd();
            c.on_ack(w, MSS, now, Some(rtt));
            after.push(c.cwnd());
        }
        // 7 + 6 * 0.529 = 10.17 after 6 RTTs: cwnd_prior reached.
        assert_eq!(after[5] / MSS, 10, "{after:?}");
        // Then one segment per RTT: 10 more RTTs, about 20 (with 0.529
        // throughout it would be 7 + 16 * 0.529 = 15.5).
        assert_eq!(after[15] / MSS, 20, "{after:?}");
    }
}
