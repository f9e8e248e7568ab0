//! Which connections a round visits: a ready set and a deadline set,
//! shared by the stack's TCP connections ([`crate::stack`]) and its SCTP
//! connections and associations ([`crate::over_sctp`]).
//!
//! A connection is visited in a round only when something happened to
//! it: it was [marked](ReadySet::mark) (a packet, a command, work its
//! last visit left), its deadline [came due](ReadySet::pop_due), or the
//! [idle sweep](ReadySet::sweep_due) came round. So an idle connection
//! costs a round nothing.
//!
//! Each connection keeps a [`Slot`] (whether it is marked, and its entry
//! in the deadline set); the set holds the ids. The deadline set has one
//! entry per connection: an earlier deadline replaces the entry, a later
//! one leaves it (the connection is only visited early, and records its
//! next deadline then), so no entry goes stale and none has to be
//! skipped. The sweep bounds how late a deadline missing from the set
//! could be noticed.

use std::collections::BTreeSet;

/// A connection's part of a [`ReadySet`]: kept beside the connection.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct Slot {
    /// In the ready list: visited next round.
    ready: bool,
    /// Its entry in the deadline set.
    timer_at: Option<u64>,
}

impl Slot {
    /// Whether it is marked for the next round.
    #[inline]
    pub fn is_ready(&self) -> bool {
        self.ready
    }

    /// Its entry in the deadline set, if it has one.
    pub fn deadline(&self) -> Option<u64> {
        self.timer_at
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
    /// Deadlines, earliest first: one entry per id ([`Slot::deadline`]).
    /// A set rather than a heap: an earlier deadline replaces the entry.
    timers: BTreeSet<(u64, Id)>,
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
            timers: BTreeSet::new(),
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

    /// The ids marked now (in the order marked), without taking them.
    pub fn marked(&self) -> &[Id] {
        &self.ready
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

    /// Record that `id` has something due at `at`: its entry moves to
    /// `at` if that is earlier than the one it has (or it had none).
    #[inline]
    pub fn defer(&mut self, slot: &mut Slot, id: Id, at: u64) {
        if slot.timer_at.is_none_or(|a| at < a) {
            // The later entry it replaces goes: no stale entries to pop.
            if let Some(a) = slot.timer_at.replace(at) {
                self.timers.remove(&(a, id));
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
    /// is marked, and has no entry any more.
    #[inline]
    pub fn fire(&mut self, slot: &mut Slot, id: Id, at: u64) {
        if slot.timer_at == Some(at) {
            slot.timer_at = None;
            self.mark(slot, id);
        }
    }

    /// `id` goes away: its entry leaves the deadline set (a stale id in
    /// the ready list is skipped by whoever visits it).
    pub fn forget(&mut self, slot: &mut Slot, id: Id) {
        if let Some(a) = slot.timer_at.take() {
            self.timers.remove(&(a, id));
        }
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
    fn one_deadline_entry_per_id_the_earliest() {
        let mut set = ReadySet::new(100);
        let mut a = Slot::default();
        let mut b = Slot::default();
        set.defer(&mut a, 1u64, 50);
        set.defer(&mut a, 1, 70); // later: the entry stays at 50
        set.defer(&mut a, 1, 30); // earlier: replaces it
        set.defer(&mut b, 2, 40);
        assert_eq!(set.deadlines(), 2);
        assert!(!set.due(29) && set.due(30));
        assert_eq!(set.next_deadline(), Some(30));
        assert_eq!(set.pop_due(29), None);
        let (at, id) = set.pop_due(45).unwrap();
        assert_eq!((at, id), (30, 1));
        set.fire(&mut a, id, at);
        assert!(a.is_ready() && a.deadline().is_none());
        let (at, id) = set.pop_due(45).unwrap();
        assert_eq!((at, id), (40, 2));
        set.fire(&mut b, id, at);
        assert_eq!(set.pop_due(u64::MAX), None);
        assert_eq!(set.marked(), &[1, 2]);
    }

    #[test]
    fn forget_and_sweep() {
        let mut set = ReadySet::new(100);
        let mut a = Slot::default();
        set.defer(&mut a, 7u64, 10);
        set.forget(&mut a, 7);
        assert_eq!(set.next_deadline(), None);
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
