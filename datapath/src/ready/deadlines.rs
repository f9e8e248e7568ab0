//! The deadline set's storage: `(at, id)` entries, earliest first, found
//! and taken out by value.
//!
//! A B-tree costs a node search, a rebalance check and generic code on
//! every insertion and removal however few entries it holds; a loop
//! serving a few connections (a latency benchmark, a trading session)
//! holds two to four, and each round trip inserts and removes about two
//! of them. So up to [`SMALL`] entries live in
//! a vector sorted latest first (the earliest is the last: found and
//! popped at once, and a near deadline, the common insertion, goes in at
//! the end), and beyond that in a B-tree, whose insertions and removals
//! stay logarithmic with thousands of connections. The set moves to the
//! tree when the vector would pass [`SMALL`] and back when the tree holds
//! [`SMALL`] / 4 or fewer, so it does not go back and forth at the edge.
//! Against the B-tree alone, `stack-cost --pingpong --watch` (MPA/TCP)
//! counted 17,944 instructions per round trip where it had 18,192.

use std::collections::BTreeSet;

/// Entries the vector holds at most.
pub(super) const SMALL: usize = 32;

/// `(at, id)` entries, each at most once, earliest first.
#[derive(Debug)]
pub(super) enum Deadlines<Id> {
    /// Sorted by `(at, id)`, greatest first.
    Small(Vec<(u64, Id)>),
    Large(BTreeSet<(u64, Id)>),
}

impl<Id: Ord + Copy> Default for Deadlines<Id> {
    fn default() -> Self {
        Deadlines::Small(Vec::new())
    }
}

impl<Id: Ord + Copy> Deadlines<Id> {
    /// Add `e` (nothing if it is there).
    #[inline]
    pub(super) fn insert(&mut self, e: (u64, Id)) {
        match self {
            Deadlines::Small(v) => {
                // Latest first: the place is after every greater entry.
                let i = v.partition_point(|x| *x > e);
                if v.get(i) == Some(&e) {
                    return;
                }
                if v.len() < SMALL {
                    v.insert(i, e);
                } else {
                    self.grow(e);
                }
            }
            Deadlines::Large(t) => Self::insert_large(t, e),
        }
    }

    /// The vector is full: every entry and `e` move to the tree. Out of
    /// line, as every `Large` path: a loop with few connections never
    /// runs it, and inlined it would sit in the instruction cache lines
    /// of the small path (docs/datapath.md, "Cold paths out of line").
    #[cold]
    #[inline(never)]
    fn grow(&mut self, e: (u64, Id)) {
        if let Deadlines::Small(v) = self {
            let mut t: BTreeSet<_> = v.drain(..).collect();
            t.insert(e);
            *self = Deadlines::Large(t);
        }
    }

    #[cold]
    #[inline(never)]
    fn insert_large(t: &mut BTreeSet<(u64, Id)>, e: (u64, Id)) {
        t.insert(e);
    }

    #[cold]
    #[inline(never)]
    fn remove_large(&mut self, e: &(u64, Id)) {
        if let Deadlines::Large(t) = self {
            t.remove(e);
            self.shrink();
        }
    }

    #[cold]
    #[inline(never)]
    fn first_large(t: &BTreeSet<(u64, Id)>) -> Option<&(u64, Id)> {
        t.first()
    }

    #[cold]
    #[inline(never)]
    fn pop_first_large(&mut self) -> Option<(u64, Id)> {
        let Deadlines::Large(t) = self else {
            return None; // (called for the tree form only)
        };
        let e = t.pop_first();
        self.shrink();
        e
    }

    /// Take `e` out, if it is there.
    #[inline]
    pub(super) fn remove(&mut self, e: &(u64, Id)) {
        match self {
            Deadlines::Small(v) => {
                let i = v.partition_point(|x| x > e);
                if v.get(i) == Some(e) {
                    v.remove(i);
                }
            }
            Deadlines::Large(_) => self.remove_large(e),
        }
    }

    /// The earliest entry.
    #[inline]
    pub(super) fn first(&self) -> Option<&(u64, Id)> {
        match self {
            Deadlines::Small(v) => v.last(),
            Deadlines::Large(t) => Self::first_large(t),
        }
    }

    /// Take the earliest entry out.
    #[inline]
    pub(super) fn pop_first(&mut self) -> Option<(u64, Id)> {
        match self {
            Deadlines::Small(v) => v.pop(),
            Deadlines::Large(_) => self.pop_first_large(),
        }
    }

    /// Entries held.
    pub(super) fn len(&self) -> usize {
        match self {
            Deadlines::Small(v) => v.len(),
            Deadlines::Large(t) => t.len(),
        }
    }

    /// Back to the vector once the tree holds a quarter of it or less.
    #[inline]
    fn shrink(&mut self) {
        if let Deadlines::Large(t) = self {
            if t.len() <= SMALL / 4 {
                let mut v = Vec::with_capacity(SMALL);
                v.extend(t.iter().rev().copied());
                *self = Deadlines::Small(v);
            }
        }
    }

    /// Whether the entries live in the B-tree.
    #[cfg(test)]
    pub(super) fn is_large(&self) -> bool {
        matches!(self, Deadlines::Large(_))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The same operations on a `BTreeSet` and on `Deadlines` give the
    /// same answers, with the set growing past `SMALL` and shrinking
    /// below it again several times (xorshift, fixed seed).
    #[test]
    fn answers_as_a_btree_set_across_both_forms() {
        let mut x: u64 = 0x9e37_79b9_7f4a_7c15;
        let mut rand = move || {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x
        };
        let mut d = Deadlines::<u32>::default();
        let mut r = BTreeSet::new();
        let (mut grew, mut shrank) = (0, 0);
        let mut was_large = false;
        for step in 0..200_000u32 {
            // Phases of growth and of shrinking, 2,000 steps each.
            let growing = (step / 2_000) % 2 == 0;
            let e = (rand() % 64, (rand() % 16) as u32);
            // Growing: 6 in 8 insert; shrinking: 1 in 8.
            let op = rand() % 8;
            let insert = if growing { op < 6 } else { op == 0 };
            if insert {
                d.insert(e);
                r.insert(e);
            } else if op % 2 == 0 {
                // A present entry, when there is one, as often as not.
                let e = match r.iter().nth((rand() as usize) % (r.len() + 1)) {
                    Some(&p) if rand() % 2 == 0 => p,
                    _ => e,
                };
                d.remove(&e);
                r.remove(&e);
            } else {
                assert_eq!(d.pop_first(), r.pop_first(), "step {step}");
            }
            assert_eq!(d.first(), r.first(), "step {step}");
            assert_eq!(d.len(), r.len(), "step {step}");
            if d.is_large() != was_large {
                if d.is_large() {
                    grew += 1;
                } else {
                    shrank += 1;
                }
                was_large = d.is_large();
            }
        }
        assert!(grew >= 3 && shrank >= 3, "{grew} {shrank}");
        // Drained in order.
        while let Some(e) = r.pop_first() {
            assert_eq!(d.pop_first(), Some(e));
        }
        assert_eq!(d.pop_first(), None);
    }

    #[test]
    fn an_entry_is_held_once() {
        let mut d = Deadlines::<u32>::default();
        d.insert((5, 1));
        d.insert((5, 1));
        d.insert((3, 2));
        assert_eq!(d.len(), 2);
        assert_eq!(d.pop_first(), Some((3, 2)));
        assert_eq!(d.pop_first(), Some((5, 1)));
    }
}
