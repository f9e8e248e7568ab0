//! Where one hop of a message spends its time inside a poll loop, by
//! stage (cargo feature `stages`; without it every mark is an empty
//! inline function and nothing is kept).
//!
//! A hop is a round that receives a frame and publishes a reply
//! ([`FrameSink::publish`](iwarp_net::iface::FrameSink::publish)) to the
//! device after a post that the round's own code (a run-to-completion
//! hook) made in answer: a ping-pong's turn at one end. The loop marks
//! the time-stamp counter (`quanta`'s raw clock: `rdtsc` where the TSC is
//! invariant, the monotonic clock elsewhere) at each boundary:
//!
//! | stage | from | to |
//! |---|---|---|
//! | `round start to frame` | the round began (clock read, commands looked at) | its first frame handed to the stack |
//! | `receive` | | the round's last frame handled (parse, TCP, placement) |
//! | `first poll` | | the stack's first poll of the round ends (the hooks ran, one posted) |
//! | `posts taken` | | the round's posts handed to the stack (command queue, `post_send`) |
//! | `to transmit` | | the last transmit pass begins (a TCP connection's, or the SCTP associations' packets; the round's set-up before it) |
//! | `transmit` | | that pass ends (queue pair, FPDU, TCP segment, frame built in the device) |
//! | `publish` | | the device made it visible (memif's ring head, AF_XDP's kick) |
//!
//! and `hop` is the sum of all but the first: frame in to reply visible.
//! A round that received and published in another order (a reply sent
//! from the first poll) is counted apart, not timed. Each loop thread
//! keeps up to 2^18 hops (the rest are counted); a thread's record joins
//! [`take`]'s list when the thread ends (a loop stopped). Each mark reads
//! the counter once (under 10 ns on the 2-vCPU VM: its shortest stage,
//! `publish`, measures 10 ns with its read), so a stage's figure carries
//! one read and a hop about seven.

#[cfg(feature = "stages")]
mod imp {
    use std::cell::{Cell, RefCell};
    use std::sync::Mutex;

    /// Marks per round.
    pub const MARKS: usize = 8;
    /// Hops kept per thread (the rest are counted, not kept).
    pub const KEPT: usize = 1 << 18;

    thread_local! {
        static CLOCK: quanta::Clock = quanta::Clock::new();
        static NOW: [Cell<u64>; MARKS] = const { [const { Cell::new(0) }; MARKS] };
        static LOG: RefCell<Log> = RefCell::new(Log::default());
    }

    static DONE: Mutex<Vec<super::LoopStages>> = Mutex::new(Vec::new());

    #[derive(Default)]
    struct Log {
        /// The thread's name, taken while the thread runs: in the record's
        /// destructor (thread-local storage being torn down) the thread's
        /// own handle may be gone already.
        thread: Option<String>,
        hops: Vec<[u32; MARKS - 1]>,
        dropped: u64,
        other: u64,
    }

    impl Drop for Log {
        fn drop(&mut self) {
            if self.hops.is_empty() && self.other == 0 {
                return;
            }
            let s = summarize(self);
            if let Ok(mut d) = DONE.lock() {
                d.push(s);
            }
        }
    }

    fn summarize(log: &Log) -> super::LoopStages {
        let clock = quanta::Clock::new();
        let ns = |t: u64| clock.delta_as_nanos(0, t);
        let mut stages = Vec::new();
        let mut col = |name: &'static str, f: &dyn Fn(&[u32; MARKS - 1]) -> u64| {
            let mut v: Vec<u64> = log.hops.iter().map(f).collect();
            v.sort_unstable();
            let at = |q: f64| {
                v.get(((v.len() as f64 - 1.0) * q) as usize)
                    .copied()
                    .unwrap_or(0)
            };
            stages.push((name, ns(at(0.5)), ns(at(0.9))));
        };
        for (i, name) in super::STAGES.iter().enumerate().skip(1) {
            col(name, &|h| u64::from(h[i - 1]));
        }
        col("hop", &|h| h[1..].iter().map(|&d| u64::from(d)).sum());
        super::LoopStages {
            thread: log.thread.clone().unwrap_or_else(|| "unnamed".into()),
            hops: log.hops.len() as u64 + log.dropped,
            other: log.other,
            stages,
        }
    }

    #[inline(always)]
    pub fn mark(m: super::Mark) {
        let t = CLOCK.with(|c| c.raw());
        NOW.with(|n| n[m as usize].set(t));
    }

    #[inline(always)]
    pub fn mark_first(m: super::Mark) {
        NOW.with(|n| {
            if n[m as usize].get() == 0 {
                n[m as usize].set(CLOCK.with(|c| c.raw()));
            }
        });
    }

    pub fn round_start() {
        NOW.with(|n| n.iter().for_each(|c| c.set(0)));
    }

    pub fn round_end() {
        let t: [u64; MARKS] = NOW.with(|n| std::array::from_fn(|i| n[i].get()));
        let (frame, published) = (t[1], t[MARKS - 1]);
        if frame == 0 || published == 0 {
            return;
        }
        LOG.with(|l| {
            let mut l = l.borrow_mut();
            if l.thread.is_none() {
                let me = std::thread::current();
                l.thread = Some(me.name().unwrap_or("unnamed").to_string());
            }
            if t.contains(&0) || t.windows(2).any(|w| w[1] < w[0]) {
                l.other += 1;
                return;
            }
            if l.hops.len() >= KEPT {
                l.dropped += 1;
                return;
            }
            let d: [u32; MARKS - 1] =
                std::array::from_fn(|i| u32::try_from(t[i + 1] - t[i]).unwrap_or(u32::MAX));
            l.hops.push(d);
        });
    }

    pub fn take() -> Vec<super::LoopStages> {
        DONE.lock()
            .map(|mut d| std::mem::take(&mut *d))
            .unwrap_or_default()
    }
}

/// A boundary the loop marks (see the module docs).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[repr(usize)]
pub enum Mark {
    /// The round began (before its receive burst).
    RoundStart = 0,
    /// Its first frame went to the stack.
    FrameIn = 1,
    /// Its last frame was handled.
    FramesHandled = 2,
    /// The stack's first poll of the round ended.
    FirstPoll = 3,
    /// Posts made during that poll reached the stack.
    PostsTaken = 4,
    /// A TCP connection's transmit pass began (the last one counts).
    TxPass = 5,
    /// That pass ended.
    TxPassEnd = 6,
    /// The device published what was sent (the last publish counts).
    Published = 7,
}

/// The stages' names, one per [`Mark`] (the first has no stage before it).
pub const STAGES: [&str; 8] = [
    "",
    "round start to frame",
    "receive",
    "first poll",
    "posts taken",
    "to transmit",
    "transmit",
    "publish",
];

/// One loop thread's hops: per stage its median and 90th percentile in
/// nanoseconds.
#[derive(Debug, Clone)]
pub struct LoopStages {
    /// The thread's name.
    pub thread: String,
    /// Hops timed.
    pub hops: u64,
    /// Rounds that received and published in another order (not timed).
    pub other: u64,
    /// (stage, p50 ns, p90 ns), in order, then the whole hop.
    pub stages: Vec<(&'static str, u64, u64)>,
}

/// Whether this build keeps stages (the cargo feature `stages`).
pub const ENABLED: bool = cfg!(feature = "stages");

/// Mark `m` now.
#[inline(always)]
pub fn mark(m: Mark) {
    #[cfg(feature = "stages")]
    imp::mark(m);
    #[cfg(not(feature = "stages"))]
    let _ = m;
}

/// Mark `m` now unless this round marked it already.
#[inline(always)]
pub fn mark_first(m: Mark) {
    #[cfg(feature = "stages")]
    imp::mark_first(m);
    #[cfg(not(feature = "stages"))]
    let _ = m;
}

/// A round begins: the marks of the last are cleared.
#[inline(always)]
pub fn round_start() {
    #[cfg(feature = "stages")]
    {
        imp::round_start();
        imp::mark(Mark::RoundStart);
    }
}

/// A round ended: a hop is kept if it was one.
#[inline(always)]
pub fn round_end() {
    #[cfg(feature = "stages")]
    imp::round_end();
}

/// The records of the loop threads that ended since the last call.
pub fn take() -> Vec<LoopStages> {
    #[cfg(feature = "stages")]
    return imp::take();
    #[cfg(not(feature = "stages"))]
    Vec::new()
}

#[cfg(all(test, feature = "stages"))]
mod tests {
    use super::*;

    /// A round that marks every boundary in order is a hop; one that
    /// published without a post (no `PostsTaken`) is counted apart; a
    /// round with no frame is neither.
    #[test]
    fn hops_are_timed_and_other_rounds_counted() {
        std::thread::Builder::new()
            .name("stages-test".into())
            .spawn(|| {
                for _ in 0..3 {
                    round_start();
                    mark_first(Mark::FrameIn);
                    mark_first(Mark::FrameIn);
                    for m in [
                        Mark::FramesHandled,
                        Mark::FirstPoll,
                        Mark::PostsTaken,
                        Mark::TxPass,
                        Mark::TxPassEnd,
                        Mark::Published,
                    ] {
                        mark(m);
                    }
                    round_end();
                }
                round_start();
                mark_first(Mark::FrameIn);
                mark(Mark::Published);
                round_end();
                round_start();
                round_end();
            })
            .unwrap()
            .join()
            .unwrap();
        let got: Vec<_> = take()
            .into_iter()
            .filter(|s| s.thread == "stages-test")
            .collect();
        assert_eq!(got.len(), 1);
        assert_eq!((got[0].hops, got[0].other), (3, 1));
        let names: Vec<_> = got[0].stages.iter().map(|s| s.0).collect();
        assert_eq!(names, [&STAGES[1..], &["hop"]].concat());
        let hop = got[0].stages.last().unwrap();
        assert!(hop.1 <= hop.2, "p50 {} above p90 {}", hop.1, hop.2);
    }
}
