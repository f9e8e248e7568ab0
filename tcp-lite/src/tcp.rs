//! One TCP connection as an I/O-free state machine (RFC 9293), with the
//! RFC 6298 retransmission timer, RFC 7323 window scaling and timestamps,
//! RFC 5961 challenge ACKs, and loss recovery: with SACK, RFC 6675
//! SACK-based recovery (pipe, NextSeg) paced by RFC 6937 PRR, RFC 3042
//! limited transmit, RFC 8985 RACK-style time-based loss marking and tail
//! loss probes, and RFC 2883 D-SACK to undo spurious retransmissions;
//! without SACK, RFC 5681/6582 fast retransmit and NewReno. The window's
//! size is up to a [`cc::CongestionControl`] (CUBIC or NewReno).
//!
//! Call order: [`Connection::handle_segment`] for each received segment
//! (in-order payload is handed to the caller's `deliver` closure as a slice of
//! the received frame — no stream buffer on the common path; only
//! out-of-order data is copied and held until the gap fills);
//! [`Connection::poll_transmit`] to get segments to send;
//! [`Connection::poll_timeout`] / [`Connection::handle_timeout`] for timers.
//! Calling `handle_timeout` early or twice is harmless. Time is `now` in
//! nanoseconds, supplied by the caller.
//!
//! Layout (as quinn-proto's `connection/`): this file holds the types, the
//! [`Connection`] state and its setup, accessors and close; `tcp/send_buf.rs`
//! the send buffer and the application's side of it; `tcp/input.rs` the
//! receive path; `tcp/ack.rs` what an arriving ACK does to the sender;
//! `tcp/recovery.rs` loss recovery; `tcp/cwv.rs` congestion window growth
//! and validation; `tcp/timers.rs` the timers; `tcp/output.rs` the transmit
//! path. The unit tests are in `tcp/tests.rs`.

use std::collections::VecDeque;

use crate::cc::{self, Algorithm, CongestionControl};
use crate::reasm::{Insert, Reassembly};
use crate::sack::Scoreboard;
use crate::wire::{TcpFlags as Flags, TcpRepr, TcpTimestamp};

mod ack;
mod cwv;
mod input;
mod output;
mod recovery;
mod send_buf;
mod timers;

pub use send_buf::RecordRoom;
use send_buf::SendBuf;

/// Sequence-space comparisons (RFC 9293 §3.4, modulo 2^32).
#[inline]
fn lt(a: u32, b: u32) -> bool {
    (a.wrapping_sub(b) as i32) < 0
}
#[inline]
fn le(a: u32, b: u32) -> bool {
    (a.wrapping_sub(b) as i32) <= 0
}

/// Tunables.
#[derive(Debug, Clone, Copy)]
pub struct Config {
    /// MSS we announce (and the most we send before hearing the peer's).
    pub mss: u16,
    /// Receive buffer: the window we offer (octets).
    pub rcv_buf: u32,
    /// Our window-scale shift (RFC 7323 §2.2; at most 14).
    pub window_shift: u8,
    /// Offer timestamps (RFC 7323 §3).
    pub timestamps: bool,
    /// Offer SACK (RFC 2018): report out-of-order blocks, skip what the peer reports.
    pub sack: bool,
    /// Initial RTO (RFC 6298 §2.1: one second).
    pub rto_initial: u64,
    /// Lower bound of the RTO (RFC 6298 §2.4 says 1 s; configurable for LANs).
    pub rto_min: u64,
    /// Upper bound of the RTO.
    pub rto_max: u64,
    /// Delay ACKs by this much (`None`: ACK at once, for latency).
    pub delayed_ack: Option<u64>,
    /// TIME-WAIT duration (2 MSL).
    pub time_wait: u64,
    /// Retransmissions of one segment before the connection is aborted;
    /// also the most window probes in a row that bring no ACK at all.
    pub max_retransmits: u32,
    /// Longest the peer may keep its window closed while we have data or a
    /// FIN to send (ns) before the connection is aborted with
    /// [`TcpError::TimedOut`], however it answers our probes. Counted from
    /// when the window was found closed; only a window that opens restarts
    /// it. Linux bounds the same wait with TCP_USER_TIMEOUT or, once the
    /// application has closed, tcp_orphan_retries (`tcp_probe_timer`);
    /// RFC 1122 §4.2.2.17 lets a connection stay open while the peer
    /// answers, but then a peer that answers every probe (or takes one
    /// octet per probe) holds the connection, and a graceful close,
    /// forever.
    pub persist_timeout: u64,
    /// Send buffer size (octets accepted by [`Connection::send`]).
    pub snd_buf: usize,
    /// Most distinct ranges of out-of-order data held; a segment that would
    /// open one more is dropped (the peer sends it again). Bounds the work
    /// and bookkeeping a peer can cause by scattering small segments.
    pub max_ooo_ranges: usize,
    /// Most distinct ranges of the peer's SACK blocks remembered; when full,
    /// the shortest range is forgotten (that data may be resent needlessly).
    pub max_sack_ranges: usize,
    /// Most challenge ACKs (RFC 5961 §3.2, §4.2, §5.2) sent per
    /// [`challenge_ack_interval`](Self::challenge_ack_interval) on one
    /// connection; the rest are counted in
    /// [`Stats::challenge_acks_suppressed`] and not sent. RFC 5961 §7: an
    /// implementation SHOULD throttle challenge ACKs. The limit is per
    /// connection, not global as Linux's tcp_challenge_ack_limit once was:
    /// a global counter is a side channel that tells an off-path attacker
    /// when its guess hit some connection (CVE-2016-5696).
    pub challenge_ack_limit: u32,
    /// Length of the challenge-ACK counting interval (ns).
    pub challenge_ack_interval: u64,
    /// Congestion control (RFC 9438 CUBIC by default, or NewReno).
    pub congestion: Algorithm,
    /// Acknowledge every this many full-sized in-order segments (RFC 5681
    /// §4.2: at least every second one, SHOULD), each with its own ACK
    /// even when they arrive in one poll round; 0: one ACK per poll
    /// round, covering all that arrived (see bench/README.md, "Receiver
    /// ACKs", for the measurements behind the default).
    pub ack_every: u32,
    /// RFC 7661 congestion window validation: while the sender does not
    /// use half its window (pipeACK < cwnd/2, the non-validated phase,
    /// §4.1) cwnd does not grow (§4.3), a loss then brings it to what
    /// was used (§4.4.1), and a non-validated phase longer than
    /// [`nvp_duration`](Self::nvp_duration) halves it (§4.4.2). Off by
    /// default: `tcp-vs-linux --loss` showed no gain, and medians at 0.1%
    /// and 2% loss leaning the wrong way (bench/README.md, "Window
    /// validation").
    pub cwv: bool,
    /// RFC 7661 §4.4.2: the non-validated period (NVP) after which an
    /// unused window is reduced (ns; the RFC's 5 minutes by default).
    pub nvp_duration: u64,
}

/// RFC 6675 §2 / RFC 5681 §3.2: duplicate ACKs (or SACKed segments above
/// a hole) that mean loss.
const DUP_THRESH: u32 = 3;
/// RFC 8985 §7.2: the worst-case delayed-ACK time added to the probe
/// timeout when only one segment is in flight.
const WC_DEL_ACK: u64 = 200_000_000;
/// Added to a probe timeout with more than one segment out (see `arm_tlp`):
/// four timer granularities, room for a peer's ACK to be a poll round or
/// two late without a probe.
const PTO_SLACK: u64 = 4 * TIMER_GRANULARITY;
/// Most ACK points (`Config::ack_every`) held between two polls: a poll
/// round takes at most 64 frames.
const MAX_ACK_POINTS: usize = 64;
/// Floor of the reordering window: a LAN's RTT is tens of microseconds,
/// and timers much shorter than a poll round would fire on every gap
/// between ACKs.
const TIMER_GRANULARITY: u64 = 50_000;

impl Default for Config {
    fn default() -> Self {
        Config {
            mss: 1460,
            rcv_buf: 1 << 20,
            window_shift: 7,
            timestamps: true,
            sack: true,
            rto_initial: 1_000_000_000,
            rto_min: 200_000_000,
            rto_max: 60_000_000_000,
            delayed_ack: None,
            time_wait: 60_000_000_000,
            max_retransmits: 12,
            persist_timeout: 120_000_000_000,
            snd_buf: 4 << 20,
            max_ooo_ranges: 64,
            max_sack_ranges: 32,
            challenge_ack_limit: 10,
            challenge_ack_interval: 1_000_000_000,
            congestion: Algorithm::Cubic,
            ack_every: 0,
            cwv: false,
            nvp_duration: 300_000_000_000,
        }
    }
}

/// RFC 9293 §3.3.2 states.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum State {
    /// No connection.
    Closed,
    /// SYN sent, waiting for SYN-ACK.
    SynSent,
    /// SYN received and answered.
    SynReceived,
    /// Data flows both ways.
    Established,
    /// We closed; our FIN is not acknowledged yet.
    FinWait1,
    /// We closed and our FIN was acknowledged; waiting for the peer's FIN.
    FinWait2,
    /// The peer closed; we may still send.
    CloseWait,
    /// Both closed at once; waiting for the ACK of our FIN.
    Closing,
    /// The peer closed, then we did; waiting for the ACK of our FIN.
    LastAck,
    /// Both FINs acknowledged; lingering 2 MSL.
    TimeWait,
}

/// Why a connection ended abnormally.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TcpError {
    /// RST in answer to our SYN: "connection refused".
    Refused,
    /// The peer reset an established connection.
    Reset,
    /// Retransmissions exhausted.
    TimedOut,
}

impl core::fmt::Display for TcpError {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.write_str(match self {
            TcpError::Refused => "connection refused",
            TcpError::Reset => "connection reset by peer",
            TcpError::TimedOut => "connection timed out",
        })
    }
}

/// Counters.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Stats {
    /// Segments retransmitted on RTO.
    pub rto_retransmits: u64,
    /// RFC 6675 §4 NextSeg rule 4 rescue retransmissions.
    pub rescue_retransmits: u64,
    /// Fast retransmits: without SACK, 3 duplicate ACKs or NewReno partial
    /// ACKs; with SACK, segments resent during recovery (RFC 6675).
    pub fast_retransmits: u64,
    /// Out-of-order segments stored.
    pub ooo_segments: u64,
    /// Out-of-order segments dropped: they would have opened a range beyond
    /// [`Config::max_ooo_ranges`].
    pub ooo_dropped: u64,
    /// Challenge ACKs sent (RFC 5961).
    pub challenge_acks: u64,
    /// Challenge ACKs not sent: over [`Config::challenge_ack_limit`] in
    /// their interval (RFC 5961 §7).
    pub challenge_acks_suppressed: u64,
    /// Octets delivered in order.
    pub delivered: u64,
    /// Retransmission runs skipped because the peer SACKed them.
    pub sack_skipped: u64,
    /// Retransmission timeouts found spurious by their timestamps and
    /// undone (RFC 3522 detection, RFC 4015 response).
    pub spurious_rto_undone: u64,
    /// Segments dropped for lacking the timestamps option once timestamps
    /// are in use (RFC 7323 §3.2).
    pub no_timestamp_drops: u64,
    /// Connections aborted because the peer kept its window closed too
    /// long ([`Config::persist_timeout`]) or left probes unanswered.
    pub persist_aborts: u64,
    /// SACK-based loss recoveries entered (RFC 6675 §5).
    pub sack_recoveries: u64,
    /// Out-of-order range-set entries visited storing and delivering
    /// out-of-order data: a bounded number per segment, whatever a peer
    /// sends (the invariant fuzzer, `tests/tests/heap_bound.rs`, checks).
    pub reasm_steps: u64,
    /// Losses marked by the RACK reordering timer (RFC 8985 §6), not by
    /// duplicate-ACK counting.
    pub rack_losses: u64,
    /// Retransmissions found lost themselves and sent again (RFC 8985
    /// §6.2 detects them; RFC 6675 alone would wait for the RTO).
    pub lost_retransmits: u64,
    /// Tail loss probes sent (RFC 8985 §7).
    pub tlp_probes: u64,
    /// Of [`tlp_probes`](Self::tlp_probes), those sent in recovery once
    /// every octet deemed lost had been resent (our extension of RFC 8985
    /// §7, see `arm_tlp`).
    pub recovery_probes: u64,
    /// D-SACK blocks received (RFC 2883 §4).
    pub dsacks_received: u64,
    /// Window reductions undone because D-SACK showed every retransmission
    /// of the episode was needless (RFC 2883 §5, RFC 3708).
    pub dsack_undos: u64,
    /// Time (ns of the connection's clock) the sender was limited by its
    /// congestion window: it had data that cwnd (less pipe, or PRR's
    /// allowance in recovery) left no room for, and the peer's window did.
    /// Counted from one [`poll_transmit`](Connection::poll_transmit) that
    /// finds it so to the next that finds otherwise.
    pub cwnd_limited_ns: u64,
    /// Time the sender was limited by the application: nothing left to
    /// send while cwnd had room for a segment, and the application had
    /// not closed (no FIN queued).
    pub app_limited_ns: u64,
    /// Time the sender was limited by the peer's receive window: it had
    /// data, and cwnd had room for it where the advertised window did not
    /// (Linux's `tcpi_rwnd_limited`).
    pub rwnd_limited_ns: u64,
    /// RFC 7661 §4.4.2 reductions after a long non-validated phase.
    pub cwv_nvp_reductions: u64,
    /// RFC 7661 §4.4.1 reductions: a loss in the non-validated phase.
    pub cwv_loss_reductions: u64,
    /// Of [`rto_retransmits`](Self::rto_retransmits) with data
    /// outstanding in a synchronized state, those that fired while the
    /// peer had SACKed octets above SND.UNA: it had reported data past
    /// the hole, so RFC 6675 or RFC 8985 could in principle have acted
    /// (the RTO audit of issue 12; the rest had nothing SACKed: the whole
    /// flight, or every ACK for it, was lost).
    pub rto_sacked_above: u64,
    /// Of those, the ones where the octet at SND.UNA had already been
    /// retransmitted in the episode (HighRxt above SND.UNA): a lost
    /// retransmission that RACK (RFC 8985 §6.2) did not find.
    pub rto_hole_resent: u64,
    /// Timeouts that fired with a tail loss probe out (RFC 8985 §7.3: the
    /// RTO is armed after a probe): the probe or its ACK was lost too.
    pub rto_after_probe: u64,
    /// Timeouts that repeated an unanswered one (RFC 6298 §5.5 backoff):
    /// the retransmission of the first, or every ACK for it, was lost.
    pub rto_repeated: u64,
}

/// What limited the sender at the last transmit pass (for
/// [`Stats::cwnd_limited_ns`] and [`Stats::app_limited_ns`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Limit {
    /// Neither: sending, limited by the peer's window, or not open.
    Other,
    /// Data waiting, no room in cwnd.
    Cwnd,
    /// Nothing to send, room in cwnd.
    App,
    /// Data waiting, room in cwnd, none in the peer's window.
    Rwnd,
}

/// RFC 7661 §4.2 pipeACK samples kept: the sampling period is this many
/// sample lengths (one smoothed RTT each).
const PIPEACK_SAMPLES: usize = 3;

/// Where the payload of a segment from a connection in external send mode
/// lies ([`Connection::poll_transmit_ext`]): `len` octets from stream offset
/// `offset` (octets queued before them, counted from the first record).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ExtPayload {
    /// Stream offset of the first payload octet.
    pub offset: u64,
    /// Payload octets.
    pub len: usize,
}

/// The payload of a segment from a connection whose send buffer holds no
/// octets (external send mode): `len` octets that `write` puts where the
/// frame is built, so they are copied once, from where the application
/// keeps them. `write(at, dst)` writes payload octets `at .. at +
/// dst.len()` into `dst`: the whole payload in one call, or in pieces in
/// order where the frame spans several device buffers. `write` returns
/// false if it cannot produce them (the source went away): the frame is
/// then dropped.
pub struct PayloadFill<'a> {
    /// Octets of payload.
    pub len: usize,
    /// Writes them: `write(at, dst)`, from payload offset `at`.
    pub write: &'a mut dyn FnMut(usize, &mut [u8]) -> bool,
}

impl core::fmt::Debug for PayloadFill<'_> {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.debug_struct("PayloadFill")
            .field("len", &self.len)
            .finish()
    }
}

/// Where segments go: each with its [`ExtPayload`] in external send mode.
pub type Emit<'a> = &'a mut dyn FnMut(&TcpRepr<'_>, Option<ExtPayload>);

/// One TCP connection.
#[derive(Debug)]
pub struct Connection {
    cfg: Config,
    state: State,
    local_port: u16,
    remote_port: u16,
    error: Option<TcpError>,
    // Send side.
    iss: u32,
    snd_una: u32,
    snd_nxt: u32,
    snd_max: u32,
    snd_wnd: u32,
    /// The largest window the peer ever offered (MAX.SND.WND, RFC 5961 §5.2).
    max_snd_wnd: u32,
    snd_wl1: u32,
    snd_wl2: u32,
    snd_shift: u8,
    snd_mss: usize,
    /// Octets from sequence `buf_seq` on: acknowledged ones are dropped.
    snd_buf: SendBuf,
    /// Sequence numbers just past each record queued by `send_record`
    /// and not yet acknowledged (MPA-aware segmentation, RFC 5044 §8).
    records: VecDeque<u32>,
    /// Where the last `record_cut` over more than a few records ended in
    /// `records` (the index of the first record past the segment it cut):
    /// the next segment usually starts there. A hint only, checked before
    /// use (records dropped from the front since shift it).
    cut_hint: usize,
    buf_seq: u32,
    fin_queued: bool,
    // Receive side.
    irs: u32,
    rcv_nxt: u32,
    rcv_shift: u8,
    /// Out-of-order data by stream offset, in bounded coalesced ranges.
    ooo: Reassembly,
    /// RCV.NXT as a stream offset: octets delivered so far (and the FIN).
    rcv_off: u64,
    peer_fin_off: Option<u64>,
    // SACK (RFC 2018): in use, and the peer's reported blocks above snd_una.
    sack_on: bool,
    sacked: Scoreboard,
    // Timestamps.
    ts_on: bool,
    ts_recent: u32,
    // RTT / RTO (RFC 6298).
    srtt: Option<u64>,
    rttvar: u64,
    rto: u64,
    rtt_probe: Option<(u32, u64)>,
    retries: u32,
    // Congestion control: the window's size (RFC 5681, RFC 9438).
    cc: Box<dyn CongestionControl>,
    /// Set by a retransmission timeout: our timestamp when it fired. An ACK
    /// echoing an older timestamp was for the original transmission: the
    /// timeout was spurious (RFC 3522) and `cc` undoes it.
    rto_undo: Option<u32>,
    dupacks: u32,
    /// RecoveryPoint (RFC 6675 §5) / "recover" (RFC 6582).
    recover: u32,
    in_recovery: bool,
    // SACK-based loss recovery (RFC 6675, RFC 6937, RFC 8985).
    /// UnSACKed octets in [SND.UNA, lost_end) are deemed lost.
    lost_end: u32,
    /// HighRxt (RFC 6675 §2): lost octets below it were retransmitted.
    high_rxt: u32,
    /// SND.MAX when the current round of retransmissions began, and the
    /// end of its first retransmission: new data above the one and octets
    /// resent above the other were sent after that retransmission, so once
    /// enough of them is SACKed while SND.UNA is still missing, it was lost
    /// (RFC 8985 §6.2, send order read from sequence order).
    rxt_mark: Option<(u32, u32)>,
    /// The octets the rescue retransmission (RFC 6675 rule 4) resent while
    /// the round's retransmissions were out: sent after them, so once
    /// SACKed they show an earlier retransmission still missing lost, as
    /// the octets `rxt_mark` tracks do (RFC 8985 §6.2). Cleared with it.
    rescue_sent: Option<(u32, u32)>,
    /// RFC 6937 §3: prr_delivered, prr_out, RecoverFS.
    prr_delivered: usize,
    prr_out: usize,
    recover_fs: usize,
    /// Octets the sender may still send on the last ACK (PRR's sndcnt).
    prr_allow: usize,
    /// Smallest RTT seen (RFC 8985 §6.2.1: the reordering window is a
    /// quarter of it), and the D-SACK-driven multiplier (§6.2.4).
    min_rtt: Option<u64>,
    reo_wnd_mult: u32,
    /// Recoveries left before `reo_wnd_mult` goes back to 1 (§6.2.4).
    reo_wnd_persist: u32,
    /// Smoothed RTT from timed segments (ns), for the probe timeout.
    fine_srtt: Option<u64>,
    /// RACK reordering timer: when SACKed data sits above holes not yet
    /// deemed lost, they are deemed lost when it expires (RFC 8985 §6.2).
    t_rack: Option<u64>,
    /// Tail loss probe timer (RFC 8985 §7.2), a probe due, and the SND.MAX
    /// covered by a retransmitted probe not yet acknowledged.
    t_tlp: Option<u64>,
    tlp_due: bool,
    tlp_high: Option<u32>,
    /// The probe's retransmission came back in a D-SACK: it was needless.
    tlp_dsacked: bool,
    /// A probe (new data or a retransmission) went and no ACK has advanced
    /// SND.UNA since: RFC 8985 §7.3 arms the RTO after a probe, not the
    /// probe timer again (one probe at a time).
    tlp_out: bool,
    /// RFC 6675 §4 NextSeg rule 4: RescueRxt, the RecoveryPoint of the
    /// episode whose rescue retransmission went (`None`: undefined).
    rescue_rxt: Option<u32>,
    /// Our timestamp on the probe, if it was later (by the clock's tick)
    /// than every original transmission it covers: an ACK echoing it was
    /// caused by the probe (RFC 7323 §4.3), so the probe repaired a loss.
    tlp_ts: Option<u32>,
    /// Our timestamp when SND.MAX last grew.
    max_ts: u32,
    /// This recovery episode's retransmitted octets and the octets D-SACK
    /// reported as needless (RFC 3708 §3: undo when all were).
    episode_rxt: u64,
    episode_dsacked: u64,
    /// The episode's reduction may still be undone.
    undo_armed: bool,
    /// A D-SACK block to report in the next ACK (RFC 2883 §4).
    dsack: Option<(u32, u32)>,
    // Timers (absolute deadlines).
    t_rtx: Option<u64>,
    t_persist: Option<u64>,
    t_ack: Option<u64>,
    t_tw: Option<u64>,
    // Pending output.
    ack_now: bool,
    /// Out-of-order arrivals since the last ACK: each gets its own duplicate
    /// ACK (RFC 5681 §4.2), or the sender never counts three.
    dupacks_owed: u32,
    /// Full-sized in-order segments since the last ACK point, and the
    /// RCV.NXT after every `Config::ack_every`-th of them: each gets its
    /// own ACK on the next `poll_transmit` (bounded by `MAX_ACK_POINTS`).
    ack_count: u32,
    ack_points: Vec<u32>,
    /// Largest segment payload received (the peer's segment size, for
    /// "full-sized").
    rcv_seg_max: usize,
    /// Octets delivered and still held for the application by the owner
    /// (`set_rcv_held`), the right edge of the window last advertised,
    /// and that window (octets).
    rcv_held: u32,
    /// A cap on the window offered, whatever `rcv_buf` (`set_rcv_cap`).
    rcv_cap: Option<u32>,
    rcv_adv: Option<u32>,
    wnd_sent: u32,
    rst: Option<(u32, u32, bool)>,
    persist_probe: bool,
    /// Window probes sent since the last ACK arrived.
    persist_probes: u32,
    /// When the window was found closed with data waiting (`None`: open).
    zero_wnd_since: Option<u64>,
    syn_unsent: bool,
    /// SYN-ACK retransmissions before a half-open connection gives up
    /// (`None`: `cfg.max_retransmits`); a listener sets it (RFC 4987 §3.2).
    syn_ack_retries: Option<u32>,
    /// Start of the current challenge-ACK interval and the challenge ACKs
    /// sent in it (RFC 5961 §7).
    challenge_since: u64,
    challenge_sent: u32,
    stats: Stats,
    /// What limited the sender at the last transmit pass, and since when.
    limit: Limit,
    limit_since: u64,
    /// `now` of the last transmit pass (closes the open interval when
    /// the connection ends).
    last_pass: u64,
    /// Octets deemed lost and retransmitted in the current recovery
    /// episode (RFC 6675 NextSeg rule 1; not rescues or probes): RFC
    /// 7661 §4.4.1's R.
    episode_lost: u64,
    /// RFC 7661 §4.2 pipeACK: the sample being measured (start, octets
    /// acknowledged since), and the last completed ones (end, octets).
    /// `pipeack_defined` is false until a sample completes, and again
    /// after a §4.4.1 reduction (pipeACK "undefined": validated).
    pipeack_cur: Option<(u64, usize)>,
    pipeack_samples: [(u64, usize); PIPEACK_SAMPLES],
    pipeack_defined: bool,
    /// Start of the current non-validated phase (RFC 7661 §4.1), or of
    /// the last NVP period after a §4.4.2 reduction.
    nvp_since: Option<u64>,
    /// max(pipeACK, LossFlightSize) of a loss detected in the NVP: the
    /// §4.4.1 reduction due at the end of its recovery.
    nvp_loss: Option<usize>,
}

/// A segment to transmit: the header fields and a borrowed payload.
pub type Segment<'a> = TcpRepr<'a>;

impl Connection {
    fn blank(cfg: Config, local_port: u16, remote_port: u16, iss: u32, state: State) -> Self {
        let mss = usize::from(cfg.mss.max(64));
        Connection {
            cfg,
            state,
            local_port,
            remote_port,
            error: None,
            iss,
            snd_una: iss,
            snd_nxt: iss,
            snd_max: iss,
            snd_wnd: 0,
            max_snd_wnd: 0,
            snd_wl1: 0,
            snd_wl2: 0,
            snd_shift: 0,
            snd_mss: mss,
            snd_buf: SendBuf::default(),
            records: VecDeque::new(),
            cut_hint: 0,
            buf_seq: iss.wrapping_add(1),
            fin_queued: false,
            irs: 0,
            rcv_nxt: 0,
            rcv_shift: 0,
            ooo: Reassembly::default(),
            rcv_off: 0,
            peer_fin_off: None,
            sack_on: false,
            sacked: Scoreboard::default(),
            ts_on: false,
            ts_recent: 0,
            srtt: None,
            rttvar: 0,
            rto: cfg.rto_initial,
            rtt_probe: None,
            retries: 0,
            // RFC 5681 §3.1: IW of up to 4 segments for small MSS; we use 10 (RFC 6928).
            cc: cc::new(cfg.congestion, 10 * mss),
            rto_undo: None,
            dupacks: 0,
            recover: iss,
            in_recovery: false,
            lost_end: iss,
            high_rxt: iss,
            rxt_mark: None,
            rescue_sent: None,
            prr_delivered: 0,
            prr_out: 0,
            recover_fs: 0,
            prr_allow: 0,
            min_rtt: None,
            reo_wnd_mult: 1,
            reo_wnd_persist: 0,
            fine_srtt: None,
            t_rack: None,
            t_tlp: None,
            tlp_due: false,
            tlp_out: false,
            tlp_high: None,
            tlp_dsacked: false,
            rescue_rxt: None,
            tlp_ts: None,
            max_ts: 0,
            episode_rxt: 0,
            episode_lost: 0,
            last_pass: 0,
            limit: Limit::Other,
            limit_since: 0,
            pipeack_cur: None,
            pipeack_samples: [(0, 0); PIPEACK_SAMPLES],
            pipeack_defined: false,
            nvp_since: None,
            nvp_loss: None,
            episode_dsacked: 0,
            undo_armed: false,
            dsack: None,
            t_rtx: None,
            t_persist: None,
            t_ack: None,
            t_tw: None,
            ack_now: false,
            dupacks_owed: 0,
            ack_count: 0,
            ack_points: Vec::new(),
            rcv_seg_max: 0,
            rcv_held: 0,
            rcv_cap: None,
            rcv_adv: None,
            wnd_sent: 0,
            rst: None,
            persist_probe: false,
            persist_probes: 0,
            zero_wnd_since: None,
            syn_unsent: false,
            syn_ack_retries: None,
            challenge_since: 0,
            challenge_sent: 0,
            stats: Stats::default(),
        }
    }

    /// Active open: the SYN goes out on the next [`poll_transmit`](Self::poll_transmit).
    /// `iss` should come from an RFC 6528 generator.
    pub fn connect(cfg: Config, local_port: u16, remote_port: u16, iss: u32) -> Self {
        let mut c = Self::blank(cfg, local_port, remote_port, iss, State::SynSent);
        c.syn_unsent = true;
        c
    }

    /// Passive open from a received SYN (the listener has checked the port and
    /// its backlog). The SYN-ACK goes out on the next `poll_transmit`.
    pub fn accept(cfg: Config, syn: &TcpRepr<'_>, iss: u32) -> Self {
        let mut c = Self::blank(cfg, syn.dst_port, syn.src_port, iss, State::SynReceived);
        c.irs = syn.seq_number;
        c.rcv_nxt = syn.seq_number.wrapping_add(1);
        c.take_syn_options(syn);
        c.set_snd_wnd(u32::from(syn.window)); // RFC 7323 §2.2: never scaled in a SYN
        c.snd_wl1 = syn.seq_number;
        c.syn_unsent = true;
        c
    }

    fn take_syn_options(&mut self, syn: &TcpRepr<'_>) {
        if let Some(m) = syn.max_seg_size {
            self.snd_mss = usize::from(m).clamp(64, usize::from(self.cfg.mss.max(64)));
        } else {
            self.snd_mss = 536.min(usize::from(self.cfg.mss.max(64))); // RFC 9293 §3.7.1 default
        }
        self.cc = cc::new(self.cfg.congestion, 10 * self.snd_mss);
        // RFC 7323 §2.2: scaling only if both sides sent the option.
        match syn.window_scale {
            Some(s) => {
                self.snd_shift = s.min(14);
                self.rcv_shift = self.cfg.window_shift.min(14);
            }
            None => {
                self.snd_shift = 0;
                self.rcv_shift = 0;
            }
        }
        self.sack_on = self.cfg.sack && syn.sack_permitted;
        if let (true, Some(ts)) = (self.cfg.timestamps, syn.timestamp) {
            self.ts_on = true;
            self.ts_recent = ts.tsval;
        } else {
            self.ts_on = false;
        }
    }

    /// Give up a passive open after `n` SYN-ACK retransmissions (with the
    /// RTO doubling from `rto_initial`, 5 gives up after about 63 s with the
    /// default one-second RTO, as Linux's `tcp_synack_retries`).
    pub(crate) fn set_syn_ack_retries(&mut self, n: u32) {
        self.syn_ack_retries = Some(n);
    }

    /// The peer's port.
    pub fn remote_port(&self) -> u16 {
        self.remote_port
    }

    /// Our port.
    pub fn local_port(&self) -> u16 {
        self.local_port
    }

    /// State.
    pub fn state(&self) -> State {
        self.state
    }

    /// Why the connection failed, if it did.
    pub fn error(&self) -> Option<TcpError> {
        self.error
    }

    /// Counters.
    pub fn stats(&self) -> Stats {
        Stats {
            reasm_steps: self.ooo.steps,
            ..self.stats
        }
    }

    /// Data octets one segment carries: the peer's MSS less the
    /// timestamps option when it is on (RFC 6691; what Linux calls the
    /// effective MSS). Size FPDUs to this so each fits one segment.
    pub fn mss(&self) -> usize {
        if self.ts_on {
            self.snd_mss.saturating_sub(12).max(1)
        } else {
            self.snd_mss
        }
    }

    /// Octets accepted by `send` and not yet acknowledged.
    pub fn unacked(&self) -> usize {
        self.snd_buf.len()
    }

    /// Congestion window (octets).
    pub fn cwnd(&self) -> usize {
        self.cc.cwnd()
    }

    /// Slow-start threshold.
    pub fn ssthresh(&self) -> usize {
        self.cc.ssthresh()
    }

    /// Current RTO.
    pub fn rto(&self) -> u64 {
        self.rto
    }

    /// Graceful close: a FIN follows the queued data.
    pub fn close(&mut self) {
        match self.state {
            State::SynSent => self.state = State::Closed,
            State::SynReceived | State::Established => {
                self.fin_queued = true;
                self.state = State::FinWait1;
            }
            State::CloseWait => {
                self.fin_queued = true;
                self.state = State::LastAck;
            }
            _ => {}
        }
    }

    /// Abortive close: send RST, drop everything.
    pub fn abort(&mut self) {
        if matches!(self.state, State::Closed | State::TimeWait | State::SynSent) {
            self.state = State::Closed;
            return;
        }
        self.rst = Some((self.snd_nxt, 0, false));
        self.enter_closed();
    }

    fn enter_closed(&mut self) {
        self.state = State::Closed;
        // Close the open limited-time interval at the last transmit pass.
        let t = self.last_pass;
        self.set_limit(Limit::Other, t);
        self.t_rtx = None;
        self.t_rack = None;
        self.t_tlp = None;
        self.t_persist = None;
        self.t_ack = None;
        self.t_tw = None;
    }

    fn ts_now(&self, now: u64) -> u32 {
        (now / 1_000_000) as u32
    }

    fn established_data_state(&self) -> bool {
        matches!(
            self.state,
            State::Established
                | State::CloseWait
                | State::FinWait1
                | State::Closing
                | State::LastAck
        )
    }
}

/// The reset answering a segment that belongs to no connection (RFC 9293
/// §3.10.7.1, "If the state is CLOSED"): nothing for a RST; for a segment
/// with ACK, `<SEQ=SEG.ACK><CTL=RST>`; otherwise
/// `<SEQ=0><ACK=SEG.SEQ+SEG.LEN><CTL=RST,ACK>`. This is how a closed port
/// refuses a connection.
pub fn reset_for(seg: &TcpRepr<'_>) -> Option<TcpRepr<'static>> {
    if seg.flags.contains(Flags::RST) {
        return None;
    }
    if seg.flags.contains(Flags::ACK) {
        return Some(TcpRepr::new(
            seg.dst_port,
            seg.src_port,
            seg.ack_number,
            Flags::RST,
        ));
    }
    let mut r = TcpRepr::new(seg.dst_port, seg.src_port, 0, Flags::RST | Flags::ACK);
    r.ack_number = seg.seq_number.wrapping_add(seg.segment_len() as u32);
    Some(r)
}

#[cfg(test)]
mod tests;
