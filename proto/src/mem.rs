//! Protection domains, memory registration, memory windows and STag checks
//! (RFC 5040 §8, RFC 5041 §8.2-§8.3).
//!
//! An STag is a 24-bit index plus an 8-bit consumer key (`index << 8 |
//! key`); the index names a table slot through a seeded permutation and the
//! key is drawn per slot life (see [`MemoryTable`]), so STags are hard to
//! guess (RFC 5040 §8.1.1 item 8). An index names either a memory region (MR) or a
//! memory window (MW). Both belong to one protection domain; a stream (QP)
//! may only touch STags of its own PD — an STag of another PD is "not
//! associated with this stream". A region's memory is anything that
//! implements [`RegionMemory`]: a plain `Vec<u8>` the table owns (the
//! simulator and tests), or memory shared with the application that it
//! reads and writes in place while it is registered (`iwarp-memreg`, the
//! one crate with the `unsafe` this needs). This crate only ever copies into
//! and out of it through that trait, after its own bounds checks.
//!
//! Every placement goes through [`MemoryTable::check`], which validates STag,
//! PD, access rights, TO wrap and bounds with checked arithmetic, so a write
//! can only ever land inside a registered region (and, through a window,
//! inside that window).
//!
//! # Memory windows
//!
//! A window (RFC 5040 §2.1 terminology, verbs semantics) is an STag that
//! grants remote access to part of a region: [`MemoryTable::alloc_mw`] gives
//! an STag that is not valid until [`MemoryTable::bind_mw`] binds it to
//! `len` octets at octet `offset` of a region registered with
//! [`Access::MW_BIND`]. Each bind rotates the window's key, so the STag of an
//! earlier binding stops matching.
//!
//! **Tagged offsets through a window** follow the region's: a window bound at
//! octet `offset` of a region registered with base TO `b` answers to TOs
//! `b + offset .. b + offset + len` (so a TO names the same octet through the
//! region and through any window onto it; for a zero-based region the
//! window's TOs are region offsets). [`MemoryTable::base_to`] tells which TO
//! to advertise. [`MemoryTable::check`] checks base and bounds against the
//! window's range and rights against the window's rights, never the
//! region's.
//!
//! Local invalidation ([`MemoryTable::invalidate`]) and remote invalidation
//! by Send with Invalidate ([`MemoryTable::invalidate_remote`], RFC 5040
//! §5.3) unbind a window; its STag then fails every check with
//! [`AccessError::InvalidStag`], as an invalidated region's does. A window
//! also stops resolving when its region is invalidated.
//!
//! **Deregistering a region with bound windows fails** with
//! [`MemError::RegionHasWindows`]: silently revoking windows the consumer may
//! have advertised would hide a bug, and failing keeps every window's memory
//! alive for as long as the window can be used (RFC 5040 §8.1.1 item 6).
//! Invalidate or deallocate the windows first.
//!
//! # Replicas: one table on several poll loops
//!
//! [`MemoryTable::replicas`] makes tables that act as one: a context with a
//! poll loop per queue gives each loop one, applies every control
//! operation to each of them in the same order (one operation at a time),
//! and each loop checks and places on its own replica, lock-free. A remote
//! invalidation on one loop is seen by the next check on every loop
//! through a state word per slot that the replicas share (`shared.rs`
//! says how, and how replicas keep deciding alike).

mod shared;

use shared::Words;

/// A protection domain handle.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct PdId(pub u32);

/// Steering tag: 24-bit index, 8-bit key.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct STag(pub u32);

impl STag {
    /// Compose from index and key.
    pub const fn new(index: u32, key: u8) -> Self {
        STag((index << 8) | key as u32)
    }
    /// The 24-bit index.
    pub const fn index(self) -> u32 {
        self.0 >> 8
    }
    /// The 8-bit consumer key.
    pub const fn key(self) -> u8 {
        self.0 as u8
    }
}

impl core::fmt::Display for STag {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        write!(f, "{:#010x}", self.0)
    }
}

/// Access rights of a region or window.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Access(pub u8);

impl Access {
    /// Local read (source of Send / RDMA Write). Implicit on every region,
    /// as in verbs (`ibv_reg_mr`): [`MemoryTable::check`] grants it to any
    /// region of the stream's PD whatever rights it was registered with, so
    /// naming it at registration changes nothing. A window never grants it
    /// (windows carry remote rights only).
    pub const LOCAL_READ: Access = Access(1);
    /// Local write (receive buffer, RDMA Read sink).
    pub const LOCAL_WRITE: Access = Access(2);
    /// Remote read (source of an inbound RDMA Read).
    pub const REMOTE_READ: Access = Access(4);
    /// Remote write (target of an inbound RDMA Write).
    pub const REMOTE_WRITE: Access = Access(8);
    /// Memory windows may be bound to the region.
    pub const MW_BIND: Access = Access(16);
    /// Remote atomic (target of an inbound RFC 7306 Atomic Request).
    pub const REMOTE_ATOMIC: Access = Access(32);
    /// All rights.
    pub const ALL: Access = Access(63);
    /// Remote read and remote write (what a plain RDMA server exposes;
    /// [`REMOTE_ATOMIC`](Self::REMOTE_ATOMIC) is asked for on its own).
    pub const REMOTE: Access = Access(4 | 8);
    /// Every right that exposes memory to the peer: [`REMOTE`](Self::REMOTE)
    /// and remote atomic.
    pub const ANY_REMOTE: Access = Access(4 | 8 | 32);

    /// Whether all of `other`'s rights are present.
    pub const fn contains(self, other: Access) -> bool {
        self.0 & other.0 == other.0
    }

    /// Whether any of `other`'s rights is present.
    pub const fn intersects(self, other: Access) -> bool {
        self.0 & other.0 != 0
    }
}

impl core::ops::BitOr for Access {
    type Output = Access;
    fn bitor(self, rhs: Access) -> Access {
        Access(self.0 | rhs.0)
    }
}

/// Why an access was refused. Each maps to one Terminate code, depending on
/// whether DDP (tagged placement) or RDMAP (Read Request source, Invalidate)
/// detected it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AccessError {
    /// No such region or window, key mismatch, invalidated, or an unbound window.
    InvalidStag,
    /// The region or window belongs to another protection domain.
    PdMismatch,
    /// The region or window lacks the needed right.
    Access,
    /// TO + length overflows 64 bits.
    ToWrap,
    /// The range is outside the region or window.
    Bounds,
}

impl core::fmt::Display for AccessError {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.write_str(match self {
            AccessError::InvalidStag => "invalid STag",
            AccessError::PdMismatch => "STag belongs to another protection domain",
            AccessError::Access => "access rights violation",
            AccessError::ToWrap => "tagged offset wraps",
            AccessError::Bounds => "base or bounds violation",
        })
    }
}

impl std::error::Error for AccessError {}

/// Errors of the registration and window API.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum MemError {
    /// Unknown protection domain.
    NoSuchPd,
    /// The PD still has regions or windows.
    PdBusy,
    /// The table is full (2^24 - 1 regions and windows).
    TableFull,
    /// Unknown STag (index/key).
    NoSuchStag,
    /// base TO + length overflows.
    TooLarge,
    /// The STag names a memory window where a region is needed.
    NotARegion,
    /// The STag names a memory region where a window is needed.
    NotAWindow,
    /// The region has been invalidated.
    RegionInvalid,
    /// The region and the window belong to different protection domains.
    PdMismatch,
    /// The region was not registered with [`Access::MW_BIND`].
    NoBindRight,
    /// A window may carry only [`Access::REMOTE_READ`] and [`Access::REMOTE_WRITE`].
    BadWindowAccess,
    /// Remote write on a window needs local write on its region.
    NeedsLocalWrite,
    /// `offset + len` of a bind is outside the region (or overflows).
    OutOfRange,
    /// The region still has memory windows bound to it.
    RegionHasWindows,
    /// A replica of a table ([`MemoryTable::replicas`]) was given a control
    /// operation out of step with the others (one skipped, or one begun
    /// before every replica ran the last).
    OutOfStep,
}

impl core::fmt::Display for MemError {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.write_str(match self {
            MemError::NoSuchPd => "no such protection domain",
            MemError::PdBusy => "protection domain still has registered regions or windows",
            MemError::TableFull => "memory region table is full",
            MemError::NoSuchStag => "no such STag",
            MemError::TooLarge => "base tagged offset plus length overflows",
            MemError::NotARegion => "STag names a memory window, not a memory region",
            MemError::NotAWindow => "STag names a memory region, not a memory window",
            MemError::RegionInvalid => "memory region has been invalidated",
            MemError::PdMismatch => "memory region and window are in different protection domains",
            MemError::NoBindRight => "memory region was not registered with the MW_BIND right",
            MemError::BadWindowAccess => "a memory window may grant only remote read and write",
            MemError::NeedsLocalWrite => {
                "remote write on a memory window needs local write on its region"
            }
            MemError::OutOfRange => "window range is outside the memory region",
            MemError::RegionHasWindows => "memory region still has memory windows bound to it",
            MemError::OutOfStep => "memory table replica out of step with the others",
        })
    }
}

impl std::error::Error for MemError {}

/// The memory behind a registered region.
///
/// The table checks every access against the region's bounds before it calls
/// these, and implementations check again (returning `false`, never
/// panicking): a placement can only land inside the region.
pub trait RegionMemory: Send + core::fmt::Debug {
    /// Length in octets (fixed for the life of the registration).
    fn len(&self) -> usize;

    /// Zero length.
    fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Copy `src` to octet `offset`. `false` (and nothing written) if the
    /// range is not inside the memory.
    fn write_at(&mut self, offset: usize, src: &[u8]) -> bool;

    /// Copy `dst.len()` octets at `offset` into `dst`. `false` (and `dst`
    /// untouched) if the range is not inside the memory.
    fn read_at(&self, offset: usize, dst: &mut [u8]) -> bool;
}

impl RegionMemory for Vec<u8> {
    fn len(&self) -> usize {
        self.as_slice().len()
    }

    fn write_at(&mut self, offset: usize, src: &[u8]) -> bool {
        let Some(end) = offset.checked_add(src.len()) else {
            return false;
        };
        match self.get_mut(offset..end) {
            Some(d) => {
                d.copy_from_slice(src);
                true
            }
            None => false,
        }
    }

    fn read_at(&self, offset: usize, dst: &mut [u8]) -> bool {
        let Some(end) = offset.checked_add(dst.len()) else {
            return false;
        };
        match self.get(offset..end) {
            Some(s) => {
                dst.copy_from_slice(s);
                true
            }
            None => false,
        }
    }
}

/// A checked, readable slice of a region: the source of an outbound FPDU's
/// payload (see [`crate::mpa::Part`]).
#[derive(Clone, Copy)]
pub struct RegionSlice<'a> {
    mem: &'a dyn RegionMemory,
    offset: usize,
    len: usize,
}

impl core::fmt::Debug for RegionSlice<'_> {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.debug_struct("RegionSlice")
            .field("offset", &self.offset)
            .field("len", &self.len)
            .finish()
    }
}

impl RegionSlice<'_> {
    /// Length in octets.
    pub fn len(&self) -> usize {
        self.len
    }

    /// Zero length.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Copy `dst.len()` octets starting `at` octets into the slice. `false`
    /// (nothing copied) if that leaves the slice.
    pub fn copy_to(&self, at: usize, dst: &mut [u8]) -> bool {
        match at.checked_add(dst.len()) {
            Some(end) if end <= self.len => self.mem.read_at(self.offset + at, dst),
            _ => false,
        }
    }
}

#[derive(Debug)]
struct Region {
    pd: PdId,
    access: Access,
    base_to: u64,
    buf: Box<dyn RegionMemory>,
    /// `buf.len()`, fixed for the registration's life: kept here so a
    /// check on the per-FPDU path makes no virtual call for it.
    len: usize,
    valid: bool,
    /// Windows currently bound to this region.
    windows: u32,
}

/// What a bound window grants.
#[derive(Debug, Clone, Copy)]
struct Binding {
    /// The region: its index, and its key at bind time (a region made valid
    /// again under another key does not revive the window).
    mr_index: u32,
    mr_key: u8,
    /// Octet offset of the window in the region's buffer.
    offset: u64,
    len: u64,
    /// TO of the window's first octet (the region's TO there).
    base_to: u64,
    access: Access,
}

#[derive(Debug)]
struct Window {
    pd: PdId,
    /// `None`: allocated but not bound, or invalidated.
    binding: Option<Binding>,
}

#[derive(Debug)]
enum Object {
    Region(Region),
    Window(Window),
}

impl Object {
    fn pd(&self) -> PdId {
        match self {
            Object::Region(r) => r.pd,
            Object::Window(w) => w.pd,
        }
    }
}

#[derive(Debug, Default)]
struct Slot {
    key: u8,
    /// Generation: bumped every time what this slot grants may shrink
    /// (deregistration, invalidation, (re)binding or unbinding a window,
    /// reuse by a new registration). A [`Range`] remembers the generations it
    /// was validated under and is refused once either has moved on.
    gen: u64,
    obj: Option<Object>,
}

/// A validated range inside a region, returned by [`MemoryTable::check`].
///
/// It stays usable only while the region (and the window it was validated
/// through, if any) is in the state it was checked in: deregistering or
/// invalidating the region, unbinding or rebinding the window, or reusing
/// the slot for a new registration makes [`MemoryTable::write`] and
/// [`MemoryTable::read`] refuse it ([`MemoryTable::is_live`] tells). So a
/// range kept across `receive()` calls for the rest of a segment cannot
/// outlive the access the peer had when the segment's header was checked
/// (RFC 5040 §8.1.1 item 6).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Range {
    /// Slot of the region whose memory this is.
    slot: u32,
    /// The region slot's generation at check time.
    gen: u64,
    /// Slot of the STag that was checked (the window's, or `slot`).
    via: u32,
    /// Its generation at check time.
    via_gen: u64,
    /// Offset from the region's first octet.
    pub offset: usize,
    /// Length.
    pub len: usize,
}

impl Range {
    /// A placeholder range of length 0 (fills unused entries of fixed arrays).
    /// Slot 0 never holds an object, so it is never live.
    pub(crate) const EMPTY: Range = Range {
        slot: 0,
        gen: 0,
        via: 0,
        via_gen: 0,
        offset: 0,
        len: 0,
    };
}

/// The region and window table of one device (shared by all its QPs).
///
/// **STag values** (RFC 5040 §8.1.1 item 8: an RNIC MUST choose them in a
/// way difficult to predict, sparsely over the whole range). Slots are
/// numbered densely inside the table, but the 24-bit STag index is a
/// seeded permutation of the slot number, so consecutive registrations get
/// unrelated-looking indices spread over the 2^24 range; and the 8-bit key
/// of a slot is drawn from a seeded generator when the slot is created and
/// again whenever it is reused or its window rebound. Give each table a
/// secret random seed ([`with_seed`](Self::with_seed)); [`new`](Self::new)
/// uses a fixed seed, which suits tests and the deterministic simulator but
/// makes STags predictable to anyone who knows it.
#[derive(Debug)]
pub struct MemoryTable {
    pds: Vec<bool>,
    /// Slot 0 is never used, so no valid STag has index 0 (the permutation
    /// maps 0 to 0).
    slots: Vec<Slot>,
    free: Vec<u32>,
    /// Slot number ↔ STag index.
    map: IndexMap,
    /// SplitMix64 state for consumer keys.
    rng: u64,
    /// The slots' state words, shared with the other replicas if any.
    words: Words,
}

const MAX_INDEX: u32 = (1 << 24) - 1;

/// Fixed seed of [`MemoryTable::new`].
const DEFAULT_SEED: u64 = 0x6977_6172_702d_6d72;

fn splitmix64(state: &mut u64) -> u64 {
    *state = state.wrapping_add(0x9e37_79b9_7f4a_7c15);
    let mut z = *state;
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^ (z >> 31)
}

/// A seeded bijection of the 24-bit numbers that keeps 0 at 0: multiply
/// by an odd constant, xor-shift, multiply, xor-shift (each step is
/// invertible modulo 2^24).
#[derive(Debug, Clone, Copy)]
struct IndexMap {
    m1: u32,
    m2: u32,
    m1_inv: u32,
    m2_inv: u32,
}

impl IndexMap {
    fn new(rng: &mut u64) -> IndexMap {
        let m1 = (splitmix64(rng) as u32 | 1) & MAX_INDEX;
        let m2 = (splitmix64(rng) as u32 | 1) & MAX_INDEX;
        IndexMap {
            m1,
            m2,
            m1_inv: Self::inverse(m1),
            m2_inv: Self::inverse(m2),
        }
    }

    /// The inverse of odd `m` modulo 2^24 (Newton: each step doubles the
    /// correct low bits, from 3).
    fn inverse(m: u32) -> u32 {
        let mut x = m;
        for _ in 0..4 {
            x = x.wrapping_mul(2u32.wrapping_sub(m.wrapping_mul(x)));
        }
        x & MAX_INDEX
    }

    fn mul(x: u32, m: u32) -> u32 {
        x.wrapping_mul(m) & MAX_INDEX
    }

    /// Its own inverse on 24-bit values (the shift is half the width).
    fn xorshift(x: u32) -> u32 {
        x ^ (x >> 12)
    }

    fn scramble(&self, slot: u32) -> u32 {
        let x = Self::xorshift(Self::mul(slot & MAX_INDEX, self.m1));
        Self::xorshift(Self::mul(x, self.m2))
    }

    fn unscramble(&self, index: u32) -> u32 {
        let x = Self::mul(Self::xorshift(index & MAX_INDEX), self.m2_inv);
        Self::mul(Self::xorshift(x), self.m1_inv)
    }
}

impl Default for MemoryTable {
    fn default() -> Self {
        Self::new()
    }
}

impl MemoryTable {
    /// An empty table with a fixed seed (deterministic STags: for tests and
    /// the simulator; see [`with_seed`](Self::with_seed)).
    pub fn new() -> Self {
        Self::with_seed(DEFAULT_SEED)
    }

    /// An empty table whose STag indices and keys derive from `seed`
    /// (RFC 5040 §8.1.1 item 8). Pass a secret random value in production:
    /// this crate reads no clock and no entropy source itself.
    pub fn with_seed(seed: u64) -> Self {
        Self::replica(seed, Words::single())
    }

    /// `n` (at least one) replicas of one table, all seeded with `seed`: a
    /// context with a poll loop per queue gives each loop one. Apply every
    /// control operation (`alloc_pd`, `register`, `deregister`,
    /// `invalidate`, `revalidate`, `alloc_mw`, `bind_mw`, `dealloc_mw`,
    /// `dealloc_pd`) to every replica, in the same order, the next only
    /// once every replica has run the last; each then returns the same
    /// result (the same STag, the same error). An operation run out of
    /// step fails with [`MemError::OutOfStep`]. A remote invalidation
    /// ([`invalidate_remote`](Self::invalidate_remote)) on any replica
    /// refuses the STag on all of them from then on, and a control
    /// operation refuses access to what it changes on every replica as
    /// soon as one has run it (none grants early).
    pub fn replicas(seed: u64, n: usize) -> Vec<Self> {
        Words::group(n)
            .into_iter()
            .map(|w| Self::replica(seed, w))
            .collect()
    }

    fn replica(seed: u64, mut words: Words) -> Self {
        let mut rng = seed;
        let map = IndexMap::new(&mut rng);
        words.ensure(0);
        MemoryTable {
            pds: Vec::new(),
            slots: vec![Slot::default()],
            free: Vec::new(),
            map,
            rng,
            words,
        }
    }

    /// Begin a control operation: fold in the remote invalidations the
    /// operation's leader saw (see `shared.rs`), so that every replica
    /// decides it on the same state.
    fn begin(&mut self) -> Result<(), MemError> {
        let slots = &self.slots;
        let gen_of = |i: u32| slots.get(i as usize).map(|s| s.gen);
        let folded = self.words.begin(gen_of).map_err(|()| MemError::OutOfStep)?;
        for i in folded {
            self.fold_kill(i);
        }
        Ok(())
    }

    /// What a remote invalidation of slot `index` does to this replica's
    /// own state: a region becomes invalid, a window unbound (its region
    /// counts one window less); either way a new generation.
    fn fold_kill(&mut self, index: u32) {
        match self.obj_at_mut(index) {
            Some(Object::Region(r)) => {
                r.valid = false;
                self.bump(index);
            }
            Some(Object::Window(_)) => self.unbind(index),
            None => {}
        }
    }

    /// Move slot `index` on to a new generation (every range checked
    /// under the old one dies), on every replica's checks at once.
    fn bump(&mut self, index: u32) {
        let Some(slot) = self.slots.get_mut(index as usize) else {
            return;
        };
        slot.gen += 1;
        let gen = slot.gen;
        self.words.publish(index, gen);
    }

    /// Slot `index` is in force at this replica's generation (no replica
    /// moved it on, no peer killed it).
    #[inline]
    fn alive(&self, index: u32) -> bool {
        self.slots
            .get(index as usize)
            .is_some_and(|s| self.words.alive(index, s.gen))
    }

    /// Allocate a protection domain.
    pub fn alloc_pd(&mut self) -> PdId {
        if let Some(i) = self.pds.iter().position(|used| !used) {
            self.pds[i] = true;
            return PdId(i as u32);
        }
        self.pds.push(true);
        PdId(self.pds.len() as u32 - 1)
    }

    /// Free a protection domain that has no regions and no windows.
    pub fn dealloc_pd(&mut self, pd: PdId) -> Result<(), MemError> {
        self.begin()?;
        if !self.pd_exists(pd) {
            return Err(MemError::NoSuchPd);
        }
        if self
            .slots
            .iter()
            .any(|s| s.obj.as_ref().is_some_and(|o| o.pd() == pd))
        {
            return Err(MemError::PdBusy);
        }
        self.pds[pd.0 as usize] = false;
        Ok(())
    }

    /// Register `buf` in `pd`. Tagged offsets `base_to .. base_to + len`
    /// address it (0 for zero-based, or e.g. the buffer's virtual address).
    pub fn register(
        &mut self,
        pd: PdId,
        buf: impl RegionMemory + 'static,
        access: Access,
        base_to: u64,
    ) -> Result<STag, MemError> {
        self.register_boxed(pd, Box::new(buf), access, base_to)
    }

    /// [`register`](Self::register) for memory that is already boxed.
    pub fn register_boxed(
        &mut self,
        pd: PdId,
        buf: Box<dyn RegionMemory>,
        access: Access,
        base_to: u64,
    ) -> Result<STag, MemError> {
        self.begin()?;
        if !self.pd_exists(pd) {
            return Err(MemError::NoSuchPd);
        }
        if base_to.checked_add(buf.len() as u64).is_none() {
            return Err(MemError::TooLarge);
        }
        let len = buf.len();
        self.alloc_slot(Object::Region(Region {
            pd,
            access,
            base_to,
            buf,
            len,
            valid: true,
            windows: 0,
        }))
    }

    /// Deregister and hand the memory back. Refused while windows are bound
    /// to the region ([`MemError::RegionHasWindows`]).
    pub fn deregister(&mut self, stag: STag) -> Result<Box<dyn RegionMemory>, MemError> {
        self.begin()?;
        let index = self.slot_of(stag);
        let slot = self.slot_mut(stag).ok_or(MemError::NoSuchStag)?;
        match &slot.obj {
            Some(Object::Region(r)) if r.windows > 0 => return Err(MemError::RegionHasWindows),
            Some(Object::Region(_)) => {}
            Some(Object::Window(_)) => return Err(MemError::NotARegion),
            None => return Err(MemError::NoSuchStag),
        }
        let Some(Object::Region(r)) = slot.obj.take() else {
            return Err(MemError::NoSuchStag);
        };
        self.bump(index);
        self.free.push(index);
        Ok(r.buf)
    }

    /// Local invalidate: the STag stops working for remote and local access.
    /// A window is unbound (its memory stays registered).
    pub fn invalidate(&mut self, stag: STag) -> Result<(), MemError> {
        self.begin()?;
        let index = self.slot_of(stag);
        let Some(slot) = self.slot_mut(stag) else {
            return Err(MemError::NoSuchStag);
        };
        match slot.obj.as_mut() {
            Some(Object::Region(r)) => {
                r.valid = false;
                self.bump(index);
                Ok(())
            }
            Some(Object::Window(_)) => {
                self.unbind(index);
                Ok(())
            }
            None => Err(MemError::NoSuchStag),
        }
    }

    /// Remote invalidate (Send with Invalidate, RFC 5040 §5.3, §7.2 items
    /// 4-5): only a valid STag (region, or bound window) of the stream's own
    /// PD can be invalidated ([`AccessError::InvalidStag`],
    /// [`AccessError::PdMismatch`]), and only one enabled for remote access:
    /// a region registered with [`Access::REMOTE_READ`] or
    /// [`Access::REMOTE_WRITE`], or a window bound with one of them
    /// ([`AccessError::Access`] otherwise). A local-only buffer was never
    /// exposed to a peer, so no peer may revoke it (RFC 5040 §8.1.1 item 7
    /// asks this for STags shared between streams; a local key is used by
    /// every stream of its PD).
    pub fn invalidate_remote(&mut self, stag: STag, pd: PdId) -> Result<(), AccessError> {
        let index = self.slot_of(stag);
        let Some(slot) = self.slot_ref(stag) else {
            return Err(AccessError::InvalidStag);
        };
        let gen = slot.gen;
        // Nothing changes in this replica's own state: the slot's shared
        // word takes the kill (every replica's next check refuses it), and
        // the next control operation folds it in (`begin`).
        match slot.obj.as_ref() {
            Some(Object::Region(r)) => {
                if !r.valid || !self.words.alive(index, gen) {
                    return Err(AccessError::InvalidStag);
                }
                if r.pd != pd {
                    return Err(AccessError::PdMismatch);
                }
                if !r.access.intersects(Access::ANY_REMOTE) {
                    return Err(AccessError::Access);
                }
            }
            Some(Object::Window(w)) => {
                let Some(b) = w.binding else {
                    return Err(AccessError::InvalidStag);
                };
                if !self.words.alive(index, gen) {
                    return Err(AccessError::InvalidStag);
                }
                if w.pd != pd {
                    return Err(AccessError::PdMismatch);
                }
                if !b.access.intersects(Access::ANY_REMOTE) {
                    return Err(AccessError::Access);
                }
            }
            None => return Err(AccessError::InvalidStag),
        }
        // Lost only to a control operation or another kill of the same
        // generation since the look above.
        if self.words.kill(index, gen) {
            Ok(())
        } else {
            Err(AccessError::InvalidStag)
        }
    }

    /// Make an invalidated region valid again under a new consumer key
    /// (as a fast-register would); returns the new STag. Windows bound under
    /// the old key stay dead.
    pub fn revalidate(&mut self, stag: STag, key: u8) -> Result<STag, MemError> {
        self.begin()?;
        let index = self.slot_of(stag);
        let slot = self.slot_mut(stag).ok_or(MemError::NoSuchStag)?;
        match slot.obj.as_mut() {
            Some(Object::Region(r)) => r.valid = true,
            Some(Object::Window(_)) => return Err(MemError::NotARegion),
            None => return Err(MemError::NoSuchStag),
        }
        slot.key = key;
        self.bump(index);
        Ok(self.stag_at(index, key))
    }

    /// Allocate a memory window in `pd`. Its STag is not valid until
    /// [`bind_mw`](Self::bind_mw).
    pub fn alloc_mw(&mut self, pd: PdId) -> Result<STag, MemError> {
        self.begin()?;
        if !self.pd_exists(pd) {
            return Err(MemError::NoSuchPd);
        }
        self.alloc_slot(Object::Window(Window { pd, binding: None }))
    }

    /// Bind window `mw` to `len` octets at octet `offset` of region
    /// `mr_stag`, granting `access` (remote read and/or remote write) to the
    /// peer. Returns the window's new STag (the key rotates on every bind, so
    /// the STag of an earlier binding stops working). A bound window may be
    /// bound again (moved); an invalidated one too.
    ///
    /// Checks: `mw` is a window and `mr_stag` a valid region of the same PD;
    /// the region has [`Access::MW_BIND`]; `access` holds only remote rights,
    /// and remote write needs local write on the region; `offset + len` lies
    /// inside the region (checked arithmetic).
    pub fn bind_mw(
        &mut self,
        mw: STag,
        mr_stag: STag,
        offset: u64,
        len: u64,
        access: Access,
    ) -> Result<STag, MemError> {
        self.begin()?;
        let wpd = match self.object(mw) {
            Some(Object::Window(w)) => w.pd,
            Some(Object::Region(_)) => return Err(MemError::NotAWindow),
            None => return Err(MemError::NoSuchStag),
        };
        let r = match self.object(mr_stag) {
            Some(Object::Region(r)) => r,
            Some(Object::Window(_)) => return Err(MemError::NotARegion),
            None => return Err(MemError::NoSuchStag),
        };
        if !r.valid {
            return Err(MemError::RegionInvalid);
        }
        if r.pd != wpd {
            return Err(MemError::PdMismatch);
        }
        if !r.access.contains(Access::MW_BIND) {
            return Err(MemError::NoBindRight);
        }
        if !(Access::REMOTE_READ | Access::REMOTE_WRITE).contains(access) {
            return Err(MemError::BadWindowAccess);
        }
        if access.contains(Access::REMOTE_WRITE) && !r.access.contains(Access::LOCAL_WRITE) {
            return Err(MemError::NeedsLocalWrite);
        }
        match offset.checked_add(len) {
            Some(end) if end <= r.buf.len() as u64 => {}
            _ => return Err(MemError::OutOfRange),
        }
        // Cannot overflow: offset <= buf.len() and base_to + buf.len() was checked at register.
        let binding = Binding {
            mr_index: self.slot_of(mr_stag),
            mr_key: mr_stag.key(),
            offset,
            len,
            base_to: r.base_to + offset,
            access,
        };
        let mw_index = self.slot_of(mw);
        self.unbind(mw_index);
        if let Some(Object::Region(r)) = self.obj_at_mut(binding.mr_index) {
            r.windows += 1;
        }
        let old = self.slots[mw_index as usize].key;
        let key = self.next_key(old);
        let slot = &mut self.slots[mw_index as usize];
        if let Some(Object::Window(w)) = slot.obj.as_mut() {
            w.binding = Some(binding);
        }
        slot.key = key;
        self.bump(mw_index);
        Ok(self.stag_at(mw_index, key))
    }

    /// Free a window (bound or not).
    pub fn dealloc_mw(&mut self, mw: STag) -> Result<(), MemError> {
        self.begin()?;
        match self.object(mw) {
            Some(Object::Window(_)) => {}
            Some(Object::Region(_)) => return Err(MemError::NotAWindow),
            None => return Err(MemError::NoSuchStag),
        }
        let index = self.slot_of(mw);
        self.unbind(index);
        self.slots[index as usize].obj = None;
        self.bump(index);
        self.free.push(index);
        Ok(())
    }

    /// Whether `stag` names a valid region or a bound, usable window.
    pub fn is_valid(&self, stag: STag) -> bool {
        match self.object(stag) {
            Some(Object::Region(r)) => r.valid && self.alive(self.slot_of(stag)),
            Some(Object::Window(_)) => self.resolve(self.slot_of(stag)).is_some(),
            None => false,
        }
    }

    /// Whether `stag` names a memory window (bound or not).
    pub fn is_window(&self, stag: STag) -> bool {
        matches!(self.object(stag), Some(Object::Window(_)))
    }

    /// Tagged offset of the first octet: the region's base TO, or for a bound
    /// window the region's TO at the window's first octet.
    pub fn base_to(&self, stag: STag) -> Option<u64> {
        match self.object(stag)? {
            Object::Region(r) => Some(r.base_to),
            Object::Window(_) => {
                let index = self.slot_of(stag);
                let b = self.slot_ref(stag)?.obj.as_ref().and_then(|o| match o {
                    Object::Window(w) => w.binding,
                    Object::Region(_) => None,
                })?;
                self.alive(index).then_some(b.base_to)
            }
        }
    }

    /// Length of the region, or of a bound window.
    pub fn len(&self, stag: STag) -> Option<usize> {
        self.span(stag).map(|(_, lo, hi)| hi - lo)
    }

    /// A copy of the memory (the owner's view; no access-right check): a
    /// region's, or the part of its region a bound window covers.
    pub fn snapshot(&self, stag: STag) -> Option<Vec<u8>> {
        self.copy_out(stag, 0, self.len(stag)?)
    }

    /// A copy of `len` octets at `offset` of a region or bound window (the
    /// owner's view; no access-right check). `None` if it does not fit.
    pub fn copy_out(&self, stag: STag, offset: usize, len: usize) -> Option<Vec<u8>> {
        let (index, lo, hi) = self.span(stag)?;
        if offset.checked_add(len)? > hi - lo {
            return None;
        }
        let Some(Object::Region(r)) = self.slots.get(index as usize)?.obj.as_ref() else {
            return None;
        };
        let mut out = vec![0; len];
        r.buf.read_at(lo + offset, &mut out).then_some(out)
    }

    /// Copy `data` to octet `offset` of a region or bound window (the
    /// owner's view; no access-right check). `false` if it does not fit.
    pub fn write_at(&mut self, stag: STag, offset: usize, data: &[u8]) -> bool {
        let Some((index, lo, hi)) = self.span(stag) else {
            return false;
        };
        match offset.checked_add(data.len()) {
            Some(end) if end <= hi - lo => {}
            _ => return false,
        }
        match self.obj_at_mut(index) {
            Some(Object::Region(r)) => r.buf.write_at(lo + offset, data),
            _ => false,
        }
    }

    /// Region index and octet range `lo..hi` in its memory that `stag` covers.
    fn span(&self, stag: STag) -> Option<(u32, usize, usize)> {
        match self.object(stag)? {
            Object::Region(r) => Some((self.slot_of(stag), 0, r.buf.len())),
            Object::Window(_) => {
                let (_, b) = self.resolve(self.slot_of(stag))?;
                Some((b.mr_index, b.offset as usize, (b.offset + b.len) as usize))
            }
        }
    }

    /// Validate an access of `len` octets at tagged offset `to` through `stag`
    /// by a stream in `pd` needing `need`. Checks in RFC 5041 §7.1 order:
    /// STag valid, associated (PD), rights, TO wrap, bounds. Through a
    /// window, rights and bounds are the window's. A region always grants
    /// [`Access::LOCAL_READ`] (verbs semantics: local read is implicit);
    /// local write and the remote rights must have been registered.
    pub fn check(
        &self,
        stag: STag,
        pd: PdId,
        need: Access,
        to: u64,
        len: u64,
    ) -> Result<Range, AccessError> {
        let via = self.slot_of(stag);
        let Some(own) = self.slots.get(via as usize) else {
            return Err(AccessError::InvalidStag);
        };
        if via == 0 || own.key != stag.key() {
            return Err(AccessError::InvalidStag);
        }
        let (slot, gen, obj_pd, access, base_to, size, first) = match own.obj.as_ref() {
            Some(Object::Region(r)) => {
                if !r.valid || !self.words.alive(via, own.gen) {
                    return Err(AccessError::InvalidStag);
                }
                (
                    via,
                    own.gen,
                    r.pd,
                    r.access | Access::LOCAL_READ,
                    r.base_to,
                    r.len as u64,
                    0,
                )
            }
            Some(Object::Window(w)) => {
                let (_, b) = self.resolve(via).ok_or(AccessError::InvalidStag)?;
                let gen = self.slots[b.mr_index as usize].gen;
                (b.mr_index, gen, w.pd, b.access, b.base_to, b.len, b.offset)
            }
            None => return Err(AccessError::InvalidStag),
        };
        if obj_pd != pd {
            return Err(AccessError::PdMismatch);
        }
        if !access.contains(need) {
            return Err(AccessError::Access);
        }
        let end = to.checked_add(len).ok_or(AccessError::ToWrap)?;
        let limit = base_to + size; // cannot overflow: checked at register (and bind)
        if to < base_to || end > limit {
            return Err(AccessError::Bounds);
        }
        Ok(Range {
            slot,
            gen,
            via,
            via_gen: own.gen,
            offset: (first + (to - base_to)) as usize,
            len: len as usize,
        })
    }

    /// [`check`](Self::check) and [`write`](Self::write) in one step:
    /// `data` placed at tagged offset `to` of `stag`, with the same checks
    /// in the same order and the same errors as `check` (RFC 5041 §7.1
    /// tagged checks 1-5); nothing is written unless all pass. A region
    /// named directly takes one table lookup (the receive fast path's
    /// whole RDMA Write FPDU); a window goes through `check`.
    pub fn place(
        &mut self,
        stag: STag,
        pd: PdId,
        need: Access,
        to: u64,
        data: &[u8],
    ) -> Result<(), AccessError> {
        let index = self.slot_of(stag);
        let Some(slot) = self.slots.get_mut(index as usize) else {
            return Err(AccessError::InvalidStag);
        };
        if index == 0 || slot.key != stag.key() {
            return Err(AccessError::InvalidStag);
        }
        let gen = slot.gen;
        match slot.obj.as_mut() {
            Some(Object::Region(r)) => {
                if !r.valid || !self.words.alive(index, gen) {
                    return Err(AccessError::InvalidStag);
                }
                if r.pd != pd {
                    return Err(AccessError::PdMismatch);
                }
                if !(r.access | Access::LOCAL_READ).contains(need) {
                    return Err(AccessError::Access);
                }
                let end = to
                    .checked_add(data.len() as u64)
                    .ok_or(AccessError::ToWrap)?;
                // Cannot overflow: checked at register.
                if to < r.base_to || end > r.base_to + r.len as u64 {
                    return Err(AccessError::Bounds);
                }
                if r.buf.write_at((to - r.base_to) as usize, data) {
                    Ok(())
                } else {
                    Err(AccessError::Bounds)
                }
            }
            Some(Object::Window(_)) => {
                let range = self.check(stag, pd, need, to, data.len() as u64)?;
                if self.write(&range, 0, data) {
                    Ok(())
                } else {
                    Err(AccessError::Bounds)
                }
            }
            None => Err(AccessError::InvalidStag),
        }
    }

    /// Whether `range` still grants what it granted when
    /// [`check`](Self::check) returned it: neither its region nor the
    /// window it came through has been deregistered, invalidated, unbound,
    /// rebound or replaced since.
    pub fn is_live(&self, range: &Range) -> bool {
        range.slot != 0
            && self.words.alive(range.slot, range.gen)
            && (range.via == range.slot || self.words.alive(range.via, range.via_gen))
    }

    /// Write `data` at `offset` within a range from [`check`](Self::check).
    /// Refuses (returns false) anything that would leave the range or the
    /// region, and any range that is no longer [live](Self::is_live).
    pub fn write(&mut self, range: &Range, offset: usize, data: &[u8]) -> bool {
        let Some(end) = offset.checked_add(data.len()) else {
            return false;
        };
        if end > range.len || !self.is_live(range) {
            return false;
        }
        let Some(Object::Region(r)) = self.obj_at_mut(range.slot) else {
            return false;
        };
        r.buf.write_at(range.offset + offset, data)
    }

    /// `len` octets at `offset` within a range from [`check`](Self::check),
    /// as a source to copy from (`None` if that leaves the range, or the
    /// range is no longer [live](Self::is_live)).
    pub fn read(&self, range: &Range, offset: usize, len: usize) -> Option<RegionSlice<'_>> {
        let end = offset.checked_add(len)?;
        if end > range.len || !self.is_live(range) {
            return None;
        }
        let Some(Object::Region(r)) = self.slots.get(range.slot as usize)?.obj.as_ref() else {
            return None;
        };
        let start = range.offset + offset;
        if start.checked_add(len)? > r.len {
            return None;
        }
        Some(RegionSlice {
            mem: &*r.buf,
            offset: start,
            len,
        })
    }

    fn pd_exists(&self, pd: PdId) -> bool {
        self.pds.get(pd.0 as usize).copied().unwrap_or(false)
    }

    fn alloc_slot(&mut self, obj: Object) -> Result<STag, MemError> {
        let index = match self.free.pop() {
            Some(i) => i,
            None => {
                let i = self.slots.len() as u32;
                if i > MAX_INDEX {
                    return Err(MemError::TableFull);
                }
                // A new slot starts from a drawn key too.
                let key = splitmix64(&mut self.rng) as u8;
                self.slots.push(Slot {
                    key,
                    ..Slot::default()
                });
                self.words.ensure(i);
                i
            }
        };
        // A reused index gets a new key, so stale STags stop matching
        // (drawn, so that the next one is hard to guess: RFC 5040 §8.1.1
        // item 8), and a new generation, so ranges checked against the old
        // object die.
        let key = self.next_key(self.slots[index as usize].key);
        let slot = &mut self.slots[index as usize];
        slot.key = key;
        slot.obj = Some(obj);
        self.bump(index);
        Ok(self.stag_at(index, key))
    }

    /// Drop the binding of the window at `index`, if any.
    fn unbind(&mut self, index: u32) {
        let Some(Object::Window(w)) = self.obj_at_mut(index) else {
            return;
        };
        let Some(b) = w.binding.take() else { return };
        self.bump(index);
        // Deregistration waits for `windows` to reach 0, so the region is still there.
        if let Some(Object::Region(r)) = self.obj_at_mut(b.mr_index) {
            r.windows = r.windows.saturating_sub(1);
        }
    }

    /// The region the window at slot `index` is bound to, while both are
    /// usable.
    fn resolve(&self, index: u32) -> Option<(&Region, Binding)> {
        let Some(Object::Window(w)) = self.slots.get(index as usize)?.obj.as_ref() else {
            return None;
        };
        let b = w.binding?;
        if !self.alive(index) {
            return None;
        }
        let slot = self.slots.get(b.mr_index as usize)?;
        match slot.obj.as_ref()? {
            Object::Region(r) if r.valid && slot.key == b.mr_key && self.alive(b.mr_index) => {
                Some((r, b))
            }
            _ => None,
        }
    }

    fn slot_ref(&self, stag: STag) -> Option<&Slot> {
        let index = self.slot_of(stag);
        let s = self.slots.get(index as usize)?;
        (index != 0 && s.key == stag.key() && s.obj.is_some()).then_some(s)
    }

    fn slot_mut(&mut self, stag: STag) -> Option<&mut Slot> {
        let index = self.slot_of(stag);
        let s = self.slots.get_mut(index as usize)?;
        (index != 0 && s.key == stag.key() && s.obj.is_some()).then_some(s)
    }

    fn object(&self, stag: STag) -> Option<&Object> {
        let index = self.slot_of(stag);
        let s = self.slots.get(index as usize)?;
        if index == 0 || s.key != stag.key() {
            return None;
        }
        s.obj.as_ref()
    }

    /// The table slot an STag's index names.
    fn slot_of(&self, stag: STag) -> u32 {
        self.map.unscramble(stag.index())
    }

    /// The STag of table slot `index` under `key`.
    fn stag_at(&self, index: u32, key: u8) -> STag {
        STag::new(self.map.scramble(index), key)
    }

    /// A fresh consumer key, different from `old`.
    fn next_key(&mut self, old: u8) -> u8 {
        loop {
            let k = splitmix64(&mut self.rng) as u8;
            if k != old {
                return k;
            }
        }
    }

    fn obj_at_mut(&mut self, index: u32) -> Option<&mut Object> {
        if index == 0 {
            return None;
        }
        self.slots.get_mut(index as usize)?.obj.as_mut()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stag_layout() {
        let s = STag::new(0x12_3456, 0x78);
        assert_eq!(s.0, 0x1234_5678);
        assert_eq!((s.index(), s.key()), (0x12_3456, 0x78));
    }

    #[test]
    fn checks_in_order() {
        let mut m = MemoryTable::new();
        let pd = m.alloc_pd();
        let other = m.alloc_pd();
        let s = m
            .register(pd, vec![0; 100], Access::REMOTE_WRITE, 1000)
            .unwrap();
        assert!(m.check(s, pd, Access::REMOTE_WRITE, 1000, 100).is_ok());
        assert_eq!(
            m.check(STag(s.0 ^ 1), pd, Access::REMOTE_WRITE, 1000, 1),
            Err(AccessError::InvalidStag)
        );
        assert_eq!(
            m.check(STag(0), pd, Access::REMOTE_WRITE, 1000, 1),
            Err(AccessError::InvalidStag)
        );
        assert_eq!(
            m.check(s, other, Access::REMOTE_WRITE, 1000, 1),
            Err(AccessError::PdMismatch)
        );
        assert_eq!(
            m.check(s, pd, Access::REMOTE_READ, 1000, 1),
            Err(AccessError::Access)
        );
        assert_eq!(
            m.check(s, pd, Access::REMOTE_WRITE, u64::MAX, 2),
            Err(AccessError::ToWrap)
        );
        assert_eq!(
            m.check(s, pd, Access::REMOTE_WRITE, 999, 1),
            Err(AccessError::Bounds)
        );
        assert_eq!(
            m.check(s, pd, Access::REMOTE_WRITE, 1000, 101),
            Err(AccessError::Bounds)
        );
        assert_eq!(
            m.check(s, pd, Access::REMOTE_WRITE, 1100, 0)
                .map(|r| r.offset),
            Ok(100)
        );
        m.invalidate(s).unwrap();
        assert_eq!(
            m.check(s, pd, Access::REMOTE_WRITE, 1000, 1),
            Err(AccessError::InvalidStag)
        );
        let s2 = m.revalidate(s, 0x42).unwrap();
        assert_eq!(s2.key(), 0x42);
        assert!(m.check(s2, pd, Access::REMOTE_WRITE, 1000, 1).is_ok());
        assert_eq!(
            m.check(s, pd, Access::REMOTE_WRITE, 1000, 1),
            Err(AccessError::InvalidStag)
        );
    }

    #[test]
    fn writes_stay_inside_the_range() {
        let mut m = MemoryTable::new();
        let pd = m.alloc_pd();
        let s = m.register(pd, vec![0; 16], Access::ALL, 0).unwrap();
        let r = m.check(s, pd, Access::REMOTE_WRITE, 4, 8).unwrap();
        assert!(m.write(&r, 0, &[1; 8]));
        assert!(!m.write(&r, 1, &[2; 8]));
        assert!(!m.write(&r, usize::MAX, &[2; 2]));
        assert_eq!(
            m.snapshot(s).unwrap(),
            &[0, 0, 0, 0, 1, 1, 1, 1, 1, 1, 1, 1, 0, 0, 0, 0]
        );
        let mut two = [9u8; 2];
        assert!(m.read(&r, 6, 2).expect("inside").copy_to(0, &mut two));
        assert_eq!(two, [1, 1]);
        assert!(m.read(&r, 7, 2).is_none());
        let slice = m.read(&r, 0, 8).expect("inside");
        assert!(!slice.copy_to(7, &mut two), "leaves the slice");
    }

    #[test]
    fn reuse_changes_key_and_pd_lifecycle() {
        let mut m = MemoryTable::new();
        let pd = m.alloc_pd();
        let s = m.register(pd, vec![0; 4], Access::ALL, 0).unwrap();
        assert_eq!(m.dealloc_pd(pd), Err(MemError::PdBusy));
        assert_eq!(m.deregister(s).unwrap().len(), 4);
        let s2 = m.register(pd, vec![0; 4], Access::ALL, 0).unwrap();
        assert_eq!(s2.index(), s.index());
        assert_ne!(s2, s);
        assert!(!m.is_valid(s));
        assert_eq!(
            m.register(pd, vec![0; 4], Access::ALL, u64::MAX),
            Err(MemError::TooLarge)
        );
        m.deregister(s2).unwrap();
        m.dealloc_pd(pd).unwrap();
        assert_eq!(
            m.register(pd, vec![], Access::ALL, 0),
            Err(MemError::NoSuchPd)
        );
    }

    #[test]
    fn remote_invalidate_rules() {
        let mut m = MemoryTable::new();
        let pd = m.alloc_pd();
        let other = m.alloc_pd();
        let s = m.register(pd, vec![0; 4], Access::ALL, 0).unwrap();
        assert_eq!(m.invalidate_remote(s, other), Err(AccessError::PdMismatch));
        assert_eq!(m.invalidate_remote(s, pd), Ok(()));
        assert_eq!(m.invalidate_remote(s, pd), Err(AccessError::InvalidStag));
        assert_eq!(
            m.invalidate_remote(STag(0x999), pd),
            Err(AccessError::InvalidStag)
        );
    }

    /// A range dies with the access it was checked under: deregistration,
    /// invalidation, window unbind/rebind, and reuse of the slot.
    #[test]
    fn ranges_die_when_their_access_is_revoked() {
        let mut m = MemoryTable::new();
        let pd = m.alloc_pd();
        let other = m.alloc_pd();
        let s = m.register(pd, vec![0; 16], Access::ALL, 0).unwrap();
        let r = m.check(s, pd, Access::REMOTE_WRITE, 0, 16).unwrap();
        assert!(m.is_live(&r) && m.write(&r, 0, &[1; 4]));
        m.deregister(s).unwrap();
        // The slot is reused by a region of another PD without remote rights.
        let s2 = m
            .register(other, vec![0; 16], Access::LOCAL_WRITE, 0)
            .unwrap();
        assert_eq!(s2.index(), s.index());
        assert!(!m.is_live(&r));
        assert!(!m.write(&r, 4, &[2; 4]));
        assert!(m.read(&r, 0, 4).is_none());
        assert_eq!(m.snapshot(s2).unwrap(), vec![0; 16]);

        let r2 = m.check(s2, other, Access::LOCAL_WRITE, 0, 16).unwrap();
        m.invalidate(s2).unwrap();
        let s3 = m.revalidate(s2, 7).unwrap();
        assert!(
            !m.write(&r2, 0, &[3]),
            "invalidated, even if revalidated since"
        );
        assert!(m.write(
            &m.check(s3, other, Access::LOCAL_WRITE, 0, 1).unwrap(),
            0,
            &[3]
        ));

        let (mut m, pd, mr, mw) = window_setup();
        let w = m.bind_mw(mw, mr, 0, 10, Access::REMOTE_WRITE).unwrap();
        let r = m.check(w, pd, Access::REMOTE_WRITE, 1000, 10).unwrap();
        let w2 = m.bind_mw(w, mr, 0, 10, Access::REMOTE_WRITE).unwrap();
        assert!(
            !m.write(&r, 0, &[9]),
            "rebinding revokes the old binding's ranges"
        );
        let r = m.check(w2, pd, Access::REMOTE_WRITE, 1000, 10).unwrap();
        m.invalidate(w2).unwrap();
        assert!(!m.write(&r, 0, &[9]));
        let w3 = m.bind_mw(w2, mr, 0, 10, Access::REMOTE_WRITE).unwrap();
        let r = m.check(w3, pd, Access::REMOTE_WRITE, 1000, 10).unwrap();
        m.invalidate(mr).unwrap();
        assert!(!m.write(&r, 0, &[9]), "the region under the window went");
        assert!(!m.is_live(&Range::EMPTY));
    }

    /// RFC 5040 §8.1.1 item 7: a peer may invalidate only what was enabled
    /// for remote access.
    #[test]
    fn remote_invalidate_needs_remote_rights() {
        let mut m = MemoryTable::new();
        let pd = m.alloc_pd();
        let local = m
            .register(pd, vec![0; 4], Access::LOCAL_READ | Access::LOCAL_WRITE, 0)
            .unwrap();
        assert_eq!(m.invalidate_remote(local, pd), Err(AccessError::Access));
        assert!(m.is_valid(local));
        let rr = m.register(pd, vec![0; 4], Access::REMOTE_READ, 0).unwrap();
        assert_eq!(m.invalidate_remote(rr, pd), Ok(()));
        let mr = m
            .register(pd, vec![0; 4], Access::LOCAL_WRITE | Access::MW_BIND, 0)
            .unwrap();
        let mw = m.alloc_mw(pd).unwrap();
        let none = m.bind_mw(mw, mr, 0, 4, Access(0)).unwrap();
        assert_eq!(m.invalidate_remote(none, pd), Err(AccessError::Access));
        assert!(m.is_valid(none));
        // The region under a window has no remote rights of its own.
        assert_eq!(m.invalidate_remote(mr, pd), Err(AccessError::Access));
        let w = m.bind_mw(none, mr, 0, 4, Access::REMOTE_WRITE).unwrap();
        assert_eq!(m.invalidate_remote(w, pd), Ok(()));
    }

    /// RFC 5040 §8.1.1 item 8: STags depend on the table's seed, spread over
    /// the index range, and the key changes on every reuse of a slot.
    #[test]
    fn stags_depend_on_the_seed() {
        let first = |seed| {
            let mut m = MemoryTable::with_seed(seed);
            let pd = m.alloc_pd();
            m.register(pd, vec![0; 4], Access::ALL, 0).unwrap()
        };
        assert_ne!(first(1), first(2));
        assert_eq!(first(1), first(1), "deterministic for a given seed");
        assert_ne!(first(1).0, 0x101);
        let mut m = MemoryTable::new();
        let pd = m.alloc_pd();
        let s = m.register(pd, vec![0; 4], Access::ALL, 0).unwrap();
        assert_ne!(s, STag(0x101), "the default seed too");
        let mut m = MemoryTable::with_seed(7);
        let pd = m.alloc_pd();
        let stags: Vec<STag> = (0..64)
            .map(|_| m.register(pd, vec![0; 1], Access::ALL, 0).unwrap())
            .collect();
        // Not consecutive: indices are spread over the 24-bit range.
        assert!(stags
            .windows(2)
            .all(|w| w[1].index().abs_diff(w[0].index()) > 1));
        assert!(stags.iter().any(|s| s.index() > 1 << 20));
        // Reuse: same slot, same index, a key not seen just before.
        let s = stags[10];
        m.deregister(s).unwrap();
        let s2 = m.register(pd, vec![0; 1], Access::ALL, 0).unwrap();
        assert_eq!(s2.index(), s.index());
        assert_ne!(s2.key(), s.key());
        assert!(!m.is_valid(s) && m.is_valid(s2));
    }

    proptest::proptest! {
        /// The index permutation is a bijection of the 24-bit values that
        /// keeps 0 at 0.
        #[test]
        fn index_map_is_a_bijection(seed in proptest::prelude::any::<u64>(), x in 0u32..1 << 24) {
            let map = IndexMap::new(&mut seed.clone());
            proptest::prop_assert_eq!(map.unscramble(map.scramble(x)), x);
            proptest::prop_assert_eq!(map.scramble(map.unscramble(x)), x);
            proptest::prop_assert!(map.scramble(x) <= MAX_INDEX);
            proptest::prop_assert_eq!(map.scramble(0), 0);
        }
    }

    fn window_setup() -> (MemoryTable, PdId, STag, STag) {
        let mut m = MemoryTable::new();
        let pd = m.alloc_pd();
        let mr = m
            .register(
                pd,
                (0..100).collect::<Vec<u8>>(),
                Access::LOCAL_WRITE | Access::MW_BIND,
                1000,
            )
            .unwrap();
        let mw = m.alloc_mw(pd).unwrap();
        (m, pd, mr, mw)
    }

    #[test]
    fn window_is_invalid_until_bound() {
        let (m, pd, _, mw) = window_setup();
        assert!(m.is_window(mw));
        assert!(!m.is_valid(mw));
        assert_eq!(m.snapshot(mw), None);
        assert_eq!(m.base_to(mw), None);
        assert_eq!(
            m.check(mw, pd, Access::REMOTE_READ, 0, 0),
            Err(AccessError::InvalidStag)
        );
    }

    #[test]
    fn local_read_is_implicit_on_regions() {
        // Verbs semantics (ibv_reg_mr): every registered region may be a
        // local source; local write and remote rights must be asked for.
        let (mut m, pd, _, mw) = window_setup();
        let rr = Access::REMOTE_READ;
        for access in [Access(0), Access::LOCAL_WRITE, Access::REMOTE_WRITE] {
            let s = m.register(pd, vec![1; 8], access, 0).unwrap();
            assert!(
                m.check(s, pd, Access::LOCAL_READ, 0, 8).is_ok(),
                "{access:?}"
            );
            assert_eq!(m.place(s, pd, Access::LOCAL_READ, 0, &[2]), Ok(()));
            assert_eq!(
                m.check(s, pd, rr, 0, 1),
                Err(AccessError::Access),
                "{access:?}"
            );
        }
        let none = m.register(pd, vec![0; 8], Access(0), 0).unwrap();
        let other = m.alloc_pd();
        assert_eq!(
            m.check(none, pd, Access::LOCAL_WRITE, 0, 1),
            Err(AccessError::Access)
        );
        assert_eq!(
            m.check(none, other, Access::LOCAL_READ, 0, 1),
            Err(AccessError::PdMismatch)
        );
        // A window grants only what it was bound with: never local read.
        let region = m.register(pd, vec![0; 8], Access::ALL, 0).unwrap();
        let mw = m.bind_mw(mw, region, 0, 8, rr).unwrap();
        assert!(m.check(mw, pd, rr, 0, 8).is_ok());
        assert_eq!(
            m.check(mw, pd, Access::LOCAL_READ, 0, 1),
            Err(AccessError::Access)
        );
    }

    #[test]
    fn bind_checks() {
        let (mut m, pd, mr, mw) = window_setup();
        let rr = Access::REMOTE_READ;
        let other = m.alloc_pd();
        let foreign_mw = m.alloc_mw(other).unwrap();
        let no_bind = m.register(
            pd,
            vec![0; 10],
            Access(Access::ALL.0 & !Access::MW_BIND.0),
            0,
        );
        let no_bind = no_bind.unwrap();
        let read_only = m
            .register(pd, vec![0; 10], Access::LOCAL_READ | Access::MW_BIND, 0)
            .unwrap();
        assert_eq!(m.bind_mw(mr, mr, 0, 1, rr), Err(MemError::NotAWindow));
        assert_eq!(m.bind_mw(mw, mw, 0, 1, rr), Err(MemError::NotARegion));
        assert_eq!(
            m.bind_mw(STag(mw.0 ^ 1), mr, 0, 1, rr),
            Err(MemError::NoSuchStag)
        );
        assert_eq!(
            m.bind_mw(mw, STag(mr.0 ^ 1), 0, 1, rr),
            Err(MemError::NoSuchStag)
        );
        assert_eq!(
            m.bind_mw(foreign_mw, mr, 0, 1, rr),
            Err(MemError::PdMismatch)
        );
        assert_eq!(m.bind_mw(mw, no_bind, 0, 1, rr), Err(MemError::NoBindRight));
        assert_eq!(
            m.bind_mw(mw, mr, 0, 1, rr | Access::LOCAL_READ),
            Err(MemError::BadWindowAccess)
        );
        assert_eq!(
            m.bind_mw(mw, read_only, 0, 1, Access::REMOTE_WRITE),
            Err(MemError::NeedsLocalWrite)
        );
        let mw = m.bind_mw(mw, read_only, 0, 1, rr).unwrap();
        assert_eq!(m.bind_mw(mw, mr, 90, 11, rr), Err(MemError::OutOfRange));
        assert_eq!(
            m.bind_mw(mw, mr, u64::MAX, 2, rr),
            Err(MemError::OutOfRange)
        );
        assert_eq!(m.bind_mw(mw, mr, 101, 0, rr), Err(MemError::OutOfRange));
        let mw = m.bind_mw(mw, mr, 100, 0, rr).unwrap();
        m.invalidate(mr).unwrap();
        assert_eq!(m.bind_mw(mw, mr, 0, 1, rr), Err(MemError::RegionInvalid));
        // The window onto the invalidated region stops resolving.
        assert!(!m.is_valid(mw));
    }

    #[test]
    fn window_restricts_range_and_rights() {
        let (mut m, pd, mr, mw) = window_setup();
        let other = m.alloc_pd();
        let w = m.bind_mw(mw, mr, 10, 20, Access::REMOTE_WRITE).unwrap();
        assert_eq!(w.index(), mw.index());
        assert_ne!(w, mw);
        assert_eq!(m.base_to(w), Some(1010));
        assert_eq!(m.len(w), Some(20));
        assert_eq!(m.snapshot(w).unwrap()[0], 10);
        let r = m.check(w, pd, Access::REMOTE_WRITE, 1010, 20).unwrap();
        assert_eq!((r.offset, r.len), (10, 20));
        assert!(m.write(&r, 0, &[0xee; 20]));
        assert!(!m.write(&r, 1, &[0xee; 20]));
        let all = m.snapshot(mr).unwrap();
        assert!(all[10..30].iter().all(|b| *b == 0xee));
        assert_eq!((all[9], all[30]), (9, 30));
        assert_eq!(
            m.check(w, pd, Access::REMOTE_WRITE, 1009, 1),
            Err(AccessError::Bounds)
        );
        assert_eq!(
            m.check(w, pd, Access::REMOTE_WRITE, 1029, 2),
            Err(AccessError::Bounds)
        );
        assert_eq!(
            m.check(w, pd, Access::REMOTE_READ, 1010, 1),
            Err(AccessError::Access)
        );
        // A window is never a local key.
        assert_eq!(
            m.check(w, pd, Access::LOCAL_WRITE, 1010, 1),
            Err(AccessError::Access)
        );
        assert_eq!(
            m.check(w, other, Access::REMOTE_WRITE, 1010, 1),
            Err(AccessError::PdMismatch)
        );
        assert_eq!(
            m.check(w, pd, Access::REMOTE_WRITE, u64::MAX, 2),
            Err(AccessError::ToWrap)
        );
        // The region itself has no remote rights.
        assert_eq!(
            m.check(mr, pd, Access::REMOTE_WRITE, 1010, 1),
            Err(AccessError::Access)
        );
    }

    #[test]
    fn window_invalidation_rebind_and_lifecycle() {
        let (mut m, pd, mr, mw) = window_setup();
        let other = m.alloc_pd();
        let rr = Access::REMOTE_READ;
        let w1 = m.bind_mw(mw, mr, 0, 10, rr).unwrap();
        // Deregistration waits for the window.
        assert_eq!(m.deregister(mr).err(), Some(MemError::RegionHasWindows));
        assert_eq!(m.deregister(w1).err(), Some(MemError::NotARegion));
        assert_eq!(m.revalidate(w1, 7), Err(MemError::NotARegion));
        // Rebinding rotates the key: the old STag stops working.
        let w2 = m.bind_mw(w1, mr, 5, 10, rr).unwrap();
        assert_ne!(w2.key(), w1.key());
        assert_eq!(m.check(w1, pd, rr, 0, 1), Err(AccessError::InvalidStag));
        assert!(m.check(w2, pd, rr, 1005, 10).is_ok());
        assert_eq!(m.deregister(mr).err(), Some(MemError::RegionHasWindows));
        // Remote invalidation: same rules and codes as for a region.
        assert_eq!(m.invalidate_remote(w2, other), Err(AccessError::PdMismatch));
        assert_eq!(m.invalidate_remote(w2, pd), Ok(()));
        assert_eq!(m.invalidate_remote(w2, pd), Err(AccessError::InvalidStag));
        assert_eq!(m.check(w2, pd, rr, 1005, 1), Err(AccessError::InvalidStag));
        // Unbound, the region can go; a new bind needs a region again.
        let w3 = m.bind_mw(w2, mr, 0, 1, rr).unwrap();
        m.invalidate(w3).unwrap();
        assert!(!m.is_valid(w3));
        assert_eq!(m.check(w3, pd, rr, 1000, 1), Err(AccessError::InvalidStag));
        let w4 = m.bind_mw(w3, mr, 0, 1, rr).unwrap();
        assert_eq!(m.dealloc_pd(pd), Err(MemError::PdBusy));
        m.dealloc_mw(w4).unwrap();
        assert_eq!(m.dealloc_mw(w4), Err(MemError::NoSuchStag));
        assert!(!m.is_valid(w4));
        assert_eq!(m.dealloc_mw(mr), Err(MemError::NotAWindow));
        m.deregister(mr).unwrap();
        m.dealloc_pd(pd).unwrap();
        assert_eq!(m.alloc_mw(pd), Err(MemError::NoSuchPd));
    }

    #[test]
    fn region_revalidated_under_a_new_key_does_not_revive_windows() {
        let (mut m, pd, mr, mw) = window_setup();
        let w = m.bind_mw(mw, mr, 0, 10, Access::REMOTE_READ).unwrap();
        m.invalidate(mr).unwrap();
        let mr2 = m.revalidate(mr, mr.key().wrapping_add(9)).unwrap();
        assert!(m.check(mr2, pd, Access::LOCAL_WRITE, 1000, 1).is_ok());
        assert_eq!(
            m.check(w, pd, Access::REMOTE_READ, 1000, 1),
            Err(AccessError::InvalidStag)
        );
        // Still counted as bound until the window lets go.
        assert_eq!(m.deregister(mr2).err(), Some(MemError::RegionHasWindows));
        m.invalidate(w).unwrap();
        assert!(m.deregister(mr2).is_ok());
    }

    proptest::proptest! {
        /// Through a window, an access succeeds exactly when it lies inside the
        /// window, and then names the same octets as the region at that TO.
        #[test]
        fn window_check_matches_a_model(
            base in 0u64..1 << 40,
            size in 1usize..300,
            off in 0u64..300,
            len in 0u64..300,
            to_delta in 0u64..700,
            alen in 0u64..300,
        ) {
            let mut m = MemoryTable::new();
            let pd = m.alloc_pd();
            let mr = m.register(pd, vec![0; size], Access::ALL, base).unwrap();
            let mw = m.alloc_mw(pd).unwrap();
            let bound = m.bind_mw(mw, mr, off, len, Access::REMOTE_READ);
            if off + len > size as u64 {
                proptest::prop_assert_eq!(bound, Err(MemError::OutOfRange));
                return Ok(());
            }
            let w = bound.unwrap();
            let to = (base + off).saturating_sub(200) + to_delta;
            let got = m.check(w, pd, Access::REMOTE_READ, to, alen);
            let inside = to >= base + off && to + alen <= base + off + len;
            if inside {
                let r = got.unwrap();
                let via_mr = m.check(mr, pd, Access::REMOTE_READ, to, alen).unwrap();
                proptest::prop_assert_eq!((r.slot, r.offset, r.len), (via_mr.slot, via_mr.offset, via_mr.len));
            } else {
                proptest::prop_assert_eq!(got, Err(AccessError::Bounds));
            }
        }
    }

    /// `place` is `check` then `write`: the same verdict for every STag,
    /// offset, length, right and PD, through regions and windows, and the
    /// same octets written when both succeed (nothing when they fail).
    #[test]
    fn place_is_check_then_write() {
        let build = || {
            let mut t = MemoryTable::new();
            let pd = t.alloc_pd();
            let other = t.alloc_pd();
            let mr = t
                .register(
                    pd,
                    vec![0u8; 96],
                    Access::REMOTE_WRITE | Access::LOCAL_WRITE,
                    0x1000,
                )
                .unwrap();
            let ro = t
                .register(pd, vec![0u8; 32], Access::REMOTE_READ, 0)
                .unwrap();
            let foreign = t.register(other, vec![0u8; 32], Access::ALL, 0).unwrap();
            let local = t
                .register(pd, vec![0u8; 32], Access::LOCAL_WRITE | Access::MW_BIND, 0)
                .unwrap();
            let mw = t.alloc_mw(pd).unwrap();
            let w = t.bind_mw(mw, local, 8, 16, Access::REMOTE_WRITE).unwrap();
            let gone = t.register(pd, vec![0u8; 32], Access::ALL, 0).unwrap();
            t.invalidate(gone).unwrap();
            (
                t,
                pd,
                [mr, ro, foreign, local, w, gone, STag(mr.0 ^ 1), STag(0)],
            )
        };
        let (_, pd, stags) = build();
        let data: Vec<u8> = (1..=40).collect();
        let tos = [
            0,
            7,
            8,
            0x1000,
            0x1001,
            0x1000 + 60,
            0x1000 + 96,
            u64::MAX - 3,
        ];
        for (i, &stag) in stags.iter().enumerate() {
            for &to in &tos {
                for len in [1usize, 4, 16, 17, 40] {
                    for need in [Access::REMOTE_WRITE, Access::REMOTE_READ] {
                        let (mut a, _, _) = build();
                        let (mut b, _, _) = build();
                        let want = a.check(stag, pd, need, to, len as u64).map(|r| {
                            assert!(a.write(&r, 0, &data[..len]));
                        });
                        let got = b.place(stag, pd, need, to, &data[..len]);
                        assert_eq!(got, want, "stag {i} to {to:#x} len {len} {need:?}");
                        for s in &stags[..6] {
                            assert_eq!(a.snapshot(*s), b.snapshot(*s), "stag {i} to {to:#x}");
                        }
                    }
                }
            }
        }
    }

    /// Run `op` on every replica in order; all must return the same.
    fn on_all<T: PartialEq + core::fmt::Debug>(
        reps: &mut [MemoryTable],
        mut op: impl FnMut(&mut MemoryTable) -> T,
    ) -> T {
        let mut results: Vec<T> = reps.iter_mut().map(&mut op).collect();
        let first = results.remove(0);
        for r in &results {
            assert_eq!(r, &first, "replicas disagree");
        }
        first
    }

    #[test]
    fn replicas_agree_on_every_control_operation() {
        let mut reps = MemoryTable::replicas(42, 3);
        let rw = Access::REMOTE_WRITE | Access::LOCAL_WRITE | Access::MW_BIND;
        let pd = on_all(&mut reps, |m| m.alloc_pd());
        let mr = on_all(&mut reps, |m| m.register(pd, vec![0; 64], rw, 0));
        let mr = mr.unwrap();
        let mw = on_all(&mut reps, |m| m.alloc_mw(pd)).unwrap();
        let w = on_all(&mut reps, |m| m.bind_mw(mw, mr, 8, 8, Access::REMOTE_WRITE)).unwrap();
        for m in &reps {
            assert!(m.check(w, pd, Access::REMOTE_WRITE, 8, 8).is_ok());
            assert!(m.check(mr, pd, Access::REMOTE_WRITE, 0, 64).is_ok());
        }
        on_all(&mut reps, |m| m.invalidate(mr)).unwrap();
        let mr2 = on_all(&mut reps, |m| m.revalidate(mr, 9)).unwrap();
        assert_eq!(
            on_all(&mut reps, |m| m.deregister(mr2).err()),
            Some(MemError::RegionHasWindows)
        );
        on_all(&mut reps, |m| m.dealloc_mw(w)).unwrap();
        on_all(&mut reps, |m| m.deregister(mr2).map(drop)).unwrap();
        on_all(&mut reps, |m| m.dealloc_pd(pd)).unwrap();
        // The same seed alone makes a table that agrees too.
        let mut lone = MemoryTable::with_seed(42);
        let pd = lone.alloc_pd();
        assert_eq!(lone.register(pd, vec![0; 64], rw, 0), Ok(mr));
    }

    #[test]
    fn a_remote_invalidation_on_one_replica_refuses_the_stag_on_every_one() {
        let mut reps = MemoryTable::replicas(7, 2);
        let rw = Access::REMOTE_WRITE | Access::LOCAL_WRITE;
        let pd = on_all(&mut reps, |m| m.alloc_pd());
        let mr = on_all(&mut reps, |m| m.register(pd, vec![0; 64], rw, 0)).unwrap();
        let (r0, r1) = reps.split_at_mut(1);
        let (r0, r1) = (&mut r0[0], &mut r1[0]);
        let range = r0.check(mr, pd, Access::REMOTE_WRITE, 0, 8).unwrap();
        assert!(r0.is_live(&range));
        assert_eq!(r1.invalidate_remote(mr, pd), Ok(()));
        // Nothing ran on r0 since, and it refuses the STag everywhere.
        assert!(!r0.is_live(&range));
        assert!(!r0.write(&range, 0, &[1]));
        assert_eq!(
            r0.check(mr, pd, Access::REMOTE_WRITE, 0, 8),
            Err(AccessError::InvalidStag)
        );
        assert_eq!(
            r0.place(mr, pd, Access::REMOTE_WRITE, 0, &[1]),
            Err(AccessError::InvalidStag)
        );
        assert!(!r0.is_valid(mr) && !r1.is_valid(mr));
        // Killed once, on any replica.
        assert_eq!(r0.invalidate_remote(mr, pd), Err(AccessError::InvalidStag));
        assert_eq!(r1.invalidate_remote(mr, pd), Err(AccessError::InvalidStag));
        // Made valid again under a new key, on both.
        let mr2 = on_all(&mut reps, |m| m.revalidate(mr, 3)).unwrap();
        for m in &reps {
            assert!(m.check(mr2, pd, Access::REMOTE_WRITE, 0, 8).is_ok());
        }
    }

    #[test]
    fn a_kill_between_the_leader_and_the_others_does_not_split_their_decision() {
        let mut reps = MemoryTable::replicas(11, 2);
        let bind = Access::REMOTE_WRITE | Access::LOCAL_WRITE | Access::MW_BIND;
        let pd = on_all(&mut reps, |m| m.alloc_pd());
        let mr = on_all(&mut reps, |m| m.register(pd, vec![0; 64], bind, 0)).unwrap();
        let mut windows = Vec::new();
        for at in [0, 16] {
            let mw = on_all(&mut reps, |m| m.alloc_mw(pd)).unwrap();
            let w = on_all(&mut reps, |m| {
                m.bind_mw(mw, mr, at, 8, Access::REMOTE_WRITE)
            });
            windows.push(w.unwrap());
        }
        let [w1, w2] = windows[..] else {
            unreachable!()
        };
        assert_eq!(reps[1].invalidate_remote(w1, pd), Ok(()));
        // The leader folds in w1's kill: w2 is still bound.
        assert_eq!(
            reps[0].deregister(mr).err(),
            Some(MemError::RegionHasWindows)
        );
        // w2 is killed before the other replica runs the same operation:
        // it decides as the leader did (only w1 folded in), not on what it
        // could see now.
        assert_eq!(reps[1].invalidate_remote(w2, pd), Ok(()));
        assert_eq!(
            reps[1].deregister(mr).err(),
            Some(MemError::RegionHasWindows)
        );
        // The next operation's leader folds w2's kill in, for both.
        on_all(&mut reps, |m| m.deregister(mr).map(drop)).unwrap();
        for m in &reps {
            assert!(!m.is_valid(w1) && !m.is_valid(w2) && !m.is_valid(mr));
        }
    }

    #[test]
    fn an_operation_in_flight_grants_nothing_early_and_revokes_at_once() {
        let mut reps = MemoryTable::replicas(5, 2);
        let bind = Access::REMOTE_WRITE | Access::LOCAL_WRITE | Access::MW_BIND;
        let pd = on_all(&mut reps, |m| m.alloc_pd());
        let mr = on_all(&mut reps, |m| m.register(pd, vec![0; 64], bind, 0)).unwrap();
        let mw = on_all(&mut reps, |m| m.alloc_mw(pd)).unwrap();
        let w = on_all(&mut reps, |m| m.bind_mw(mw, mr, 0, 8, Access::REMOTE_WRITE)).unwrap();
        // Replica 0 invalidates the region: replica 1, which has not run it
        // yet, refuses the region and the window onto it already.
        reps[0].invalidate(mr).unwrap();
        assert_eq!(
            reps[1].check(mr, pd, Access::REMOTE_WRITE, 0, 1),
            Err(AccessError::InvalidStag)
        );
        assert_eq!(
            reps[1].check(w, pd, Access::REMOTE_WRITE, 0, 1),
            Err(AccessError::InvalidStag)
        );
        // Running an operation again before every replica ran it is out
        // of step.
        assert_eq!(reps[0].alloc_mw(pd), Err(MemError::OutOfStep));
        reps[1].invalidate(mr).unwrap();
        // Made valid on replica 0 only: replica 1 does not grant it yet.
        let mr2 = reps[0].revalidate(mr, 1).unwrap();
        assert!(reps[0].check(mr2, pd, Access::REMOTE_WRITE, 0, 1).is_ok());
        assert_eq!(
            reps[1].check(mr2, pd, Access::REMOTE_WRITE, 0, 1),
            Err(AccessError::InvalidStag)
        );
        assert_eq!(reps[1].revalidate(mr, 1), Ok(mr2));
        assert!(reps[1].check(mr2, pd, Access::REMOTE_WRITE, 0, 1).is_ok());
        // Killed on replica 0 before replica 1 made it valid: replica 1
        // catching up does not revive it.
        on_all(&mut reps, |m| m.invalidate(mr2)).unwrap();
        let mr3 = reps[0].revalidate(mr2, 2).unwrap();
        assert_eq!(reps[0].invalidate_remote(mr3, pd), Ok(()));
        assert_eq!(reps[1].revalidate(mr2, 2), Ok(mr3));
        for m in &reps {
            assert_eq!(
                m.check(mr3, pd, Access::REMOTE_WRITE, 0, 1),
                Err(AccessError::InvalidStag)
            );
        }
    }

    #[test]
    fn a_locally_invalidated_region_takes_no_remote_invalidation() {
        let mut m = MemoryTable::new();
        let pd = m.alloc_pd();
        let s = m
            .register(pd, vec![0; 16], Access::REMOTE_WRITE, 0)
            .unwrap();
        m.invalidate(s).unwrap();
        assert_eq!(m.invalidate_remote(s, pd), Err(AccessError::InvalidStag));
    }

    #[test]
    fn a_placement_may_end_on_the_last_octet_and_not_past_it() {
        let mut m = MemoryTable::new();
        let pd = m.alloc_pd();
        let rw = Access::REMOTE_WRITE | Access::LOCAL_WRITE;
        let s = m.register(pd, vec![0; 16], rw, 100).unwrap();
        assert_eq!(m.place(s, pd, rw, 108, &[1; 8]), Ok(()));
        assert_eq!(m.place(s, pd, rw, 109, &[1; 8]), Err(AccessError::Bounds));
        assert_eq!(m.snapshot(s).unwrap()[8..], [1; 8]);
    }

    #[test]
    fn state_words_grow_with_the_table_on_every_replica() {
        // Past one chunk of words (1024 slots): the later slots' words are
        // the same on every replica.
        let mut reps = MemoryTable::replicas(9, 2);
        let rw = Access::REMOTE_WRITE | Access::LOCAL_WRITE;
        let pd = on_all(&mut reps, |m| m.alloc_pd());
        let stags: Vec<STag> = (0..2100)
            .map(|_| on_all(&mut reps, |m| m.register(pd, vec![0; 8], rw, 0)).unwrap())
            .collect();
        for &s in &stags[2040..] {
            assert_eq!(reps[1].invalidate_remote(s, pd), Ok(()));
        }
        for m in &reps {
            for (i, &s) in stags.iter().enumerate() {
                assert_eq!(m.check(s, pd, rw, 0, 8).is_ok(), i < 2040, "slot {i}");
            }
            // Words for 2101 slots (slot 0 included): three chunks, no more.
            assert_eq!(m.words.chunks(), 3);
        }
    }

    #[test]
    fn a_kill_on_one_thread_stops_placement_on_another_once_seen() {
        use std::sync::atomic::{AtomicBool, Ordering};
        use std::sync::Arc;
        let mut reps = MemoryTable::replicas(3, 2);
        let rw = Access::REMOTE_WRITE | Access::LOCAL_WRITE;
        let pd = on_all(&mut reps, |m| m.alloc_pd());
        let mr = on_all(&mut reps, |m| m.register(pd, vec![0; 64], rw, 0)).unwrap();
        let mut r1 = reps.pop().unwrap();
        let mut r0 = reps.pop().unwrap();
        let done = Arc::new(AtomicBool::new(false));
        let seen = done.clone();
        let placer = std::thread::spawn(move || {
            let mut placed = 0u64;
            loop {
                // Read the flag first: once it says the kill returned,
                // the placement after it must be refused.
                let after_kill = seen.load(Ordering::Acquire);
                let ok = r0.place(mr, pd, Access::REMOTE_WRITE, 0, &[1]).is_ok();
                if after_kill {
                    return (placed, ok);
                }
                placed += u64::from(ok);
            }
        });
        // Let the placer run a while (bounded).
        let start = std::time::Instant::now();
        while start.elapsed() < std::time::Duration::from_millis(20) {
            std::thread::yield_now();
        }
        assert_eq!(r1.invalidate_remote(mr, pd), Ok(()));
        done.store(true, Ordering::Release);
        let (placed, after) = placer.join().unwrap();
        assert!(!after, "placed after the kill was seen");
        assert!(placed > 0, "the placer never ran before the kill");
    }
}
