//! Shared memory: regions (a sealed memfd, mapped shared) and views of the
//! memif rings and buffers in them. Every offset the peer gives (a ring's
//! place, a descriptor's region, offset and length) is checked against
//! the mapped region before it is used, so a peer cannot make us touch
//! memory outside what it shared; what it writes into that memory is data
//! (a corrupt ring index breaks the link, a bad descriptor drops a frame).

use std::io;
use std::os::fd::{AsFd, OwnedFd};
use std::ptr::NonNull;
use std::sync::atomic::{AtomicU16, Ordering};

use rustix::fs::{MemfdFlags, SealFlags};
use rustix::mm::{MapFlags, ProtFlags};

/// `MEMIF_COOKIE`, the first word of every ring.
pub const COOKIE: u32 = 0x03E3_1F20;
/// `MEMIF_RING_FLAG_MASK_INT`: the receiver polls; the sender need not
/// signal the ring's eventfd.
pub const RING_MASK_INT: u16 = 1;
/// `MEMIF_DESC_FLAG_NEXT`: the frame continues in the next slot.
pub const DESC_NEXT: u16 = 1;

// memif_ring_t with 64-octet cache lines (x86_64, aarch64 builds of DPDK
// and libmemif): cookie, flags and head on line 0, tail on line 1, the
// descriptors from line 2.
const FLAGS: usize = 4;
const HEAD: usize = 6;
const TAIL: usize = 64;
/// Octets of a ring before its descriptors.
pub const RING_HDR: usize = 128;
/// Octets of one descriptor (`memif_desc_t`).
pub const DESC_LEN: usize = 16;

/// Octets of a ring of `2^log2` slots.
pub fn ring_bytes(log2: u8) -> usize {
    RING_HDR + DESC_LEN * (1usize << log2)
}

/// A shared-memory region, mapped read-write and shared.
#[derive(Debug)]
pub struct Region {
    ptr: NonNull<u8>,
    len: usize,
    fd: OwnedFd,
}

// SAFETY: the mapping is plain shared memory owned by this value (unmapped
// in Drop); nothing in it is tied to a thread. Access goes through the
// views below, whose users keep to memif's ownership rule (a slot belongs
// to the producer or the consumer, handed over by release/acquire on the
// ring's indices).
unsafe impl Send for Region {}

impl Region {
    /// A new zeroed region of `len` octets: a memfd sealed against
    /// shrinking and growing (so the peer's mapping can never fault), mapped
    /// shared.
    pub fn create(name: &str, len: usize) -> io::Result<Region> {
        let fd = rustix::fs::memfd_create(name, MemfdFlags::CLOEXEC | MemfdFlags::ALLOW_SEALING)?;
        rustix::fs::ftruncate(&fd, len as u64)?;
        rustix::fs::fcntl_add_seals(&fd, SealFlags::SHRINK | SealFlags::GROW | SealFlags::SEAL)?;
        Self::map_fd(fd, len)
    }

    /// Map a region the peer sent (`size` as its ADD_REGION says). Refused
    /// unless the file is at least `size` long and sealed against
    /// shrinking (else the peer could truncate it under our mapping, and a
    /// read would fault).
    pub fn map(fd: OwnedFd, size: u64) -> io::Result<Region> {
        let len =
            usize::try_from(size).map_err(|_| invalid("region larger than the address space"))?;
        if len == 0 {
            return Err(invalid("an empty region"));
        }
        let st = rustix::fs::fstat(&fd)?;
        if (st.st_size as u64) < size {
            return Err(invalid("a region shorter than announced"));
        }
        let seals = rustix::fs::fcntl_get_seals(&fd)
            .map_err(|_| invalid("a region that is not a sealable memfd"))?;
        if !seals.contains(SealFlags::SHRINK) {
            return Err(invalid(
                "a region not sealed against shrinking (F_SEAL_SHRINK)",
            ));
        }
        Self::map_fd(fd, len)
    }

    fn map_fd(fd: OwnedFd, len: usize) -> io::Result<Region> {
        // SAFETY: a new mapping (no address asked for) of `len` octets of a
        // file at least that long and sealed against shrinking, so every
        // page stays backed; it aliases no Rust object. POPULATE: every
        // page allocated and mapped now, so that no frame pays a page
        // fault on its buffer's first use (on this VM a fault cost a
        // latency sample about 4 µs; without it a write_lat run's first
        // ring's worth of frames made 0.5% of its samples; bench/README.md).
        let p = unsafe {
            rustix::mm::mmap(
                std::ptr::null_mut(),
                len,
                ProtFlags::READ | ProtFlags::WRITE,
                MapFlags::SHARED | MapFlags::POPULATE,
                fd.as_fd(),
                0,
            )?
        };
        let ptr =
            NonNull::new(p.cast::<u8>()).ok_or_else(|| invalid("mmap gave a null mapping"))?;
        Ok(Region { ptr, len, fd })
    }

    /// A second mapping of the same memory, of its own (a duplicate of
    /// the memfd, mapped anew): each queue pair of a link maps the regions
    /// itself, so that each queue's device owns everything it points
    /// into and moves to its own thread alone.
    pub fn remap(&self) -> io::Result<Region> {
        let fd = rustix::io::fcntl_dupfd_cloexec(&self.fd, 0)?;
        Self::map_fd(fd, self.len)
    }

    /// Its memfd (sent to the peer with ADD_REGION).
    pub fn fd(&self) -> &OwnedFd {
        &self.fd
    }

    /// `len` octets at `off`, or `None` if they are not all inside.
    pub fn range(&self, off: usize, len: usize) -> Option<NonNull<u8>> {
        if off.checked_add(len)? > self.len {
            return None;
        }
        // SAFETY: off + len <= self.len, so the pointer stays in (or one
        // past the end of) the mapping.
        Some(unsafe { self.ptr.add(off) })
    }
}

impl Drop for Region {
    fn drop(&mut self) {
        // SAFETY: the mapping made in map_fd, of this length; views of it
        // (Ring, buffers) live in the device that owns this region and go
        // with it.
        let _ = unsafe { rustix::mm::munmap(self.ptr.as_ptr().cast(), self.len) };
    }
}

fn invalid(what: &'static str) -> io::Error {
    io::Error::new(io::ErrorKind::InvalidData, what)
}

/// One descriptor, as read from or written to a ring.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Desc {
    /// [`DESC_NEXT`] or 0.
    pub flags: u16,
    /// Region of the buffer.
    pub region: u16,
    /// Octets in the buffer (the frame's, or the buffer's room when lent
    /// empty).
    pub length: u32,
    /// Where the buffer starts in its region.
    pub offset: u32,
}

/// A view of one memif ring inside a mapped region (which must outlive
/// it: both live in the device).
#[derive(Debug)]
pub struct Ring {
    base: NonNull<u8>,
    /// Slots - 1.
    mask: u16,
}

// SAFETY: a pointer into a Region that the same owner holds (see Region's
// Send); the ring's shared words are accessed atomically.
unsafe impl Send for Ring {}

impl Ring {
    /// The ring of `2^log2` slots at `offset` in `region`: refused unless
    /// it lies wholly inside and is 16-aligned (so its words are aligned).
    pub fn at(region: &Region, offset: usize, log2: u8) -> io::Result<Ring> {
        if !(1..=15).contains(&log2) {
            return Err(invalid("a ring size outside 2^1..2^15"));
        }
        if !offset.is_multiple_of(16) {
            return Err(invalid("a ring not aligned to 16 octets"));
        }
        let base = region
            .range(offset, ring_bytes(log2))
            .ok_or_else(|| invalid("a ring outside its region"))?;
        Ok(Ring {
            base,
            mask: ((1u32 << log2) - 1) as u16,
        })
    }

    /// Its slots.
    pub fn size(&self) -> u16 {
        self.mask.wrapping_add(1)
    }

    /// The slot index of a free-running counter.
    pub fn slot(&self, i: u16) -> usize {
        usize::from(i & self.mask)
    }

    fn word(&self, at: usize) -> &AtomicU16 {
        // SAFETY: `at` is FLAGS, HEAD or TAIL, inside the ring's header
        // (checked in `at`), 2-aligned (the base is 16-aligned); the word
        // is only ever accessed atomically (or volatile, by a C peer), and
        // the reference lives no longer than &self, which the region
        // outlives.
        unsafe { &*self.base.as_ptr().add(at).cast::<AtomicU16>() }
    }

    /// The ring's `flags` word.
    pub fn flags(&self) -> &AtomicU16 {
        self.word(FLAGS)
    }

    /// The ring's `head` index.
    pub fn head(&self) -> &AtomicU16 {
        self.word(HEAD)
    }

    /// The ring's `tail` index.
    pub fn tail(&self) -> &AtomicU16 {
        self.word(TAIL)
    }

    /// Its cookie.
    pub fn cookie(&self) -> u32 {
        // SAFETY: offset 0 of the ring's header (inside, checked in `at`),
        // 4-aligned; a volatile read of a word a peer may write.
        unsafe { std::ptr::read_volatile(self.base.as_ptr().cast::<u32>()) }
    }

    /// Write the header of a new ring (the client's job): cookie, flags,
    /// head and tail 0.
    pub fn init(&self, flags: u16) {
        // SAFETY: as in `cookie`.
        unsafe { std::ptr::write_volatile(self.base.as_ptr().cast::<u32>(), COOKIE) };
        self.flags().store(flags, Ordering::Relaxed);
        self.head().store(0, Ordering::Relaxed);
        self.tail().store(0, Ordering::Release);
    }

    fn desc_ptr(&self, i: u16) -> *mut u8 {
        // SAFETY: slot(i) < size, so the descriptor lies inside the ring
        // (checked in `at`).
        unsafe { self.base.as_ptr().add(RING_HDR + DESC_LEN * self.slot(i)) }
    }

    /// Read descriptor `i` (mod size).
    pub fn desc(&self, i: u16) -> Desc {
        let p = self.desc_ptr(i);
        // SAFETY: four aligned fields inside the descriptor (16-aligned);
        // volatile, as the peer may write the slot (a peer breaking the
        // protocol gives us garbage values, which the caller checks).
        unsafe {
            Desc {
                flags: std::ptr::read_volatile(p.cast::<u16>()),
                region: std::ptr::read_volatile(p.add(2).cast::<u16>()),
                length: std::ptr::read_volatile(p.add(4).cast::<u32>()),
                offset: std::ptr::read_volatile(p.add(8).cast::<u32>()),
            }
        }
    }

    /// Write descriptor `i` (mod size); `metadata` is left 0.
    pub fn set_desc(&self, i: u16, d: Desc) {
        let p = self.desc_ptr(i);
        // SAFETY: as in `desc`.
        unsafe {
            std::ptr::write_volatile(p.cast::<u16>(), d.flags);
            std::ptr::write_volatile(p.add(2).cast::<u16>(), d.region);
            std::ptr::write_volatile(p.add(4).cast::<u32>(), d.length);
            std::ptr::write_volatile(p.add(8).cast::<u32>(), d.offset);
            std::ptr::write_volatile(p.add(12).cast::<u32>(), 0);
        }
    }

    /// Set only descriptor `i`'s length and flags (a frame written into
    /// the buffer the descriptor already names).
    pub fn set_len(&self, i: u16, length: u32, flags: u16) {
        let p = self.desc_ptr(i);
        // SAFETY: as in `desc`.
        unsafe {
            std::ptr::write_volatile(p.cast::<u16>(), flags);
            std::ptr::write_volatile(p.add(4).cast::<u32>(), length);
        }
    }
}

/// A buffer a descriptor names, checked against the regions: its start
/// and length, or `None` if the region does not exist or the buffer does
/// not lie wholly inside it.
pub fn buffer(regions: &[Region], region: u16, offset: u32, len: u32) -> Option<NonNull<u8>> {
    regions
        .get(usize::from(region))?
        .range(offset as usize, len as usize)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_ring_header_is_laid_out_as_memif_ring_t() {
        let r = Region::create("t", 4096).unwrap();
        let ring = Ring::at(&r, 0, 4).unwrap();
        ring.init(RING_MASK_INT);
        ring.head().store(0x1234, Ordering::Relaxed);
        ring.tail().store(0x5678, Ordering::Relaxed);
        ring.set_desc(
            1,
            Desc {
                flags: DESC_NEXT,
                region: 2,
                length: 60,
                offset: 0x1000,
            },
        );
        // The same memory through a second, independent mapping.
        let fd = r.fd().try_clone().unwrap();
        let other = Region::map(fd, 4096).unwrap();
        let bytes = |off: usize, n: usize| -> Vec<u8> {
            let p = other.range(off, n).unwrap();
            (0..n)
                // SAFETY: inside the test's own mapping, checked by range.
                .map(|i| unsafe { std::ptr::read_volatile(p.as_ptr().add(i)) })
                .collect()
        };
        assert_eq!(bytes(0, 8), [0x20, 0x1F, 0xE3, 0x03, 1, 0, 0x34, 0x12]);
        assert_eq!(bytes(64, 2), [0x78, 0x56]);
        assert_eq!(
            bytes(128 + 16, 16),
            [1, 0, 2, 0, 60, 0, 0, 0, 0, 0x10, 0, 0, 0, 0, 0, 0]
        );
        assert_eq!(ring_bytes(4), 128 + 16 * 16);
    }

    #[test]
    fn rings_and_buffers_outside_the_region_are_refused() {
        let r = Region::create("t", 4096).unwrap();
        assert!(Ring::at(&r, 4096 - 128, 4).is_err());
        assert!(Ring::at(&r, 8, 2).is_err(), "unaligned");
        assert!(Ring::at(&r, 0, 0).is_err());
        assert!(Ring::at(&r, 4096 - ring_bytes(2), 2).is_ok());
        let regions = [r];
        assert!(buffer(&regions, 0, 4000, 96).is_some());
        assert!(buffer(&regions, 0, 4000, 97).is_none());
        assert!(buffer(&regions, 0, u32::MAX, u32::MAX).is_none());
        assert!(buffer(&regions, 1, 0, 1).is_none());
    }

    #[test]
    fn an_unsealed_or_short_region_is_refused() {
        let fd =
            rustix::fs::memfd_create("t", MemfdFlags::CLOEXEC | MemfdFlags::ALLOW_SEALING).unwrap();
        rustix::fs::ftruncate(&fd, 4096).unwrap();
        let e = Region::map(fd.try_clone().unwrap(), 4096).unwrap_err();
        assert!(e.to_string().contains("F_SEAL_SHRINK"), "{e}");
        rustix::fs::fcntl_add_seals(&fd, SealFlags::SHRINK).unwrap();
        let e = Region::map(fd.try_clone().unwrap(), 8192).unwrap_err();
        assert!(e.to_string().contains("shorter"), "{e}");
        assert!(Region::map(fd, 4096).is_ok());
    }
}
