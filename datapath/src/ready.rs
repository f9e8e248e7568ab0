//! Which connections and associations a round visits: the stack's one
//! ready set and deadline set, holding its TCP connections
//! ([`crate::stack`]), its iWARP-over-SCTP connections
//! ([`crate::over_sctp::conn`]) and their SCTP associations
//! ([`crate::over_sctp`]), each by a [`Ready`] key.
//!
//! A connection is visited in a round only when something happened to
//! it: it was [marked](ReadySet::mark) (a packet, a command, work its
//! last visit left), its deadline [came due](ReadySet::pop_due), or the
//! [idle sweep](ReadySet::sweep_due) came round. So an idle connection
//! costs a round nothing. An association likewise.
//!
//! One ready list serves all three: a round takes each owner's marks at
//! its turn ([`take`](ReadySet::take), a [`Ready`] range: the TCP
//! connections, then the associations, then the SCTP connections, then
//! the associations again for the packets their connections gave them),
//! so a mark made earlier in the round (an association's visit marks its
//! connection, a connection's segments mark its association) is taken
//! later in the same round, and one made after its owner's last turn
//! waits for the next round. Within one owner's turn the ids come in id
//! order. One deadline set, one sweep clock and one idle check serve all
//! three too. (An [`SctpHost`](crate::over_sctp::SctpHost) that runs
//! alone, as an engine of its own, keeps a set of its own for its
//! associations.)
//!
//! Each connection keeps a [`Slot`] (whether it is marked, and its
//! entries in the deadline set); the set holds the ids. The deadline set
//! has at most two entries per connection: its earliest, and one later
//! entry that an earlier deadline did not take out. A later deadline
//! leaves the entries as they are (the connection is only visited early,
//! and records its next deadline then); an earlier one gets an entry of
//! its own, and the entry it goes before stays as the later one (the one
//! that was later still goes). A received segment's ACK deadline, one
//! round away, comes before the retransmission deadline and is due next
//! round: so it costs one insertion and one removal, and the
//! retransmission entry stays where it is, where replacing it cost two
//! of each. When the earliest fires, the later entry becomes the
//! connection's entry (a possibly early visit, as above); a popped entry
//! that is neither (one [`forget`](ReadySet::forget) could not know
//! about) is skipped. The sweep bounds how late a deadline missing from
//! the set could be noticed.

use std::ops::RangeInclusive;

mod deadlines;
use deadlines::Deadlines;

use crate::over_sctp::AssocId;
use crate::stack::SockId;

/// A key of the stack's ready set: one of its TCP connections
/// ([`tcp`](Self::tcp)), one of its SCTP associations
/// ([`assoc`](Self::assoc)), or one of its iWARP-over-SCTP connections
/// ([`sctp`](Self::sctp)). Ordered in that order (then by id), which is
/// the order a round takes them in ([`ReadySet::take`] with
/// [`TCP`](Self::TCP), [`ASSOC`](Self::ASSOC), [`SCTP`](Self::SCTP)).
///
/// One word: the kind in its top two bits, the id in the other 62, so that a deadline
/// set's entry is two words as it was with connection ids alone (an
/// enum of two words made each B-tree insertion and removal dearer).
/// Ids count up from 0 (1 for associations) by one connection at a
/// time, so none reaches 2^62 (at a billion a second, in 146 years);
/// one that did would share the key of its id less 2^62.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Ready(u64);

/// The id's bits of a [`Ready`].
const ID_BITS: u64 = (1 << 62) - 1;
/// The kinds of [`Ready`], in its top two bits.
const KIND_ASSOC: u64 = 1 << 62;
const KIND_SCTP: u64 = 2 << 62;

impl Ready {
    /// Every TCP connection's key.
    pub const TCP: RangeInclusive<Ready> = Ready(0)..=Ready(ID_BITS);
    /// Every association's key.
    pub const ASSOC: RangeInclusive<Ready> = Ready(KIND_ASSOC)..=Ready(KIND_ASSOC | ID_BITS);
    /// Every iWARP-over-SCTP connection's key.
    pub const SCTP: RangeInclusive<Ready> = Ready(KIND_SCTP)..=Ready(KIND_SCTP | ID_BITS);
    /// The SCTP part's keys: its associations' and its connections'.
    pub const SCTP_PART: RangeInclusive<Ready> = Ready(KIND_ASSOC)..=Ready(KIND_SCTP | ID_BITS);

    /// TCP connection `id` (byte stream or MPA), by its `Stack` id.
    #[inline]
    pub const fn tcp(id: SockId) -> Ready {
        Ready(id as u64 & ID_BITS)
    }

    /// SCTP association `id`, by its `SctpHost` id.
    #[inline]
    pub const fn assoc(id: AssocId) -> Ready {
        Ready(KIND_ASSOC | (id & ID_BITS))
    }

    /// iWARP connection over SCTP `id`.
    #[inline]
    pub const fn sctp(id: SockId) -> Ready {
        Ready(KIND_SCTP | (id as u64 & ID_BITS))
    }

    /// The id of a TCP connection's key; of another kind's key an id of
    /// 2^62 or more, which no TCP connection has, so that a look-up by it
    /// finds nothing. For a list taken with [`TCP`](Self::TCP): no test.
    #[inline]
    pub fn tcp_id(self) -> SockId {
        SockId::try_from(self.0).unwrap_or(SockId::MAX)
    }

    /// The TCP connection's id, if it is one.
    #[inline]
    pub const fn as_tcp(self) -> Option<SockId> {
        if self.0 <= ID_BITS {
            Some(self.0 as SockId)
        } else {
            None
        }
    }

    /// The association's id, if it is one.
    #[inline]
    pub const fn as_assoc(self) -> Option<AssocId> {
        if self.0 & !ID_BITS == KIND_ASSOC {
            Some(self.0 & ID_BITS)
        } else {
            None
        }
    }

    /// The SCTP connection's id, if it is one.
    #[inline]
    pub const fn as_sctp(self) -> Option<SockId> {
        if self.0 & !ID_BITS == KIND_SCTP {
            Some((self.0 & ID_BITS) as SockId)
        } else {
            None
        }
    }
}

/// No entry: a [`Slot`]'s deadline fields hold this when they have none
/// (a deadline at `u64::MAX`, the end of the clock, is never recorded),
/// which keeps a slot as small as with one `Option<u64>`.
const NONE: u64 = u64::MAX;

/// A connection's part of a [`ReadySet`]: kept beside the connection.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Slot {
    /// In the ready list: visited next round.
    ready: bool,
    /// Its entry in the deadline set (its earliest), or [`NONE`].
    timer_at: u64,
    /// A later entry of its own in the deadline set, one an earlier
    /// deadline went before (see the module's documentation), or
    /// [`NONE`].
    later_at: u64,
}

impl Default for Slot {
    fn default() -> Self {
        Slot {
            ready: false,
            timer_at: NONE,
            later_at: NONE,
        }
    }
}

impl Slot {
    /// Whether it is marked for the next round.
    #[inline]
    pub fn is_ready(&self) -> bool {
        self.ready
    }

    /// Its (earliest) entry in the deadline set, if it has one.
    pub fn deadline(&self) -> Option<u64> {
        (self.timer_at != NONE).then_some(self.timer_at)
    }

    /// Its visit begins: it is no longer in the ready list (the list was
    /// [drained](ReadySet::drain_into)), and may be marked again.
    #[inline]
    pub fn visited(&mut self) {
        self.ready = false;
    }
}

/// The ready list, the deadline set and the time of the last idle sweep.
#[derive(Debug)]
pub struct ReadySet<Id> {
    /// Ids to visit next round, each once (its [`Slot`]'s flag).
    ready: Vec<Id>,
    /// Deadlines, earliest first: at most two entries per id
    /// ([`Slot::deadline`] and a later one). A set rather than a heap:
    /// an id's entries are found and taken out by value (a sorted vector
    /// while few, a B-tree beyond: `deadlines.rs`).
    timers: Deadlines<Id>,
    /// How often the idle sweep runs (ns).
    sweep_every: u64,
    /// When it runs next: `sweep_every` after it last ran (at 0 first).
    next_sweep: u64,
}

impl<Id: Ord + Copy> ReadySet<Id> {
    /// An empty set whose idle sweep runs every `sweep_every` ns.
    pub fn new(sweep_every: u64) -> Self {
        ReadySet {
            ready: Vec::new(),
            timers: Deadlines::default(),
            sweep_every,
            next_sweep: sweep_every,
        }
    }

    /// The idle sweep runs every `every` ns from when it last ran.
    pub fn set_sweep(&mut self, every: u64) {
        let last = self.next_sweep.saturating_sub(self.sweep_every);
        self.sweep_every = every;
        self.next_sweep = last.saturating_add(every);
    }

    /// Put `id` (its slot `slot`) in the ready list unless it is there.
    #[inline]
    pub fn mark(&mut self, slot: &mut Slot, id: Id) {
        if !slot.ready {
            slot.ready = true;
            self.ready.push(id);
        }
    }

    /// Nothing marked.
    #[inline]
    pub fn is_empty(&self) -> bool {
        self.ready.is_empty()
    }

    /// The ids marked now (in the order marked, or sorted by a
    /// [`take`](Self::take)), without taking them.
    pub fn marked(&self) -> &[Id] {
        &self.ready
    }

    /// Whether an id in `range` is marked.
    #[inline]
    pub fn holds(&self, range: &RangeInclusive<Id>) -> bool {
        self.ready.iter().any(|id| range.contains(id))
    }

    /// The ids marked now within `range`, sorted by id, move onto the end
    /// of `ids`; the others stay marked. Each visit begins with
    /// [`Slot::visited`], as after [`drain_into`](Self::drain_into).
    #[inline]
    pub fn take(&mut self, range: &RangeInclusive<Id>, ids: &mut Vec<Id>) {
        match self.ready.as_slice() {
            [] => {}
            // One connection marked, as in a loop serving one peer: no
            // sort and no search inlined here (docs/datapath.md, "Cold
            // paths out of line").
            [id] => {
                if range.contains(id) {
                    ids.append(&mut self.ready);
                }
            }
            _ => self.take_sorted(range, ids),
        }
    }

    /// [`take`](Self::take) with more than one id marked.
    #[inline(never)]
    fn take_sorted(&mut self, range: &RangeInclusive<Id>, ids: &mut Vec<Id>) {
        let n = self.ready.len();
        self.ready.sort_unstable();
        // Searched for only where the range cuts the list: most rounds
        // take all of it (one transport, or nothing but its turn's
        // marks), and the lowest range's start cuts nothing.
        let lo = if self.ready[0] >= *range.start() {
            0
        } else {
            self.ready.partition_point(|id| id < range.start())
        };
        let hi = if self.ready[n - 1] <= *range.end() {
            n
        } else {
            self.ready.partition_point(|id| id <= range.end())
        };
        if lo == 0 && hi == n {
            ids.append(&mut self.ready);
        } else if lo < hi {
            ids.extend(self.ready.drain(lo..hi));
        }
    }

    /// This round's ids: the ready list moves into `ids` (empty, as a
    /// rule), which is then sorted by id. Each visit begins with
    /// [`Slot::visited`]; the list fills again for the next round as
    /// connections are marked.
    #[inline]
    pub fn drain_into(&mut self, ids: &mut Vec<Id>) {
        ids.append(&mut self.ready);
        if ids.len() > 1 {
            ids.sort_unstable();
        }
    }

    /// Record that `id` has something due at `at`: it gets an entry at
    /// `at` if that is earlier than the earliest it has (or it had none);
    /// the entry it goes before stays, as the later one (a later one it
    /// had already goes).
    #[inline]
    pub fn defer(&mut self, slot: &mut Slot, id: Id, at: u64) {
        if at < slot.timer_at {
            let a = std::mem::replace(&mut slot.timer_at, at);
            if a != NONE {
                let l = std::mem::replace(&mut slot.later_at, a);
                if l != NONE {
                    self.timers.remove(&(l, id));
                }
            }
            self.timers.insert((at, id));
        }
    }

    /// The earliest entry, if it is due at `now`, taken out of the set;
    /// hand it to [`fire`](Self::fire) with the id's slot (if the id
    /// still exists).
    #[inline]
    pub fn pop_due(&mut self, now: u64) -> Option<(u64, Id)> {
        let &(at, _) = self.timers.first()?;
        if at > now {
            return None;
        }
        self.timers.pop_first()
    }

    /// The entry `(at, id)` that [`pop_due`](Self::pop_due) gave: the id
    /// is marked, and its later entry (if any) becomes its entry. (The
    /// earliest pops first, so the later entry never pops while the
    /// earliest is in the set.)
    #[inline]
    pub fn fire(&mut self, slot: &mut Slot, id: Id, at: u64) {
        if slot.timer_at == at {
            slot.timer_at = std::mem::replace(&mut slot.later_at, NONE);
            self.mark(slot, id);
        }
    }

    /// `id` goes away: its entries leave the deadline set (a stale id in
    /// the ready list is skipped by whoever visits it).
    pub fn forget(&mut self, slot: &mut Slot, id: Id) {
        for at in [slot.timer_at, slot.later_at] {
            if at != NONE {
                self.timers.remove(&(at, id));
            }
        }
        slot.timer_at = NONE;
        slot.later_at = NONE;
    }

    /// Whether a deadline or the idle sweep is due at `now`.
    #[inline]
    pub fn due(&self, now: u64) -> bool {
        now >= self.next_sweep || self.timers.first().is_some_and(|&(at, _)| at <= now)
    }

    /// The earliest entry of the deadline set.
    #[inline]
    pub fn next_deadline(&self) -> Option<u64> {
        self.timers.first().map(|&(at, _)| at)
    }

    /// Entries in the deadline set.
    pub fn deadlines(&self) -> usize {
        self.timers.len()
    }

    /// Whether the idle sweep is due at `now`; if so it counts as done
    /// now, and the caller marks every id.
    #[inline]
    pub fn sweep_due(&mut self, now: u64) -> bool {
        if now >= self.next_sweep {
            self.next_sweep = now.saturating_add(self.sweep_every);
            return true;
        }
        false
    }

    /// When the idle sweep is due next.
    #[inline]
    pub fn next_sweep(&self) -> u64 {
        self.next_sweep
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn marked_once_and_drained_in_id_order() {
        let mut set = ReadySet::new(100);
        let mut s = [Slot::default(); 3];
        set.mark(&mut s[2], 2u64);
        set.mark(&mut s[0], 0);
        set.mark(&mut s[2], 2);
        assert_eq!(set.marked(), &[2, 0]);
        let mut ids = Vec::new();
        set.drain_into(&mut ids);
        assert_eq!(ids, [0, 2]);
        assert!(set.is_empty());
        // Still flagged until visited: a mark before the visit is a no-op.
        set.mark(&mut s[2], 2);
        assert!(set.is_empty());
        s[2].visited();
        set.mark(&mut s[2], 2);
        assert_eq!(set.marked(), &[2]);
    }

    #[test]
    fn earliest_entry_per_id_and_one_later_kept() {
        let mut set = ReadySet::new(100);
        let mut a = Slot::default();
        let mut b = Slot::default();
        set.defer(&mut a, 1u64, 50);
        set.defer(&mut a, 1, 70); // later: nothing changes
        assert_eq!(set.deadlines(), 1);
        set.defer(&mut a, 1, 30); // earlier: its own entry, 50 stays as the later one
        assert_eq!(a.deadline(), Some(30));
        assert_eq!(set.deadlines(), 2);
        set.defer(&mut a, 1, 20); // earlier again: 30 becomes the later one, 50 goes
        assert_eq!(a.deadline(), Some(20));
        assert_eq!(set.deadlines(), 2);
        set.defer(&mut b, 2, 40);
        assert_eq!(set.deadlines(), 3);
        assert!(!set.due(19) && set.due(20));
        assert_eq!(set.next_deadline(), Some(20));
        assert_eq!(set.pop_due(19), None);
        let (at, id) = set.pop_due(45).unwrap();
        assert_eq!((at, id), (20, 1));
        set.fire(&mut a, id, at);
        // Marked, and the later entry is its entry now.
        assert!(a.is_ready() && a.deadline() == Some(30));
        let (at, id) = set.pop_due(45).unwrap();
        assert_eq!((at, id), (30, 1));
        set.fire(&mut a, id, at);
        assert!(a.deadline().is_none());
        let (at, id) = set.pop_due(45).unwrap();
        assert_eq!((at, id), (40, 2));
        set.fire(&mut b, id, at);
        assert_eq!(set.pop_due(u64::MAX), None);
        assert_eq!(set.deadlines(), 0);
        assert_eq!(set.marked(), &[1, 2]);
    }

    #[test]
    fn an_entry_that_is_neither_is_skipped_and_the_end_of_the_clock_not_kept() {
        let mut set = ReadySet::new(100);
        let mut a = Slot::default();
        set.defer(&mut a, 1u64, u64::MAX);
        assert_eq!((a.deadline(), set.deadlines()), (None, 0));
        set.defer(&mut a, 1, 10);
        let (at, id) = set.pop_due(10).unwrap();
        // A slot whose entry is not this one (it went away and came back,
        // say): no mark, its own entry untouched.
        let mut other = Slot::default();
        set.defer(&mut other, 1, 40);
        set.fire(&mut other, id, at);
        assert!(!other.is_ready() && other.deadline() == Some(40));
        assert!(set.is_empty());
    }

    #[test]
    fn keys_order_by_kind_then_id_and_give_their_ids_back() {
        // SCTP connections take ids from the stack's one counter, as
        // TCP's do: the kind, not the id, tells them apart.
        let base = 5;
        let keys = [
            Ready::tcp(0),
            Ready::tcp(7),
            Ready::tcp((1 << 62) - 1),
            Ready::assoc(1),
            Ready::assoc(9),
            Ready::sctp(base),
            Ready::sctp(base + 3),
        ];
        assert!(keys.windows(2).all(|w| w[0] < w[1]), "{keys:?}");
        assert_eq!(Ready::tcp(7).as_tcp(), Some(7));
        assert_eq!(Ready::tcp(7).tcp_id(), 7);
        assert_eq!(Ready::assoc(9).as_assoc(), Some(9));
        assert_eq!(Ready::sctp(base + 3).as_sctp(), Some(base + 3));
        for k in [Ready::assoc(9), Ready::sctp(base)] {
            assert_eq!(k.as_tcp(), None);
            assert!(k.tcp_id() >= 1 << 62, "no TCP connection's id");
        }
        assert_eq!(
            (Ready::tcp(7).as_assoc(), Ready::tcp(7).as_sctp()),
            (None, None)
        );
        assert_eq!(Ready::sctp(base).as_assoc(), None);
        let kinds = [&Ready::TCP, &Ready::ASSOC, &Ready::SCTP];
        for (i, k) in keys.iter().enumerate() {
            let n = kinds.iter().filter(|r| r.contains(k)).count();
            assert_eq!(n, 1, "{k:?} in one range");
            assert_eq!(Ready::SCTP_PART.contains(k), i >= 3, "{k:?}");
        }
    }

    #[test]
    fn each_turn_takes_its_range_in_id_order_and_leaves_the_rest() {
        let mut set = ReadySet::new(100);
        let mut s = [Slot::default(); 6];
        // SCTP connections take ids from the stack's one counter, as
        // TCP's do: the kind, not the id, tells them apart.
        let base = 5;
        let keys = [
            Ready::sctp(base + 1),
            Ready::tcp(4),
            Ready::assoc(2),
            Ready::tcp(1),
            Ready::sctp(base),
            Ready::assoc(1),
        ];
        for (slot, &k) in s.iter_mut().zip(&keys) {
            set.mark(slot, k);
        }
        let mut ids = Vec::new();
        set.take(&Ready::TCP, &mut ids);
        assert_eq!(ids, [Ready::tcp(1), Ready::tcp(4)]);
        assert!(set.holds(&Ready::ASSOC) && set.holds(&Ready::SCTP));
        assert!(!set.holds(&Ready::TCP));
        // Marked after its owner's turn: the next round's.
        set.mark(&mut s[3], Ready::tcp(1));
        assert!(!set.holds(&Ready::TCP), "still flagged: no second entry");
        s[3].visited();
        set.mark(&mut s[3], Ready::tcp(1));
        ids.clear();
        set.take(&Ready::ASSOC, &mut ids);
        assert_eq!(ids, [Ready::assoc(1), Ready::assoc(2)]);
        ids.clear();
        set.take(&Ready::SCTP, &mut ids);
        assert_eq!(ids, [Ready::sctp(base), Ready::sctp(base + 1)]);
        assert_eq!(set.marked(), &[Ready::tcp(1)]);
        ids.clear();
        set.take(&Ready::SCTP_PART, &mut ids);
        assert!(ids.is_empty());
        set.take(&Ready::TCP, &mut ids);
        assert_eq!(ids, [Ready::tcp(1)]);
        assert!(set.is_empty());
    }

    #[test]
    fn forget_and_sweep() {
        let mut set = ReadySet::new(100);
        let mut a = Slot::default();
        set.defer(&mut a, 7u64, 10);
        set.forget(&mut a, 7);
        assert_eq!(set.next_deadline(), None);
        // Both entries go.
        set.defer(&mut a, 7, 20);
        set.defer(&mut a, 7, 10);
        assert_eq!(set.deadlines(), 2);
        set.forget(&mut a, 7);
        assert_eq!((set.deadlines(), a.deadline()), (0, None));
        assert!(!set.due(99) && set.due(100));
        assert!(!set.sweep_due(99));
        assert!(set.sweep_due(100));
        assert!(!set.sweep_due(150));
        assert_eq!(set.next_sweep(), 200);
        set.set_sweep(30);
        assert_eq!(set.next_sweep(), 130);
        assert!(set.sweep_due(130));
        assert_eq!(set.next_sweep(), 160);
    }
}
