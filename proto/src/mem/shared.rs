//! What the replicas of one memory table share: a state word per slot,
//! the record of remote invalidations not yet folded into the replicas,
//! and the order of control operations.
//!
//! A context with several poll loops gives each loop its own
//! [`MemoryTable`](super::MemoryTable) (its replica), so a loop checks and
//! places with no lock and no write to memory another core reads. The
//! replicas stay alike because the application applies every control
//! operation (register, invalidate, bind, ...) to each of them in the same
//! order, one operation at a time; what a peer changes on the data path is
//! the exception:
//!
//! * **A remote invalidation** (Send with Invalidate, RFC 5040 §5.3) arrives
//!   on one loop, and must stop every QP of the PD from using the STag
//!   before its Send completes (RFC 5040 §7.2 item 5, "the STag MUST be
//!   invalidated ... before the Send is delivered"). Each slot has a shared
//!   word: its generation, shifted left one bit, and a *killed* bit. Every
//!   replica's access check compares the word with its own generation, so
//!   a kill on one loop (a compare-and-swap that sets the bit) refuses the
//!   next check on every loop, with nothing else shared.
//! * **Folding a kill in.** A kill changes what a later control operation
//!   decides (a killed window no longer counts against deregistering its
//!   region; a killed region cannot take a window). Each replica would see
//!   a kill at a different moment, so one replica decides: the first to
//!   run the control operation (the *leader* of that operation) takes the
//!   kills recorded since the last one and keeps the list of those still
//!   in force; the others, running the same operation after it, fold in
//!   exactly that list. Then every replica decides the operation on the
//!   same state.
//! * **Generations.** Every control operation that changes what a slot
//!   grants moves its generation on in every replica alike; each raises the
//!   word to the new generation with `fetch_max`, which never lowers it nor
//!   clears a kill of the new generation, so it does not matter which
//!   replica gets there first. Until a replica has applied the operation,
//!   its older generation no longer matches the word and the slot refuses
//!   access there: an operation in flight never grants early, and an
//!   invalidation takes effect on every loop at once.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};

use crossbeam_queue::SegQueue;

/// Slots per chunk of state words (8 KiB).
const CHUNK: usize = 1024;

type Chunk = [AtomicU64; CHUNK];

fn new_chunk() -> Arc<Chunk> {
    Arc::new(std::array::from_fn(|_| AtomicU64::new(0)))
}

/// The word of a slot at generation `gen` that nobody killed.
#[inline]
fn live_word(gen: u64) -> u64 {
    gen << 1
}

/// What one group of replicas shares.
#[derive(Debug)]
struct Shared {
    /// The state words, in chunks added as the table grows (a replica
    /// keeps its own list of the chunks, so reading a word takes no lock).
    chunks: Mutex<Vec<Arc<Chunk>>>,
    /// Slots killed on the data path since a leader last looked: at most
    /// one entry per generation of a slot (only the compare-and-swap that
    /// sets the bit records one), so bounded by the slots times the
    /// control operations that renew them.
    kills: SegQueue<u32>,
    order: Mutex<Order>,
    /// How many replicas there are.
    replicas: usize,
}

/// The order of control operations.
#[derive(Debug, Default)]
struct Order {
    /// Operations begun by a leader so far.
    started: u64,
    /// The kills the leader of operation `started` folded in.
    folded: Vec<u32>,
    /// Replicas that have begun operation `started`.
    ran: usize,
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    match m.lock() {
        Ok(g) => g,
        Err(p) => p.into_inner(),
    }
}

/// One replica's handle on the shared words.
pub(super) struct Words {
    shared: Arc<Shared>,
    chunks: Vec<Arc<Chunk>>,
    /// Control operations this replica has begun.
    done: u64,
}

impl core::fmt::Debug for Words {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.debug_struct("Words")
            .field("chunks", &self.chunks.len())
            .field("replicas", &Arc::strong_count(&self.shared))
            .field("done", &self.done)
            .finish()
    }
}

impl Words {
    /// `n` handles (at least one) on one new set of words.
    pub(super) fn group(n: usize) -> Vec<Words> {
        let n = n.max(1);
        let mut one = Words::single();
        if let Some(s) = Arc::get_mut(&mut one.shared) {
            s.replicas = n;
        }
        let shared = one.shared.clone();
        std::iter::once(one)
            .chain((1..n).map(|_| Words {
                shared: shared.clone(),
                chunks: Vec::new(),
                done: 0,
            }))
            .collect()
    }

    /// The one handle on a new set of words (a table with no replicas).
    pub(super) fn single() -> Words {
        Words {
            shared: Arc::new(Shared {
                chunks: Mutex::new(Vec::new()),
                kills: SegQueue::new(),
                order: Mutex::new(Order::default()),
                replicas: 1,
            }),
            chunks: Vec::new(),
            done: 0,
        }
    }

    #[inline]
    fn word(&self, index: u32) -> Option<&AtomicU64> {
        let i = index as usize;
        self.chunks.get(i / CHUNK).map(|c| &c[i % CHUNK])
    }

    /// Chunks of words this replica holds.
    #[cfg(test)]
    pub(super) fn chunks(&self) -> usize {
        self.chunks.len()
    }

    /// Make sure slot `index` has a word (the table grew to it).
    pub(super) fn ensure(&mut self, index: u32) {
        let need = index as usize / CHUNK + 1;
        if self.chunks.len() >= need {
            return;
        }
        let mut all = lock(&self.shared.chunks);
        while self.chunks.len() < need {
            let k = self.chunks.len();
            if all.len() <= k {
                all.push(new_chunk());
            }
            self.chunks.push(all[k].clone());
        }
    }

    /// Whether slot `index` at generation `gen` is in force: no replica
    /// has moved it on, and no peer killed it.
    #[inline]
    pub(super) fn alive(&self, index: u32, gen: u64) -> bool {
        self.word(index)
            .is_some_and(|w| w.load(Ordering::Acquire) == live_word(gen))
    }

    /// Whether slot `index` at generation `gen` was killed.
    pub(super) fn killed(&self, index: u32, gen: u64) -> bool {
        self.word(index)
            .is_some_and(|w| w.load(Ordering::Acquire) == live_word(gen) | 1)
    }

    /// This replica moved slot `index` on to generation `gen`.
    pub(super) fn publish(&self, index: u32, gen: u64) {
        if let Some(w) = self.word(index) {
            w.fetch_max(live_word(gen), Ordering::AcqRel);
        }
    }

    /// A remote invalidation of slot `index` at generation `gen`: `false`
    /// if it is no longer in force there (killed already, or moved on by
    /// a control operation in flight).
    pub(super) fn kill(&self, index: u32, gen: u64) -> bool {
        let Some(w) = self.word(index) else {
            return false;
        };
        let live = live_word(gen);
        if w.compare_exchange(live, live | 1, Ordering::AcqRel, Ordering::Acquire)
            .is_err()
        {
            return false;
        }
        self.shared.kills.push(index);
        true
    }

    /// Begin a control operation: the slots whose kills this replica
    /// folds in before deciding it. The first replica to begin the
    /// operation (its leader) takes the kills recorded since the last
    /// operation and keeps those still in force at the generation
    /// `gen_of` gives (the replica's own); the others get the leader's
    /// list. `Err(())` if this replica is out of step: it skipped an
    /// operation the others ran, or begins one before every replica has
    /// begun the one before it (the application runs each operation on
    /// every replica, one operation at a time).
    pub(super) fn begin(&mut self, gen_of: impl Fn(u32) -> Option<u64>) -> Result<Vec<u32>, ()> {
        let mut order = lock(&self.shared.order);
        if self.done == order.started && (order.started == 0 || order.ran == self.shared.replicas) {
            let mut folded = Vec::new();
            while let Some(i) = self.shared.kills.pop() {
                if gen_of(i).is_some_and(|g| self.killed(i, g)) {
                    folded.push(i);
                }
            }
            // (Two kills of one slot, the older one's generation since
            // renewed and killed again, fold in once.)
            folded.sort_unstable();
            folded.dedup();
            order.started += 1;
            order.folded.clone_from(&folded);
            order.ran = 1;
            self.done += 1;
            Ok(folded)
        } else if self.done + 1 == order.started {
            order.ran += 1;
            self.done += 1;
            Ok(order.folded.clone())
        } else {
            Err(())
        }
    }
}
