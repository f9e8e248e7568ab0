//! Memory registration over caller memory.
//!
//! A [`Region`] is memory the application registered: it stays where it is
//! (a `Vec<u8>`'s heap buffer, a `&'static mut [u8]`, or any mapping the
//! caller vouches for with [`Region::from_raw`]) and both sides use it in
//! place while it is registered: the poll loop places inbound DDP payload
//! into it and copies outbound payload out of it, and the application reads
//! and writes it through its own handle, from any thread, without a round
//! trip to the loop.
//!
//! # Why atomics
//!
//! The loop and the application touch the same octets from different
//! threads, and nothing in the protocol stops a peer from writing into a
//! region while the application reads it (perftest's `write_lat` polls the
//! last octet of a buffer the peer is writing). In Rust a non-atomic access
//! racing with a write is undefined behaviour, so every access the safe API
//! makes — the loop's and the application's — is atomic:
//!
//! * the aligned 8-octet words that lie wholly inside the region are only
//!   ever accessed as `AtomicU64`; the octets before the first and after the
//!   last such word only as `AtomicU8`. Each location thus has one access
//!   size for its whole life (racing mixed-size atomics are not allowed
//!   either);
//! * a copy stores whole words with relaxed `AtomicU64` stores (on x86 a
//!   plain `mov`); a copy that covers only part of a word merges its octets
//!   in with a compare-exchange loop, so octets of the same word written by
//!   someone else are never clobbered;
//! * the last octet of every copy into the region is stored after a release
//!   fence, and [`Region::load`] is an acquire load: an application that
//!   sees the last octet the loop placed from an FPDU also sees the rest of
//!   that FPDU and every FPDU placed before it (perftest's `write_lat`
//!   polling on the last octet of a message is thus well-defined).
//!
//! # Bulk copies
//!
//! Copying word by word takes one load and one store per eight octets
//! (the compiler never merges atomic accesses), about a quarter of the
//! sending loop's time at MTU 1500. On x86-64 the whole words of a copy go
//! through inline assembly instead (`bulk`): 32-octet AVX moves where the
//! CPU has AVX, else 16-octet SSE2 moves, the rest word by word as above.
//! Each of the region's words is 8-aligned and lies within one cache line,
//! so every vector access covers each word it touches whole, in one access
//! (x86 accesses an aligned quadword atomically, also as part of a wider
//! move): the assembly does what the relaxed `AtomicU64` loads and stores
//! it replaces would, and the abstract machine sees those (inline assembly
//! may stand for any operations the Rust code could perform). The fences
//! around a copy stay where they are, and an `asm!` block without `nomem`
//! is a compiler barrier; x86 keeps stores in program order.
//!
//! A copy of at most 16 whole aligned words (128 octets; a 64-octet Write
//! into an aligned buffer) goes word by word, without the split into head,
//! words and tail or the vector moves' set-up: placing a 64-octet Write
//! took 234 instructions through them, 153 this way, and reading 64 octets
//! out 142 against 81 (`stack-cost`, bench/README.md, "Software cost per
//! message: decisions").
//!
//! Concurrent access thus gives unspecified *values* where the application
//! races with the peer (as with a hardware RNIC), never undefined behaviour.
//! Code that wants plain slices (to hand to a parser, say) gets them through
//! the `unsafe` [`Region::slice`] / [`Region::slice_mut`], whose contract is
//! the verbs one: do not touch memory the stack may be using.
//!
//! This is the only crate besides the frame backends with `unsafe`; each
//! block says why it is sound.

use std::fmt;
use std::ptr::NonNull;
use std::sync::atomic::{fence, AtomicU64, AtomicU8, Ordering};
use std::sync::Arc;

use iwarp_proto::mem::RegionMemory;

const WORD: usize = 8;
/// Copies of whole aligned words up to this many go word by word
/// ([`Region::small_words`]); longer ones take the vector moves.
const SMALL_WORDS: usize = 16;

/// Who frees the memory when the last handle goes.
enum Owner {
    /// A `Vec<u8>` taken apart into its raw parts (capacity kept to rebuild it).
    Vec { cap: usize },
    /// `&'static mut [u8]`: nothing to free.
    Static,
    /// Caller memory; the callback (if any) runs once, after the last handle.
    Foreign(Option<Box<dyn FnOnce() + Send>>),
}

struct Inner {
    ptr: NonNull<u8>,
    len: usize,
    /// Octets before the first aligned word inside the region.
    head: usize,
    /// Aligned words wholly inside the region.
    words: usize,
    owner: Owner,
}

// SAFETY: `Inner` owns (or, for `Static`/`Foreign`, has exclusive use of)
// the memory at `ptr`; every access through it is an atomic operation (see
// the module docs), so sharing it between threads cannot race. The drop
// callback is `Send`.
unsafe impl Send for Inner {}
// SAFETY: as above: `&Inner` only ever reaches the memory through atomics.
unsafe impl Sync for Inner {}

impl Drop for Inner {
    fn drop(&mut self) {
        match &mut self.owner {
            Owner::Vec { cap } => {
                // SAFETY: `ptr`, `len` and `cap` came from a `Vec<u8>` taken
                // apart in `from_vec` and not rebuilt since (`into_vec`
                // replaces the owner with `Static` when it rebuilds it).
                drop(unsafe { Vec::from_raw_parts(self.ptr.as_ptr(), self.len, *cap) });
            }
            Owner::Static => {}
            Owner::Foreign(f) => {
                if let Some(f) = f.take() {
                    f();
                }
            }
        }
    }
}

/// Memory registered in place, shared by the application and the poll loop.
/// Cloning gives another handle to the same memory; it is freed (or handed
/// back) when the last handle goes.
#[derive(Clone)]
pub struct Region {
    inner: Arc<Inner>,
}

impl fmt::Debug for Region {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Region")
            .field("addr", &self.inner.ptr)
            .field("len", &self.inner.len)
            .finish()
    }
}

/// An access outside the region.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct OutOfBounds {
    /// First octet asked for.
    pub offset: usize,
    /// Octets asked for.
    pub len: usize,
    /// The region's length.
    pub region_len: usize,
}

impl fmt::Display for OutOfBounds {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{} octets at offset {} are outside the {}-octet region",
            self.len, self.offset, self.region_len
        )
    }
}

impl std::error::Error for OutOfBounds {}

impl Region {
    fn new(ptr: NonNull<u8>, len: usize, owner: Owner) -> Region {
        let head = ptr.as_ptr().align_offset(WORD).min(len);
        let words = (len - head) / WORD;
        Region {
            inner: Arc::new(Inner {
                ptr,
                len,
                head,
                words,
                owner,
            }),
        }
    }

    /// Register a vector's buffer in place. It does not move or grow while
    /// registered; [`into_vec`](Self::into_vec) gives it back.
    pub fn from_vec(v: Vec<u8>) -> Region {
        let mut v = std::mem::ManuallyDrop::new(v);
        let (len, cap) = (v.len(), v.capacity());
        // A Vec's pointer is never null (dangling but non-null when empty).
        let ptr = NonNull::new(v.as_mut_ptr()).unwrap_or(NonNull::dangling());
        Region::new(ptr, len, Owner::Vec { cap })
    }

    /// `len` zeroed octets, word-aligned (so every octet is a word octet).
    pub fn zeroed(len: usize) -> Region {
        Region::from_vec(vec![0; len])
    }

    /// Register memory the program owns for good (e.g. from `Box::leak`).
    pub fn from_static(mem: &'static mut [u8]) -> Region {
        let len = mem.len();
        let ptr = NonNull::new(mem.as_mut_ptr()).unwrap_or(NonNull::dangling());
        Region::new(ptr, len, Owner::Static)
    }

    /// Register caller memory: hugepages, a shared mapping, a buffer owned
    /// by C code. `on_drop` runs once after the last handle is dropped (unmap
    /// there, or hand the memory back).
    ///
    /// # Safety
    ///
    /// `ptr..ptr + len` must be valid for reads and writes, and stay valid and
    /// unmoved until `on_drop` runs (or forever, without one). While any
    /// handle exists, nothing else may access that memory except through a
    /// [`Region`] handle or under the contract of [`slice`](Self::slice) /
    /// [`slice_mut`](Self::slice_mut).
    pub unsafe fn from_raw(
        ptr: NonNull<u8>,
        len: usize,
        on_drop: Option<Box<dyn FnOnce() + Send>>,
    ) -> Region {
        Region::new(ptr, len, Owner::Foreign(on_drop))
    }

    /// Length in octets.
    pub fn len(&self) -> usize {
        self.inner.len
    }

    /// Zero length.
    pub fn is_empty(&self) -> bool {
        self.inner.len == 0
    }

    /// Address of the first octet (for `ibv_mr->addr`-style bookkeeping, or
    /// for raw access under the contract of [`slice`](Self::slice)).
    pub fn as_ptr(&self) -> *mut u8 {
        self.inner.ptr.as_ptr()
    }

    /// Handles to this memory (the stack holds one while it is registered).
    pub fn handles(&self) -> usize {
        Arc::strong_count(&self.inner)
    }

    /// The vector back, if this is the last handle to memory registered with
    /// [`from_vec`](Self::from_vec) (or [`zeroed`](Self::zeroed)); otherwise
    /// the handle, unchanged.
    pub fn into_vec(self) -> Result<Vec<u8>, Region> {
        if !matches!(self.inner.owner, Owner::Vec { .. }) {
            return Err(self);
        }
        let mut inner = Arc::try_unwrap(self.inner).map_err(|inner| Region { inner })?;
        let Owner::Vec { cap } = std::mem::replace(&mut inner.owner, Owner::Static) else {
            unreachable!("checked above");
        };
        // SAFETY: the parts came from `from_vec`; the owner is now `Static`,
        // so dropping `inner` will not free them a second time, and this was
        // the last handle, so nothing else reaches the memory.
        Ok(unsafe { Vec::from_raw_parts(inner.ptr.as_ptr(), inner.len, cap) })
    }

    fn check(&self, offset: usize, len: usize) -> Result<(), OutOfBounds> {
        match offset.checked_add(len) {
            Some(end) if end <= self.inner.len => Ok(()),
            _ => Err(OutOfBounds {
                offset,
                len,
                region_len: self.inner.len,
            }),
        }
    }

    fn byte(&self, i: usize) -> &AtomicU8 {
        debug_assert!(i < self.inner.len);
        // SAFETY: `i < len`, so the octet is inside the region, which is
        // valid for the life of `self.inner`; octets outside the aligned
        // words are only ever accessed as `AtomicU8` (module docs).
        unsafe { AtomicU8::from_ptr(self.inner.ptr.as_ptr().add(i)) }
    }

    /// The aligned words wholly inside the region, as atomics.
    fn words(&self) -> &[AtomicU64] {
        let Inner {
            ptr, head, words, ..
        } = *self.inner;
        if words == 0 {
            return &[];
        }
        // SAFETY: `ptr + head` is 8-aligned (`head` is the distance to the
        // first aligned address) and `words` whole words from there lie
        // inside the region, valid for the life of `self.inner`. These
        // octets are only ever accessed as these `AtomicU64`s (module docs),
        // and a shared slice of atomics permits concurrent access.
        unsafe { std::slice::from_raw_parts(ptr.as_ptr().add(head).cast::<AtomicU64>(), words) }
    }

    /// Split `offset..offset + len` (inside the region) into: octets before
    /// the words, the word span (first word, octet within it, octets), and
    /// octets after the words.
    fn split(&self, offset: usize, len: usize) -> Split {
        let (head, wend) = (self.inner.head, self.inner.head + self.inner.words * WORD);
        let end = offset + len;
        let pre = offset..end.min(head).max(offset);
        let mid_lo = offset.max(head).min(end);
        let mid_hi = end.min(wend).max(mid_lo);
        let post = mid_hi.max(wend).min(end).max(mid_hi)..end;
        Split {
            pre,
            mid: mid_lo..mid_hi,
            post,
        }
    }

    /// The words `offset..offset + len` is made of, when it is whole
    /// aligned words inside the word span and at most [`SMALL_WORDS`] of
    /// them: a copy that size goes word by word, without the split into
    /// head, words and tail or the vector moves' set-up (a 64-octet Write
    /// into an aligned buffer, the latency path).
    #[inline]
    fn small_words(&self, offset: usize, len: usize) -> Option<&[AtomicU64]> {
        let rel = offset.checked_sub(self.inner.head)?;
        if !rel.is_multiple_of(WORD) || !len.is_multiple_of(WORD) || len > SMALL_WORDS * WORD {
            return None;
        }
        let w = rel / WORD;
        self.words().get(w..w + len / WORD)
    }

    /// Copy `src` into the region at `offset`, releasing: a thread that
    /// sees the copy's last octet with [`load`](Self::load) also sees the
    /// rest of it, and everything copied in before it.
    pub fn write(&self, offset: usize, src: &[u8]) -> Result<(), OutOfBounds> {
        self.check(offset, src.len())?;
        let Some((&last, body)) = src.split_last() else {
            return Ok(());
        };
        // Release fence, then the octets (relaxed): what was written before
        // this copy is seen by whoever sees its octets.
        fence(Ordering::Release);
        let at = offset + body.len();
        let (head, words) = (self.inner.head, self.inner.words);
        if at < head || at >= head + words * WORD {
            // The last octet outside the aligned words (an `AtomicU8`):
            // the rest relaxed, then it with release ordering towards an
            // acquire load that reads it.
            self.copy_in(offset, body);
            self.byte(at).store(last, Ordering::Release);
            return Ok(());
        }
        // The last octet's word: the copy's octets before that word
        // relaxed, then the copy's octets in it in one release store — the
        // whole word when the copy covers it (a ping-pong's 64 aligned
        // octets: no compare-exchange), else one merge. Before, the body and
        // the last octet went separately, two merges into that word.
        let w = (at - head) / WORD;
        let word_start = head + w * WORD;
        let from = word_start.max(offset);
        self.copy_in(offset, &src[..from - offset]);
        let piece = &src[from - offset..];
        let word = &self.words()[w];
        match <[u8; WORD]>::try_from(piece) {
            Ok(b) => word.store(u64::from_ne_bytes(b), Ordering::Release),
            Err(_) => merge(word, from - word_start, piece, Ordering::Release),
        }
        Ok(())
    }

    /// The relaxed copy under [`write`](Self::write); the range is checked.
    fn copy_in(&self, offset: usize, src: &[u8]) {
        if let Some(words) = self.small_words(offset, src.len()) {
            for (dst, c) in words.iter().zip(src.chunks_exact(WORD)) {
                let mut b = [0u8; WORD];
                b.copy_from_slice(c);
                dst.store(u64::from_ne_bytes(b), Ordering::Relaxed);
            }
            return;
        }
        let Split { pre, mid, post } = self.split(offset, src.len());
        for i in pre {
            self.byte(i).store(src[i - offset], Ordering::Relaxed);
        }
        if !mid.is_empty() {
            let words = self.words();
            let rel = mid.start - self.inner.head;
            let (mut w, k) = (rel / WORD, rel % WORD);
            let mut s = &src[mid.start - offset..mid.end - offset];
            if k != 0 {
                // A word the copy covers only in part: merge, keeping the
                // octets it does not cover.
                let n = (WORD - k).min(s.len());
                merge(&words[w], k, &s[..n], Ordering::Relaxed);
                s = &s[n..];
                w += 1;
            }
            let mut full = s.len() / WORD;
            // Whole words in bulk (module docs, "Bulk copies").
            let bulk = bulk::copy_in(&words[w..w + full], s);
            w += bulk;
            full -= bulk;
            s = &s[bulk * WORD..];
            let chunks = s.chunks_exact(WORD);
            let rest = chunks.remainder();
            for (dst, c) in words[w..w + full].iter().zip(chunks) {
                let mut b = [0u8; WORD];
                b.copy_from_slice(c);
                dst.store(u64::from_ne_bytes(b), Ordering::Relaxed);
            }
            if !rest.is_empty() {
                merge(&words[w + full], 0, rest, Ordering::Relaxed);
            }
        }
        for i in post {
            self.byte(i).store(src[i - offset], Ordering::Relaxed);
        }
    }

    /// Copy `dst.len()` octets at `offset` out of the region.
    pub fn read(&self, offset: usize, dst: &mut [u8]) -> Result<(), OutOfBounds> {
        self.check(offset, dst.len())?;
        if let Some(words) = self.small_words(offset, dst.len()) {
            for (src, c) in words.iter().zip(dst.chunks_exact_mut(WORD)) {
                c.copy_from_slice(&src.load(Ordering::Relaxed).to_ne_bytes());
            }
            fence(Ordering::Acquire);
            return Ok(());
        }
        let Split { pre, mid, post } = self.split(offset, dst.len());
        for i in pre {
            dst[i - offset] = self.byte(i).load(Ordering::Relaxed);
        }
        if !mid.is_empty() {
            let words = self.words();
            let rel = mid.start - self.inner.head;
            let (mut w, k) = (rel / WORD, rel % WORD);
            let mut d = &mut dst[mid.start - offset..mid.end - offset];
            if k != 0 {
                let n = (WORD - k).min(d.len());
                let b = words[w].load(Ordering::Relaxed).to_ne_bytes();
                d[..n].copy_from_slice(&b[k..k + n]);
                d = &mut d[n..];
                w += 1;
            }
            let mut full = d.len() / WORD;
            // Whole words in bulk (module docs, "Bulk copies").
            let bulk = bulk::copy_out(&words[w..w + full], d);
            w += bulk;
            full -= bulk;
            d = &mut d[bulk * WORD..];
            let mut chunks = d.chunks_exact_mut(WORD);
            for (src, c) in words[w..w + full].iter().zip(&mut chunks) {
                c.copy_from_slice(&src.load(Ordering::Relaxed).to_ne_bytes());
            }
            let rest = chunks.into_remainder();
            if !rest.is_empty() {
                let b = words[w + full].load(Ordering::Relaxed).to_ne_bytes();
                let n = rest.len();
                rest.copy_from_slice(&b[..n]);
            }
        }
        for i in post {
            dst[i - offset] = self.byte(i).load(Ordering::Relaxed);
        }
        fence(Ordering::Acquire);
        Ok(())
    }

    /// A copy of `len` octets at `offset`.
    pub fn to_vec(&self, offset: usize, len: usize) -> Result<Vec<u8>, OutOfBounds> {
        self.check(offset, len)?;
        let mut v = vec![0; len];
        self.read(offset, &mut v)?;
        Ok(v)
    }

    /// One octet, with acquire ordering: poll it to wait for a peer's RDMA
    /// Write to arrive, then read what came before it.
    pub fn load(&self, offset: usize) -> Result<u8, OutOfBounds> {
        self.check(offset, 1)?;
        let head = self.inner.head;
        if offset < head || offset >= head + self.inner.words * WORD {
            return Ok(self.byte(offset).load(Ordering::Acquire));
        }
        let (w, k) = ((offset - head) / WORD, (offset - head) % WORD);
        Ok(self.words()[w].load(Ordering::Acquire).to_ne_bytes()[k])
    }

    /// Store one octet, with release ordering.
    pub fn store(&self, offset: usize, value: u8) -> Result<(), OutOfBounds> {
        self.check(offset, 1)?;
        let head = self.inner.head;
        if offset < head || offset >= head + self.inner.words * WORD {
            self.byte(offset).store(value, Ordering::Release);
            return Ok(());
        }
        let (w, k) = ((offset - head) / WORD, (offset - head) % WORD);
        merge(&self.words()[w], k, &[value], Ordering::Release);
        Ok(())
    }

    /// Set `len` octets at `offset` to `value`.
    pub fn fill(&self, offset: usize, len: usize, value: u8) -> Result<(), OutOfBounds> {
        self.check(offset, len)?;
        let chunk = [value; 256];
        let mut done = 0;
        while done < len {
            let n = (len - done).min(chunk.len());
            self.write(offset + done, &chunk[..n])?;
            done += n;
        }
        Ok(())
    }

    /// The region as a plain slice.
    ///
    /// # Safety
    ///
    /// For as long as the slice lives, nothing may write the region: no
    /// inbound RDMA Write, Send or Read Response may target it (no remote
    /// write access granted or advertised, no receive or Read posted into
    /// it), and no other handle may write it. This is the verbs contract for
    /// reading a buffer after its completion.
    pub unsafe fn slice(&self) -> &[u8] {
        // SAFETY: the memory is valid for `len` octets for the life of
        // `self`; the caller guarantees no writes while the slice lives.
        unsafe { std::slice::from_raw_parts(self.inner.ptr.as_ptr(), self.inner.len) }
    }

    /// The region as a plain mutable slice.
    ///
    /// # Safety
    ///
    /// For as long as the slice lives, nothing else may read or write the
    /// region: no posted work or inbound operation may use it (no remote
    /// access granted or advertised, nothing posted that names it) and no
    /// other handle or slice may access it. This is the verbs contract for
    /// filling a buffer before posting it.
    #[allow(clippy::mut_from_ref)] // the contract above is what makes it exclusive
    pub unsafe fn slice_mut(&self) -> &mut [u8] {
        // SAFETY: valid for `len` octets for the life of `self`; the caller
        // guarantees exclusive access while the slice lives.
        unsafe { std::slice::from_raw_parts_mut(self.inner.ptr.as_ptr(), self.inner.len) }
    }
}

/// Octet ranges of one access: before, inside and after the aligned words.
/// Bulk copies of whole words (module docs, "Bulk copies").
mod bulk {
    use std::sync::atomic::AtomicU64;

    use super::WORD;

    /// Store `src`'s first octets into a prefix of `words`, in blocks;
    /// returns how many words it stored (the caller stores the rest).
    pub(super) fn copy_in(words: &[AtomicU64], src: &[u8]) -> usize {
        let n = words.len().min(src.len() / WORD);
        // SAFETY: `n` words fit in both `words` and `src`; the words are
        // atomics (writable through a shared reference) and the region's
        // memory is never one of the caller's slices (`Region::slice` is
        // unsafe for that reason), so the two do not overlap.
        unsafe { imp::copy(words.as_ptr().cast::<u8>().cast_mut(), src.as_ptr(), n) }
    }

    /// Load a prefix of `words` into `dst`'s first octets, in blocks;
    /// returns how many words it loaded.
    pub(super) fn copy_out(words: &[AtomicU64], dst: &mut [u8]) -> usize {
        let n = words.len().min(dst.len() / WORD);
        // SAFETY: as in `copy_in`, the other way round.
        unsafe { imp::copy(dst.as_mut_ptr(), words.as_ptr().cast::<u8>(), n) }
    }

    #[cfg(all(target_arch = "x86_64", not(miri)))]
    mod imp {
        use std::arch::asm;

        /// Copy the largest whole number of blocks within `words` 8-octet
        /// words from `src` to `dst`; returns the words copied. One side
        /// is the region's words (8-aligned), the other an ordinary slice.
        ///
        /// # Safety
        /// `src` and `dst` are valid for `words * 8` octets (read and
        /// written) and do not overlap.
        pub(super) unsafe fn copy(dst: *mut u8, src: *const u8, words: usize) -> usize {
            if std::arch::is_x86_feature_detected!("avx") {
                let blocks = words / 4;
                if blocks > 0 {
                    // SAFETY: AVX is present (checked above); the spans
                    // hold `blocks * 32 <= words * 8` octets and do not
                    // overlap (this function's contract).
                    unsafe { avx(dst, src, blocks) };
                }
                blocks * 4
            } else {
                let blocks = words / 2;
                if blocks > 0 {
                    // SAFETY: SSE2 is part of x86-64; spans as above.
                    unsafe { sse2(dst, src, blocks) };
                }
                blocks * 2
            }
        }

        /// `blocks` 32-octet moves.
        ///
        /// # Safety
        /// The CPU has AVX; `src` and `dst` are valid for `blocks * 32`
        /// octets and do not overlap; `blocks > 0`.
        #[target_feature(enable = "avx")]
        pub(super) unsafe fn avx(dst: *mut u8, src: *const u8, blocks: usize) {
            // SAFETY: the caller's contract: every access stays inside the
            // two spans; the loop runs `blocks` times.
            unsafe {
                asm!(
                    "2:",
                    "vmovdqu {t}, ymmword ptr [{s}]",
                    "vmovdqu ymmword ptr [{d}], {t}",
                    "add {s}, 32",
                    "add {d}, 32",
                    "dec {n}",
                    "jnz 2b",
                    s = inout(reg) src => _,
                    d = inout(reg) dst => _,
                    n = inout(reg) blocks => _,
                    t = out(ymm_reg) _,
                    options(nostack),
                );
            }
        }

        /// `blocks` 16-octet moves.
        ///
        /// # Safety
        /// `src` and `dst` are valid for `blocks * 16` octets and do not
        /// overlap; `blocks > 0`.
        pub(super) unsafe fn sse2(dst: *mut u8, src: *const u8, blocks: usize) {
            // SAFETY: as for `avx`; SSE2 is baseline on x86-64.
            unsafe {
                asm!(
                    "2:",
                    "movdqu {t}, xmmword ptr [{s}]",
                    "movdqu xmmword ptr [{d}], {t}",
                    "add {s}, 16",
                    "add {d}, 16",
                    "dec {n}",
                    "jnz 2b",
                    s = inout(reg) src => _,
                    d = inout(reg) dst => _,
                    n = inout(reg) blocks => _,
                    t = out(xmm_reg) _,
                    options(nostack),
                );
            }
        }
    }

    #[cfg(all(test, target_arch = "x86_64", not(miri)))]
    mod tests {
        /// Both block copies, whichever the CPU would pick, move exactly
        /// their blocks: nothing before or after, nothing left out.
        #[test]
        fn both_block_copies_move_exactly_their_blocks() {
            let src: Vec<u8> = (0..=255u8).cycle().take(300).collect();
            for blocks in 1..=8usize {
                let mut dst = vec![0xEEu8; 300];
                // SAFETY: SSE2 is baseline; both spans hold 16 * blocks + 1
                // octets past the offsets used, and are distinct vectors.
                unsafe { super::imp::sse2(dst.as_mut_ptr().add(1), src.as_ptr().add(3), blocks) };
                assert_eq!(dst[0], 0xEE);
                assert_eq!(&dst[1..1 + 16 * blocks], &src[3..3 + 16 * blocks]);
                assert!(dst[1 + 16 * blocks..].iter().all(|&b| b == 0xEE));
                if std::arch::is_x86_feature_detected!("avx") {
                    let mut dst = vec![0xEEu8; 300];
                    // SAFETY: AVX checked; spans as above (32 * 8 + 1 < 300).
                    unsafe {
                        super::imp::avx(dst.as_mut_ptr().add(1), src.as_ptr().add(3), blocks)
                    };
                    assert_eq!(dst[0], 0xEE);
                    assert_eq!(&dst[1..1 + 32 * blocks], &src[3..3 + 32 * blocks]);
                    assert!(dst[1 + 32 * blocks..].iter().all(|&b| b == 0xEE));
                }
            }
        }
    }

    /// Elsewhere (and under Miri) no bulk path: the callers copy every
    /// word as an atomic.
    #[cfg(not(all(target_arch = "x86_64", not(miri))))]
    mod imp {
        /// Copies nothing.
        ///
        /// # Safety
        /// None needed; the same signature as the x86-64 one.
        pub(super) unsafe fn copy(_dst: *mut u8, _src: *const u8, _words: usize) -> usize {
            0
        }
    }
}

struct Split {
    pre: std::ops::Range<usize>,
    mid: std::ops::Range<usize>,
    post: std::ops::Range<usize>,
}

/// Store `piece` at octet `k` of `word`, keeping its other octets (a
/// compare-exchange loop, so a concurrent merge into the same word by
/// someone else is not lost).
fn merge(word: &AtomicU64, k: usize, piece: &[u8], order: Ordering) {
    let _ = word.fetch_update(order, Ordering::Relaxed, |old| {
        let mut b = old.to_ne_bytes();
        b[k..k + piece.len()].copy_from_slice(piece);
        Some(u64::from_ne_bytes(b))
    });
}

impl RegionMemory for Region {
    fn len(&self) -> usize {
        self.inner.len
    }

    fn write_at(&mut self, offset: usize, src: &[u8]) -> bool {
        self.write(offset, src).is_ok()
    }

    fn read_at(&self, offset: usize, dst: &mut [u8]) -> bool {
        self.read(offset, dst).is_ok()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pattern(n: usize, seed: u8) -> Vec<u8> {
        (0..n)
            .map(|i| (i as u8).wrapping_mul(31).wrapping_add(seed))
            .collect()
    }

    /// A region at every alignment 0..8 inside a larger buffer, so head,
    /// words and tail all occur.
    fn unaligned(len: usize, shift: usize) -> (Region, &'static mut [u8]) {
        let buf: &'static mut [u8] = Box::leak(vec![0u8; len + 16].into_boxed_slice());
        let base = buf.as_mut_ptr().align_offset(WORD);
        let (_, rest) = buf.split_at_mut(base + shift);
        let (mine, after) = rest.split_at_mut(len);
        (Region::from_static(mine), after)
    }

    #[test]
    fn every_range_at_every_alignment_round_trips() {
        for shift in 0..WORD {
            // Under Miri (slow) fewer lengths; still head, words and tail.
            let lens: &[usize] = if cfg!(miri) {
                &[0, 9, 17]
            } else {
                // Past 32 and 64 octets: the bulk copies (whole blocks
                // of words, and the words after them).
                &[0, 1, 7, 8, 9, 15, 16, 17, 40, 71, 130]
            };
            for &len in lens {
                let (r, after) = unaligned(len, shift);
                let canary = after.first().copied();
                let mut model = vec![0u8; len];
                for off in 0..=len {
                    for n in 0..=(len - off) {
                        let data = pattern(n, (off * 7 + n) as u8);
                        r.write(off, &data).unwrap();
                        model[off..off + n].copy_from_slice(&data);
                        assert_eq!(r.to_vec(0, len).unwrap(), model, "shift {shift} len {len}");
                        let mut back = vec![0u8; n];
                        r.read(off, &mut back).unwrap();
                        assert_eq!(back, data);
                    }
                }
                for (i, want) in model.iter().enumerate() {
                    assert_eq!(r.load(i).unwrap(), *want);
                    r.store(i, !*want).unwrap();
                    assert_eq!(r.load(i).unwrap(), !*want);
                }
                // Nothing after the region was touched.
                assert_eq!(after.first().copied(), canary);
            }
        }
    }

    #[test]
    fn out_of_bounds_is_an_error_and_writes_nothing() {
        let r = Region::from_vec(pattern(16, 1));
        let before = r.to_vec(0, 16).unwrap();
        let e = r.write(10, &[0; 7]).unwrap_err();
        assert_eq!((e.offset, e.len, e.region_len), (10, 7, 16));
        assert!(r.write(usize::MAX, &[0; 2]).is_err());
        assert!(r.read(16, &mut [0; 1]).is_err());
        assert!(r.load(16).is_err());
        assert!(r.store(16, 0).is_err());
        assert!(r.fill(8, 9, 0).is_err());
        assert_eq!(r.to_vec(0, 16).unwrap(), before);
        let mut m: Box<dyn RegionMemory> = Box::new(r.clone());
        assert!(!m.write_at(15, &[1, 2]));
        assert!(!m.read_at(0, &mut [0; 17]));
        assert!(m.write_at(14, &[1, 2]));
        assert_eq!(r.to_vec(14, 2).unwrap(), [1, 2]);
    }

    #[test]
    fn vec_comes_back_only_from_the_last_handle() {
        let data = pattern(100, 3);
        let r = Region::from_vec(data.clone());
        let addr = r.as_ptr();
        let other = r.clone();
        assert_eq!(r.handles(), 2);
        let r = r.into_vec().unwrap_err();
        drop(other);
        let v = r.into_vec().unwrap();
        assert_eq!(v, data);
        assert_eq!(v.as_ptr(), addr.cast_const(), "the buffer never moved");
        assert!(Region::from_static(Box::leak(Box::new([0u8; 4])))
            .into_vec()
            .is_err());
        assert_eq!(
            Region::from_vec(Vec::new()).into_vec().unwrap(),
            Vec::<u8>::new()
        );
    }

    #[test]
    fn foreign_memory_is_released_once_after_the_last_handle() {
        use std::sync::atomic::AtomicUsize;
        static RELEASED: AtomicUsize = AtomicUsize::new(0);
        let buf = Box::leak(vec![0u8; 64].into_boxed_slice());
        let ptr = NonNull::new(buf.as_mut_ptr()).unwrap();
        let addr = ptr.as_ptr() as usize;
        let release: Box<dyn FnOnce() + Send> = Box::new(move || {
            RELEASED.fetch_add(1, Ordering::SeqCst);
            // SAFETY: the box leaked above, rebuilt once, after the last handle.
            drop(unsafe { Box::from_raw(std::ptr::slice_from_raw_parts_mut(addr as *mut u8, 64)) });
        });
        // SAFETY: a leaked buffer of 64 octets, only used through the region;
        // the callback frees it after the last handle.
        let r = unsafe { Region::from_raw(ptr, 64, Some(release)) };
        r.fill(0, 64, 0xab).unwrap();
        let r2 = r.clone();
        drop(r);
        assert_eq!(RELEASED.load(Ordering::SeqCst), 0);
        assert_eq!(r2.load(63).unwrap(), 0xab);
        drop(r2);
        assert_eq!(RELEASED.load(Ordering::SeqCst), 1);
    }

    #[test]
    fn concurrent_writers_of_neighbouring_octets_do_not_clobber_each_other() {
        // Two threads write alternate octets of the same words (partial-word
        // merges); every octet must end with its writer's last value.
        let r = Region::zeroed(64);
        let rounds: u32 = if cfg!(miri) { 20 } else { 2000 };
        std::thread::scope(|s| {
            for parity in 0..2usize {
                let r = r.clone();
                s.spawn(move || {
                    for round in 0..rounds {
                        for i in (parity..64).step_by(2) {
                            r.store(i, (round as u8).wrapping_add(parity as u8))
                                .unwrap();
                        }
                    }
                });
            }
        });
        let last = (rounds - 1) as u8;
        for i in 0..64 {
            assert_eq!(
                r.load(i).unwrap(),
                last.wrapping_add((i % 2) as u8),
                "octet {i}"
            );
        }
    }

    /// The watched-last-octet pattern (a ping-pong's): a reader that sees
    /// a write's last octet sees the rest of that write, whether the last
    /// octet ends a word the write covers whole, part of one, or lies
    /// outside the aligned words.
    #[test]
    fn a_reader_that_sees_the_last_octet_sees_the_write() {
        let rounds: u8 = if cfg!(miri) { 2 } else { 200 };
        for shift in 0..WORD {
            for len in [1usize, 7, 8, 9, 63, 64, 65] {
                let (r, _) = unaligned(len + 16, shift);
                for round in 1..=rounds {
                    let data: Vec<u8> =
                        pattern(len - 1, round).into_iter().chain([round]).collect();
                    std::thread::scope(|s| {
                        let w = r.clone();
                        let d = data.clone();
                        s.spawn(move || w.write(3, &d).unwrap());
                        while r.load(3 + len - 1).unwrap() != round {
                            std::hint::spin_loop();
                        }
                        assert_eq!(r.to_vec(3, len).unwrap(), data, "shift {shift} len {len}");
                    });
                }
            }
        }
    }

    #[test]
    fn a_reader_that_sees_the_flag_sees_the_data() {
        let r = Region::zeroed(4096);
        let data = pattern(4095, 9);
        std::thread::scope(|s| {
            let w = r.clone();
            let d = data.clone();
            s.spawn(move || {
                w.write(0, &d).unwrap();
                w.write(4095, &[1]).unwrap();
            });
            while r.load(4095).unwrap() == 0 {
                std::hint::spin_loop();
            }
            assert_eq!(r.to_vec(0, 4095).unwrap(), data);
        });
    }
}
