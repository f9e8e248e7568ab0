//! Protection domains, memory registration and STag checks (RFC 5040 §8,
//! RFC 5041 §8.2-§8.3).
//!
//! An STag is a 24-bit index into the region table plus an 8-bit consumer key
//! (`index << 8 | key`). A region belongs to one protection domain; a stream
//! (QP) may only touch regions of its own PD — an STag of another PD is "not
//! associated with this stream". Regions own their memory in this crate (it
//! has no `unsafe`): callers hand a buffer over at registration and read or
//! write it through [`MemoryTable::bytes`] / [`MemoryTable::bytes_mut`]. A
//! backend crate with pinned user memory can replace the buffer type later.
//!
//! Every placement goes through [`MemoryTable::check`], which validates STag,
//! PD, access rights, TO wrap and bounds with checked arithmetic, so a write
//! can only ever land inside a registered region.

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

/// Access rights of a region.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Access(pub u8);

impl Access {
    /// Local read (source of Send / RDMA Write).
    pub const LOCAL_READ: Access = Access(1);
    /// Local write (receive buffer, RDMA Read sink).
    pub const LOCAL_WRITE: Access = Access(2);
    /// Remote read (source of an inbound RDMA Read).
    pub const REMOTE_READ: Access = Access(4);
    /// Remote write (target of an inbound RDMA Write).
    pub const REMOTE_WRITE: Access = Access(8);
    /// All rights.
    pub const ALL: Access = Access(15);

    /// Whether all of `other`'s rights are present.
    pub const fn contains(self, other: Access) -> bool {
        self.0 & other.0 == other.0
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
    /// No such region, key mismatch, or region invalidated.
    InvalidStag,
    /// The region belongs to another protection domain.
    PdMismatch,
    /// The region lacks the needed right.
    Access,
    /// TO + length overflows 64 bits.
    ToWrap,
    /// The range is outside the region.
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

/// Errors of the registration API.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum MemError {
    /// Unknown protection domain.
    NoSuchPd,
    /// The PD still has regions.
    PdBusy,
    /// The table is full (2^24 - 1 regions).
    TableFull,
    /// Unknown STag (index/key).
    NoSuchStag,
    /// base TO + length overflows.
    TooLarge,
}

impl core::fmt::Display for MemError {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.write_str(match self {
            MemError::NoSuchPd => "no such protection domain",
            MemError::PdBusy => "protection domain still has registered regions",
            MemError::TableFull => "memory region table is full",
            MemError::NoSuchStag => "no such STag",
            MemError::TooLarge => "base tagged offset plus length overflows",
        })
    }
}

impl std::error::Error for MemError {}

#[derive(Debug)]
struct Region {
    pd: PdId,
    access: Access,
    base_to: u64,
    buf: Vec<u8>,
    valid: bool,
}

#[derive(Debug, Default)]
struct Slot {
    key: u8,
    region: Option<Region>,
}

/// A validated range inside a region, returned by [`MemoryTable::check`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Range {
    slot: u32,
    /// Offset from the region's first octet.
    pub offset: usize,
    /// Length.
    pub len: usize,
}

/// The region table of one device (shared by all its QPs).
#[derive(Debug, Default)]
pub struct MemoryTable {
    pds: Vec<bool>,
    /// Slot 0 is never used, so no valid STag has index 0.
    slots: Vec<Slot>,
    free: Vec<u32>,
}

const MAX_INDEX: u32 = (1 << 24) - 1;

impl MemoryTable {
    /// An empty table.
    pub fn new() -> Self {
        MemoryTable {
            pds: Vec::new(),
            slots: vec![Slot::default()],
            free: Vec::new(),
        }
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

    /// Free a protection domain that has no regions.
    pub fn dealloc_pd(&mut self, pd: PdId) -> Result<(), MemError> {
        if !self.pds.get(pd.0 as usize).copied().unwrap_or(false) {
            return Err(MemError::NoSuchPd);
        }
        if self
            .slots
            .iter()
            .any(|s| s.region.as_ref().is_some_and(|r| r.pd == pd))
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
        buf: Vec<u8>,
        access: Access,
        base_to: u64,
    ) -> Result<STag, MemError> {
        if !self.pds.get(pd.0 as usize).copied().unwrap_or(false) {
            return Err(MemError::NoSuchPd);
        }
        if base_to.checked_add(buf.len() as u64).is_none() {
            return Err(MemError::TooLarge);
        }
        let index = match self.free.pop() {
            Some(i) => i,
            None => {
                let i = self.slots.len() as u32;
                if i > MAX_INDEX {
                    return Err(MemError::TableFull);
                }
                self.slots.push(Slot::default());
                i
            }
        };
        let slot = &mut self.slots[index as usize];
        // A reused index gets a new key, so stale STags stop matching.
        slot.key = slot.key.wrapping_add(1);
        slot.region = Some(Region {
            pd,
            access,
            base_to,
            buf,
            valid: true,
        });
        Ok(STag::new(index, slot.key))
    }

    /// Deregister and hand the buffer back.
    pub fn deregister(&mut self, stag: STag) -> Result<Vec<u8>, MemError> {
        let slot = self.slot_mut(stag).ok_or(MemError::NoSuchStag)?;
        let r = slot.region.take().ok_or(MemError::NoSuchStag)?;
        self.free.push(stag.index());
        Ok(r.buf)
    }

    /// Local invalidate: the STag stops working for remote and local access.
    pub fn invalidate(&mut self, stag: STag) -> Result<(), MemError> {
        let r = self.region_mut(stag).ok_or(MemError::NoSuchStag)?;
        r.valid = false;
        Ok(())
    }

    /// Remote invalidate (Send with Invalidate, RFC 5040 §5.3): only a valid
    /// STag of the stream's own PD can be invalidated.
    pub fn invalidate_remote(&mut self, stag: STag, pd: PdId) -> Result<(), AccessError> {
        let r = self.region_mut(stag).ok_or(AccessError::InvalidStag)?;
        if !r.valid {
            return Err(AccessError::InvalidStag);
        }
        if r.pd != pd {
            return Err(AccessError::PdMismatch);
        }
        r.valid = false;
        Ok(())
    }

    /// Make an invalidated region valid again under a new consumer key
    /// (as a fast-register would); returns the new STag.
    pub fn revalidate(&mut self, stag: STag, key: u8) -> Result<STag, MemError> {
        let index = stag.index();
        let slot = self.slot_mut(stag).ok_or(MemError::NoSuchStag)?;
        let r = slot.region.as_mut().ok_or(MemError::NoSuchStag)?;
        r.valid = true;
        slot.key = key;
        Ok(STag::new(index, key))
    }

    /// Whether `stag` names a registered, valid region.
    pub fn is_valid(&self, stag: STag) -> bool {
        self.region(stag).is_some_and(|r| r.valid)
    }

    /// Length of the region.
    pub fn len(&self, stag: STag) -> Option<usize> {
        self.region(stag).map(|r| r.buf.len())
    }

    /// The region's memory (the owner's view; no access-right check).
    pub fn bytes(&self, stag: STag) -> Option<&[u8]> {
        self.region(stag).map(|r| &r.buf[..])
    }

    /// The region's memory, writable (the owner's view).
    pub fn bytes_mut(&mut self, stag: STag) -> Option<&mut [u8]> {
        self.region_mut(stag).map(|r| &mut r.buf[..])
    }

    /// Validate an access of `len` octets at tagged offset `to` through `stag`
    /// by a stream in `pd` needing `need`. Checks in RFC 5041 §7.1 order:
    /// STag valid, associated (PD), rights, TO wrap, bounds.
    pub fn check(
        &self,
        stag: STag,
        pd: PdId,
        need: Access,
        to: u64,
        len: u64,
    ) -> Result<Range, AccessError> {
        let r = self.region(stag).ok_or(AccessError::InvalidStag)?;
        if !r.valid {
            return Err(AccessError::InvalidStag);
        }
        if r.pd != pd {
            return Err(AccessError::PdMismatch);
        }
        if !r.access.contains(need) {
            return Err(AccessError::Access);
        }
        let end = to.checked_add(len).ok_or(AccessError::ToWrap)?;
        let region_end = r.base_to + r.buf.len() as u64; // cannot overflow: checked at register
        if to < r.base_to || end > region_end {
            return Err(AccessError::Bounds);
        }
        Ok(Range {
            slot: stag.index(),
            offset: (to - r.base_to) as usize,
            len: len as usize,
        })
    }

    /// Write `data` at `offset` within a range from [`check`](Self::check).
    /// Refuses (returns false) anything that would leave the range or the region.
    pub fn write(&mut self, range: &Range, offset: usize, data: &[u8]) -> bool {
        let Some(end) = offset.checked_add(data.len()) else {
            return false;
        };
        if end > range.len {
            return false;
        }
        let Some(r) = self
            .slots
            .get_mut(range.slot as usize)
            .and_then(|s| s.region.as_mut())
        else {
            return false;
        };
        let start = range.offset + offset;
        match r.buf.get_mut(start..start + data.len()) {
            Some(dst) => {
                dst.copy_from_slice(data);
                true
            }
            None => false,
        }
    }

    /// Read `len` octets at `offset` within a range from [`check`](Self::check).
    pub fn read(&self, range: &Range, offset: usize, len: usize) -> Option<&[u8]> {
        let end = offset.checked_add(len)?;
        if end > range.len {
            return None;
        }
        let r = self.slots.get(range.slot as usize)?.region.as_ref()?;
        let start = range.offset + offset;
        r.buf.get(start..start + len)
    }

    fn slot_mut(&mut self, stag: STag) -> Option<&mut Slot> {
        let s = self.slots.get_mut(stag.index() as usize)?;
        (stag.index() != 0 && s.key == stag.key() && s.region.is_some()).then_some(s)
    }

    fn region(&self, stag: STag) -> Option<&Region> {
        let s = self.slots.get(stag.index() as usize)?;
        if stag.index() == 0 || s.key != stag.key() {
            return None;
        }
        s.region.as_ref()
    }

    fn region_mut(&mut self, stag: STag) -> Option<&mut Region> {
        self.slot_mut(stag)?.region.as_mut()
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
            m.bytes(s).unwrap(),
            &[0, 0, 0, 0, 1, 1, 1, 1, 1, 1, 1, 1, 0, 0, 0, 0]
        );
        assert_eq!(m.read(&r, 6, 2), Some(&[1u8, 1][..]));
        assert_eq!(m.read(&r, 7, 2), None);
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
}
