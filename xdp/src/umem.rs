//! The UMEM: one anonymous mapping cut into equal frames, which the kernel
//! and the socket pass back and forth by address through the rings.

use std::ptr::NonNull;

use crate::error::Error;

/// The frame memory of an AF_XDP socket. Registration with the kernel
/// (`XDP_UMEM_REG`) happens when an [`XskSocket`](crate::XskSocket) takes it.
#[derive(Debug)]
pub struct Umem {
    ptr: NonNull<u8>,
    len: usize,
    frame_size: u32,
    frame_count: u32,
    huge: bool,
}

// SAFETY: Umem owns its mapping exclusively; nothing about it is tied to the
// thread that created it, and all access goes through &self/&mut self.
unsafe impl Send for Umem {}

impl Umem {
    /// Map `frame_count × frame_size` octets (page aligned, zeroed).
    /// `frame_size` must be 2048 or 4096. With `hugepages`, try
    /// `MAP_HUGETLB` first and fall back to normal pages.
    pub fn new(frame_count: u32, frame_size: u32, hugepages: bool) -> Result<Umem, Error> {
        if frame_size != 2048 && frame_size != 4096 {
            return Err(Error::InvalidConfig {
                reason: "frame_size must be 2048 or 4096",
            });
        }
        if frame_count == 0 {
            return Err(Error::InvalidConfig {
                reason: "frame_count must not be 0",
            });
        }
        let len = frame_count as usize * frame_size as usize;
        let map = |extra: libc::c_int| {
            // SAFETY: an anonymous private mapping at an address of the
            // kernel's choosing touches no existing memory.
            let p = unsafe {
                libc::mmap(
                    std::ptr::null_mut(),
                    len,
                    libc::PROT_READ | libc::PROT_WRITE,
                    libc::MAP_PRIVATE | libc::MAP_ANONYMOUS | libc::MAP_POPULATE | extra,
                    -1,
                    0,
                )
            };
            if p == libc::MAP_FAILED {
                Err(crate::sys::errno())
            } else {
                Ok(p)
            }
        };
        let (p, huge) = match hugepages.then(|| map(libc::MAP_HUGETLB)) {
            Some(Ok(p)) => (p, true),
            _ => (
                map(0).map_err(|e| Error::sys("mmap of the UMEM", e))?,
                false,
            ),
        };
        let ptr = NonNull::new(p as *mut u8).ok_or(Error::Sys {
            op: "mmap of the UMEM",
            errno: libc::ENOMEM,
        })?;
        Ok(Umem {
            ptr,
            len,
            frame_size,
            frame_count,
            huge,
        })
    }

    /// Total size in octets.
    pub fn len(&self) -> usize {
        self.len
    }

    /// Always false (a UMEM has at least one frame).
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Frame size.
    pub fn frame_size(&self) -> u32 {
        self.frame_size
    }

    /// Number of frames.
    pub fn frame_count(&self) -> u32 {
        self.frame_count
    }

    /// Whether the mapping got huge pages.
    pub fn hugepages(&self) -> bool {
        self.huge
    }

    pub(crate) fn base(&self) -> *mut u8 {
        self.ptr.as_ptr()
    }

    /// The start of the frame holding UMEM address `addr`.
    pub(crate) fn frame_base(&self, addr: u64) -> u64 {
        addr & !(self.frame_size as u64 - 1)
    }

    /// Whether `len` octets at `addr` lie inside one frame.
    pub(crate) fn in_frame(&self, addr: u64, len: usize) -> bool {
        let base = self.frame_base(addr);
        (addr as usize) < self.len && (addr - base) as usize + len <= self.frame_size as usize
    }

    /// The octets at `addr..addr+len`, which must be inside one frame owned
    /// by the caller (received, not yet returned to the fill ring).
    pub(crate) fn slice(&self, addr: u64, len: usize) -> Option<&[u8]> {
        if !self.in_frame(addr, len) {
            return None;
        }
        // SAFETY: the range is inside the mapping (checked above). The frame
        // belongs to us until we put it on the fill ring, so the kernel does
        // not write it while the shared borrow (tied to &self) lives.
        Some(unsafe { std::slice::from_raw_parts(self.base().add(addr as usize), len) })
    }

    /// The octets at `addr..addr+len`, writable, inside one frame the
    /// caller owns and the kernel does not (free for TX: on no ring), for a
    /// frame built in place.
    pub(crate) fn slice_mut(&mut self, addr: u64, len: usize) -> Option<&mut [u8]> {
        if !self.in_frame(addr, len) {
            return None;
        }
        // SAFETY: the range is inside the mapping (checked above). The frame
        // is on none of the rings, so the kernel neither reads nor writes it
        // until we put its descriptor on the TX ring, which the caller does
        // only after this borrow ends; the borrow is tied to &mut self, so
        // no other Rust reference to the UMEM aliases it meanwhile.
        Some(unsafe { std::slice::from_raw_parts_mut(self.base().add(addr as usize), len) })
    }

    /// [`slice_mut`](Self::slice_mut) over several frames at once, for a
    /// multi-buffer frame built in place: each `(addr, len)` inside its own
    /// frame, no two in the same frame, all owned by the caller and on no
    /// ring. `None` if a span leaves its frame or two share one.
    pub(crate) fn slices_mut(&mut self, spans: &[(u64, usize)]) -> Option<Vec<&mut [u8]>> {
        for (i, &(a, l)) in spans.iter().enumerate() {
            if !self.in_frame(a, l)
                || spans[..i]
                    .iter()
                    .any(|&(b, _)| self.frame_base(b) == self.frame_base(a))
            {
                return None;
            }
        }
        let base = self.base();
        Some(
            spans
                .iter()
                // SAFETY: each range is inside the mapping and inside one
                // frame (checked above), and no two ranges share a frame,
                // so the slices do not overlap one another. The frames are
                // on none of the rings, so the kernel neither reads nor
                // writes them until the caller puts their descriptors on the
                // TX ring, which it does only after these borrows end; the
                // borrows are tied to &mut self, so no other Rust reference
                // to the UMEM aliases them meanwhile (as in `slice_mut`).
                .map(|&(a, l)| unsafe { std::slice::from_raw_parts_mut(base.add(a as usize), l) })
                .collect(),
        )
    }

    /// Copy `data` into the frame at `addr` (a frame we own: free for TX).
    pub(crate) fn write(&mut self, addr: u64, data: &[u8]) -> bool {
        if !self.in_frame(addr, data.len()) {
            return false;
        }
        // SAFETY: the destination range is inside the mapping (checked) and
        // in a frame the kernel does not own now, so nothing else accesses
        // it; `data` is a separate Rust slice, so they do not overlap.
        unsafe {
            std::ptr::copy_nonoverlapping(data.as_ptr(), self.base().add(addr as usize), data.len())
        };
        true
    }
}

impl Drop for Umem {
    fn drop(&mut self) {
        // SAFETY: `ptr`/`len` are exactly the mapping made in `new`, unmapped
        // once. No slices outlive `self`. If the kernel still has the UMEM
        // registered it holds its own page references, so unmapping is safe
        // for it too.
        unsafe {
            libc::munmap(self.ptr.as_ptr() as *mut libc::c_void, self.len);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn frames_and_bounds() {
        let mut u = Umem::new(4, 2048, false).expect("mmap");
        assert_eq!(u.len(), 8192);
        assert!(u.write(2048, b"hello"));
        assert_eq!(u.slice(2048, 5), Some(&b"hello"[..]));
        assert_eq!(u.slice(2048 + 256, 1792).map(|s| s.len()), Some(1792));
        assert!(u.slice(2048 + 256, 1793).is_none(), "crosses a frame");
        assert!(u.slice(8192, 1).is_none(), "past the end");
        assert!(!u.write(6144, &[0; 2049]));
        let m = u.slice_mut(4096, 2048).expect("a whole frame");
        m[..3].copy_from_slice(b"abc");
        assert_eq!(u.slice(4096, 3), Some(&b"abc"[..]));
        assert!(u.slice_mut(4096 + 1, 2048).is_none(), "crosses a frame");
        assert!(u.slice_mut(8192, 0).is_none(), "past the end");
        assert_eq!(u.frame_base(2048 + 300), 2048);
        assert!(Umem::new(4, 1000, false).is_err());
        assert!(Umem::new(0, 2048, false).is_err());
    }
}
