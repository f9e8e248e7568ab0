//! One AF_XDP socket: its four rings, frame accounting, RX and TX.
//!
//! Ring protocol (as libxdp's `xsk.h`): each ring is a power-of-two array
//! with a free-running 32-bit producer and consumer index shared with the
//! kernel. We keep cached copies of the other side's index and only read the
//! shared one (Acquire) when the cache says we are out of entries or space,
//! and publish ours with a Release store after writing or reading the
//! entries.

use std::os::fd::{AsFd, AsRawFd, BorrowedFd, OwnedFd};
use std::ptr::NonNull;
use std::sync::atomic::{AtomicU32, Ordering};

use crate::error::{Error, Warning};
use crate::sys::{self, XdpDesc, XdpRingOffset};
use crate::umem::Umem;
use crate::{BusyPoll, XskMode};

/// One mmap'd ring.
#[derive(Debug)]
struct Mmap {
    ptr: NonNull<u8>,
    len: usize,
}

impl Mmap {
    fn new(fd: BorrowedFd<'_>, len: usize, pgoff: i64) -> Result<Mmap, i32> {
        // SAFETY: a shared mapping of the socket's ring at an address of the
        // kernel's choosing; it touches no existing memory.
        let p = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                len,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_SHARED | libc::MAP_POPULATE,
                fd.as_raw_fd(),
                pgoff,
            )
        };
        if p == libc::MAP_FAILED {
            return Err(sys::errno());
        }
        NonNull::new(p as *mut u8)
            .map(|ptr| Mmap { ptr, len })
            .ok_or(libc::ENOMEM)
    }
}

impl Drop for Mmap {
    fn drop(&mut self) {
        // SAFETY: exactly the mapping made in `new`, unmapped once; the ring
        // pointers into it live in the same `Ring` and die with it.
        unsafe {
            libc::munmap(self.ptr.as_ptr() as *mut libc::c_void, self.len);
        }
    }
}

/// A ring of `T` (u64 UMEM addresses for fill/completion, `XdpDesc` for
/// RX/TX), with our cached view of both indexes.
#[derive(Debug)]
struct Ring<T> {
    producer: NonNull<AtomicU32>,
    consumer: NonNull<AtomicU32>,
    flags: NonNull<AtomicU32>,
    descs: NonNull<T>,
    size: u32,
    mask: u32,
    /// Our producer position (producer rings) / last seen producer
    /// (consumer rings).
    cached_prod: u32,
    /// Our consumer position (consumer rings) / last seen consumer + size
    /// (producer rings).
    cached_cons: u32,
    _map: Mmap,
}

impl<T: Copy> Ring<T> {
    fn map(
        fd: BorrowedFd<'_>,
        off: &XdpRingOffset,
        size: u32,
        pgoff: i64,
        producer_side: bool,
    ) -> Result<Ring<T>, i32> {
        let len = off.desc as usize + size as usize * std::mem::size_of::<T>();
        let map = Mmap::new(fd, len, pgoff)?;
        let at = |o: u64, align: usize| -> Result<NonNull<u8>, i32> {
            if (o as usize) < len && (o as usize) & (align - 1) == 0 {
                // SAFETY: `o` is inside the mapping (checked), so the
                // pointer stays in bounds and is non-null; the mapping is
                // page aligned, so a multiple of `align` (a power of two) is aligned.
                Ok(unsafe { NonNull::new_unchecked(map.ptr.as_ptr().add(o as usize)) })
            } else {
                Err(libc::EINVAL)
            }
        };
        let a32 = std::mem::align_of::<AtomicU32>();
        let producer = at(off.producer, a32)?.cast::<AtomicU32>();
        let consumer = at(off.consumer, a32)?.cast::<AtomicU32>();
        let flags = at(off.flags, a32)?.cast::<AtomicU32>();
        let descs = at(off.desc, std::mem::align_of::<T>())?.cast::<T>();
        let mut r = Ring {
            producer,
            consumer,
            flags,
            descs,
            size,
            mask: size - 1,
            cached_prod: 0,
            cached_cons: 0,
            _map: map,
        };
        r.cached_prod = r.prod().load(Ordering::Relaxed);
        r.cached_cons = r.cons().load(Ordering::Relaxed);
        if producer_side {
            r.cached_cons = r.cached_cons.wrapping_add(size);
        }
        Ok(r)
    }

    fn prod(&self) -> &AtomicU32 {
        // SAFETY: the kernel's offsets point at u32 indexes inside our live
        // mapping, checked in bounds and aligned in `map`; AtomicU32 has u32's layout, and all accesses by
        // either side are atomic.
        unsafe { self.producer.as_ref() }
    }

    fn cons(&self) -> &AtomicU32 {
        // SAFETY: as in `prod`.
        unsafe { self.consumer.as_ref() }
    }

    fn needs_wakeup(&self) -> bool {
        // SAFETY: as in `prod`, for the flags word.
        let f = unsafe { self.flags.as_ref() };
        f.load(Ordering::Relaxed) & sys::XDP_RING_NEED_WAKEUP != 0
    }

    fn slot(&self, idx: u32) -> *mut T {
        // SAFETY: `idx & mask` < size, and the descriptor array holds `size`
        // entries inside the mapping.
        unsafe { self.descs.as_ptr().add((idx & self.mask) as usize) }
    }

    // ---- producer side (fill, TX)

    /// Free entries, at least `want` if possible (re-reads the consumer).
    fn prod_free(&mut self, want: u32) -> u32 {
        let free = self.cached_cons.wrapping_sub(self.cached_prod);
        if free >= want {
            return free;
        }
        // Acquire: the kernel has finished reading entries before it moved
        // its consumer index, so we may overwrite them.
        self.cached_cons = self.cons().load(Ordering::Acquire).wrapping_add(self.size);
        self.cached_cons.wrapping_sub(self.cached_prod)
    }

    /// Write an entry at our producer position and advance it (unpublished).
    fn push(&mut self, v: T) {
        // SAFETY: the caller checked `prod_free() >= 1`, so this slot is not
        // being read by the kernel; it is a valid, aligned T slot.
        unsafe { self.slot(self.cached_prod).write(v) };
        self.cached_prod = self.cached_prod.wrapping_add(1);
    }

    /// Publish what `push` wrote.
    fn submit(&mut self) {
        // Release: the entries are written before the kernel sees the index.
        self.prod().store(self.cached_prod, Ordering::Release);
    }

    /// Entries published but not yet consumed by the kernel.
    fn in_flight(&self) -> u32 {
        self.prod()
            .load(Ordering::Relaxed)
            .wrapping_sub(self.cons().load(Ordering::Acquire))
    }

    /// Entries pushed but not yet published.
    fn unpublished(&self) -> u32 {
        self.cached_prod
            .wrapping_sub(self.prod().load(Ordering::Relaxed))
    }

    // ---- consumer side (RX, completion)

    /// Entries available, up to `max` (re-reads the producer when empty).
    fn cons_avail(&mut self, max: u32) -> u32 {
        let mut n = self.cached_prod.wrapping_sub(self.cached_cons);
        if n == 0 {
            // Acquire: the entries are written before the index we read.
            self.cached_prod = self.prod().load(Ordering::Acquire);
            n = self.cached_prod.wrapping_sub(self.cached_cons);
        }
        n.min(max)
    }

    /// Read the entry `i` places after our consumer position.
    fn peek(&self, i: u32) -> T {
        // SAFETY: the caller got `i < cons_avail()`, so the kernel published
        // this slot (Acquire above) and will not touch it until we release.
        unsafe { self.slot(self.cached_cons.wrapping_add(i)).read() }
    }

    /// Hand `n` read entries back to the kernel.
    fn release(&mut self, n: u32) {
        self.cached_cons = self.cached_cons.wrapping_add(n);
        // Release: our reads of the entries happen before the kernel reuses
        // them.
        self.cons().store(self.cached_cons, Ordering::Release);
    }
}

/// Our own counters (the kernel's are in [`KernelStats`](crate::KernelStats)).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Counters {
    /// Frames handed to the RX sink.
    pub rx_frames: u64,
    /// RX descriptors outside the UMEM (should never happen).
    pub rx_bad_descs: u64,
    /// Frames queued for TX.
    pub tx_frames: u64,
    /// TX descriptors completed by the kernel (a multi-buffer frame
    /// completes one per chunk).
    pub tx_completed: u64,
    /// TX refused: no free frame or no room in the TX ring.
    pub tx_full: u64,
    /// TX refused: longer than a frame.
    pub tx_too_big: u64,
    /// `sendto` kicks.
    pub tx_kicks: u64,
    /// Kicks answered with EAGAIN/EBUSY/ENOBUFS/ENETDOWN (retried later).
    pub tx_kick_again: u64,
    /// Kicks that failed otherwise.
    pub tx_kick_errors: u64,
    /// `recvfrom` wakeups of the RX/fill path.
    pub rx_wakeups: u64,
    /// Received frames that spanned several descriptors (multi-buffer).
    pub rx_multi_buffer: u64,
    /// Frames built in place in a UMEM chunk ([`XskSocket::tx_build`]);
    /// also counted in `tx_frames`.
    pub tx_built: u64,
    /// Builds that their builder cancelled (the chunk went back unsent);
    /// on a shared address, ARP frames diverted to the kernel's resolver
    /// are counted here too.
    pub tx_build_cancelled: u64,
}

/// Descriptors one transmitted frame may span: the kernel's copy-mode
/// transmit builds one skb per frame, with at most MAX_SKB_FRAGS (17)
/// fragments.
pub const MAX_TX_PARTS: usize = 17;

/// Socket options, taken from [`Config`](crate::Config).
#[derive(Debug, Clone)]
pub struct SocketConfig {
    /// Interface (for error messages).
    pub iface: String,
    /// Interface index.
    pub ifindex: u32,
    /// Queue id.
    pub queue: u32,
    /// Size of each of the four rings (power of two).
    pub ring_size: u32,
    /// Frames put on the fill ring at start (the rest are for TX).
    pub rx_frames: u32,
    /// Bind mode.
    pub mode: XskMode,
    /// `XDP_USE_NEED_WAKEUP`.
    pub need_wakeup: bool,
    /// Busy polling.
    pub busy_poll: Option<BusyPoll>,
    /// Multi-buffer frames (`XDP_USE_SG`): frames longer than a UMEM chunk
    /// span several descriptors both ways.
    pub multi_buffer: bool,
}

/// An AF_XDP socket bound to one queue, owning its UMEM.
#[derive(Debug)]
pub struct XskSocket {
    // Rings first: they unmap before the socket closes.
    fill: Ring<u64>,
    comp: Ring<u64>,
    rx: Ring<XdpDesc>,
    tx: Ring<XdpDesc>,
    fd: OwnedFd,
    umem: Umem,
    free: Vec<u64>,
    refill: Vec<u64>,
    mode: XskMode,
    need_wakeup: bool,
    busy_poll: bool,
    warnings: Vec<Warning>,
    counters: Counters,
    multi_buffer: bool,
    /// A multi-buffer frame gathered from its chunks (copy-mode RX hands
    /// the sink one contiguous slice).
    gather: Vec<u8>,
    /// A frame longer than a chunk, built here before it is copied into
    /// its chunks ([`XskSocket::tx_build`] on multi-buffer).
    built: Vec<u8>,
}

// SAFETY: the socket owns its rings and UMEM exclusively; the raw pointers
// point into mappings it owns and are used only through &mut self / &self;
// the kernel side is synchronised with atomics. Nothing is thread-bound.
unsafe impl Send for XskSocket {}

impl XskSocket {
    /// Create the socket, register `umem`, set up and map the rings, bind
    /// to `cfg.queue`, and post `cfg.rx_frames` frames to the fill ring.
    pub fn new(umem: Umem, cfg: &SocketConfig) -> Result<XskSocket, Error> {
        let n = cfg.ring_size;
        if !n.is_power_of_two() || n < 2 {
            return Err(Error::InvalidConfig {
                reason: "ring_size must be a power of two ≥ 2",
            });
        }
        if cfg.rx_frames > n || cfg.rx_frames >= umem.frame_count() {
            return Err(Error::InvalidConfig {
                reason: "rx_frames must be ≤ ring_size and below frame_count",
            });
        }
        let fd = sys::socket(sys::AF_XDP, libc::SOCK_RAW).map_err(|e| {
            if e == libc::EAFNOSUPPORT {
                Error::sys(
                    "creating the AF_XDP socket (kernel without CONFIG_XDP_SOCKETS?)",
                    e,
                )
            } else {
                Error::sys("creating the AF_XDP socket", e)
            }
        })?;
        let f = fd.as_fd();

        sys::raise_memlock(umem.len() as u64);
        let reg = sys::XdpUmemReg {
            addr: umem.base() as u64,
            len: umem.len() as u64,
            chunk_size: umem.frame_size(),
            headroom: 0,
            flags: 0,
            tx_metadata_len: 0,
        };
        sys::setsockopt(f, sys::SOL_XDP, sys::XDP_UMEM_REG, &reg).map_err(|e| {
            // ENOBUFS: the pages exceed RLIMIT_MEMLOCK and the process
            // lacks CAP_IPC_LOCK (xdp_umem_account_pages); the others:
            // older kernels and the memory cgroup.
            if [libc::ENOBUFS, libc::ENOMEM, libc::EPERM, libc::EAGAIN].contains(&e) {
                Error::Memlock {
                    bytes: umem.len(),
                    errno: e,
                }
            } else {
                Error::sys("registering the UMEM (XDP_UMEM_REG)", e)
            }
        })?;
        let set = |name, what| {
            sys::setsockopt(f, sys::SOL_XDP, name, &n).map_err(|e| Error::sys(what, e))
        };
        set(sys::XDP_UMEM_FILL_RING, "sizing the fill ring")?;
        set(sys::XDP_UMEM_COMPLETION_RING, "sizing the completion ring")?;
        set(sys::XDP_RX_RING, "sizing the RX ring")?;
        set(sys::XDP_TX_RING, "sizing the TX ring")?;
        let (off, _) =
            sys::getsockopt::<sys::XdpMmapOffsets>(f, sys::SOL_XDP, sys::XDP_MMAP_OFFSETS)
                .map_err(|e| Error::sys("reading the ring offsets", e))?;
        let mmap_err = |e| Error::sys("mmap of an AF_XDP ring", e);
        let fill =
            Ring::map(f, &off.fr, n, sys::XDP_UMEM_PGOFF_FILL_RING, true).map_err(mmap_err)?;
        let comp = Ring::map(f, &off.cr, n, sys::XDP_UMEM_PGOFF_COMPLETION_RING, false)
            .map_err(mmap_err)?;
        let rx = Ring::map(f, &off.rx, n, sys::XDP_PGOFF_RX_RING, false).map_err(mmap_err)?;
        let tx = Ring::map(f, &off.tx, n, sys::XDP_PGOFF_TX_RING, true).map_err(mmap_err)?;

        let mut warnings = Vec::new();
        if let Some(bp) = cfg.busy_poll {
            let one: i32 = 1;
            let opts: [(&'static str, libc::c_int, i32); 3] = [
                ("SO_PREFER_BUSY_POLL", sys::SO_PREFER_BUSY_POLL, one),
                ("SO_BUSY_POLL", sys::SO_BUSY_POLL, bp.usecs as i32),
                (
                    "SO_BUSY_POLL_BUDGET",
                    sys::SO_BUSY_POLL_BUDGET,
                    bp.budget as i32,
                ),
            ];
            for (option, name, v) in opts {
                if let Err(errno) = sys::setsockopt(f, libc::SOL_SOCKET, name, &v) {
                    warnings.push(Warning::BusyPoll { option, errno });
                }
            }
        }

        let wake = if cfg.need_wakeup {
            sys::XDP_USE_NEED_WAKEUP
        } else {
            0
        };
        let mode_flags = match cfg.mode {
            XskMode::Auto => 0,
            XskMode::Copy => sys::XDP_COPY,
            XskMode::ZeroCopy => sys::XDP_ZEROCOPY,
        };
        let sg = if cfg.multi_buffer { sys::XDP_USE_SG } else { 0 };
        let addr = sys::SockaddrXdp {
            sxdp_family: sys::AF_XDP as u16,
            sxdp_flags: mode_flags | wake | sg,
            sxdp_ifindex: cfg.ifindex,
            sxdp_queue_id: cfg.queue,
            sxdp_shared_umem_fd: 0,
        };
        sys::bind_xdp(f, &addr).map_err(|errno| match errno {
            libc::EPERM | libc::EACCES => Error::Permission {
                op: "binding the AF_XDP socket",
                errno,
            },
            libc::EINVAL | libc::EOPNOTSUPP
                if cfg.multi_buffer && cfg.mode != XskMode::ZeroCopy =>
            {
                Error::MultiBufferUnsupported {
                    iface: cfg.iface.clone(),
                    errno,
                }
            }
            libc::EOPNOTSUPP | libc::EPROTONOSUPPORT | libc::EINVAL
                if cfg.mode == XskMode::ZeroCopy =>
            {
                Error::ZeroCopyUnsupported {
                    iface: cfg.iface.clone(),
                    queue: cfg.queue,
                    errno,
                }
            }
            _ => Error::Bind {
                iface: cfg.iface.clone(),
                queue: cfg.queue,
                errno,
            },
        })?;
        let mode = match sys::getsockopt::<sys::XdpOptions>(f, sys::SOL_XDP, sys::XDP_OPTIONS) {
            Ok((o, _)) if o.flags & sys::XDP_OPTIONS_ZEROCOPY != 0 => XskMode::ZeroCopy,
            Ok(_) => XskMode::Copy,
            // Kernels before 5.3 have no XDP_OPTIONS: report what we forced.
            Err(_) if cfg.mode == XskMode::ZeroCopy => XskMode::ZeroCopy,
            Err(_) => XskMode::Copy,
        };

        let fs = umem.frame_size() as u64;
        let all: Vec<u64> = (0..umem.frame_count() as u64).map(|i| i * fs).collect();
        let (to_fill, free) = all.split_at(cfg.rx_frames as usize);
        let mut s = XskSocket {
            fill,
            comp,
            rx,
            tx,
            fd,
            umem,
            free: free.to_vec(),
            refill: to_fill.to_vec(),
            mode,
            need_wakeup: cfg.need_wakeup,
            busy_poll: cfg.busy_poll.is_some() && warnings.is_empty(),
            warnings,
            counters: Counters::default(),
            multi_buffer: cfg.multi_buffer,
            gather: Vec::new(),
            built: Vec::new(),
        };
        s.post_fill();
        Ok(s)
    }

    /// The mode obtained: `Copy` or `ZeroCopy`, never `Auto`.
    pub fn mode(&self) -> XskMode {
        self.mode
    }

    /// Non-fatal problems met while opening.
    pub fn warnings(&self) -> &[Warning] {
        &self.warnings
    }

    /// Our counters.
    pub fn counters(&self) -> Counters {
        self.counters
    }

    /// The kernel's counters (`XDP_STATISTICS`).
    pub fn kernel_stats(&self) -> Result<sys::XdpStatistics, Error> {
        sys::getsockopt::<sys::XdpStatistics>(self.fd.as_fd(), sys::SOL_XDP, sys::XDP_STATISTICS)
            .map(|(s, _)| s)
            .map_err(|e| Error::sys("reading XDP_STATISTICS", e))
    }

    /// The UMEM.
    pub fn umem(&self) -> &Umem {
        &self.umem
    }

    /// Frames free for TX right now (without reaping completions).
    pub fn free_frames(&self) -> usize {
        self.free.len()
    }

    /// Put frames waiting in `refill` on the fill ring.
    fn post_fill(&mut self) {
        if self.refill.is_empty() {
            return;
        }
        let n = self.fill.prod_free(self.refill.len() as u32) as usize;
        let n = n.min(self.refill.len());
        for i in self.refill.len() - n..self.refill.len() {
            self.fill.push(self.refill[i]);
        }
        self.refill.truncate(self.refill.len() - n);
        if n > 0 {
            self.fill.submit();
        }
    }

    /// Hand up to `max` received frames to `sink` (slices of the UMEM; a
    /// multi-buffer frame is gathered into one buffer first), then give
    /// their chunks back to the fill ring. Returns how many.
    pub fn rx_burst(&mut self, max: usize, sink: &mut dyn FnMut(&[u8])) -> usize {
        let avail = self.rx.cons_avail(self.rx.size);
        if avail == 0 {
            self.post_fill();
            if self.busy_poll || (self.need_wakeup && self.fill.needs_wakeup()) {
                self.counters.rx_wakeups += 1;
                let _ = sys::kick_rx(self.fd.as_fd());
            }
            return 0;
        }
        let mut delivered = 0usize;
        let mut used = 0u32;
        while used < avail && delivered < max {
            let d = self.rx.peek(used);
            if d.options & sys::XDP_PKT_CONTD == 0 {
                // One descriptor, one frame: straight from the UMEM.
                match self.umem.slice(d.addr, d.len as usize) {
                    Some(frame) => {
                        sink(frame);
                        delivered += 1;
                    }
                    None => self.counters.rx_bad_descs += 1,
                }
                self.refill.push(self.umem.frame_base(d.addr));
                used += 1;
                continue;
            }
            // A multi-buffer frame: its descriptors are published together
            // (the kernel reserves them all or drops the frame); if this
            // batch ends inside one, take it next time.
            let Some(n) = (used..avail)
                .find(|&i| self.rx.peek(i).options & sys::XDP_PKT_CONTD == 0)
                .map(|last| last - used + 1)
            else {
                break;
            };
            self.gather.clear();
            let mut bad = false;
            for i in used..used + n {
                let d = self.rx.peek(i);
                match self.umem.slice(d.addr, d.len as usize) {
                    Some(part) => self.gather.extend_from_slice(part),
                    None => bad = true,
                }
                self.refill.push(self.umem.frame_base(d.addr));
            }
            used += n;
            if bad {
                self.counters.rx_bad_descs += 1;
            } else {
                sink(&self.gather);
                delivered += 1;
                self.counters.rx_multi_buffer += 1;
            }
        }
        self.rx.release(used);
        self.counters.rx_frames += delivered as u64;
        self.post_fill();
        delivered
    }

    /// Move completed TX frames back to the free list.
    fn reap(&mut self) {
        let n = self.comp.cons_avail(self.comp.size);
        for i in 0..n {
            let a = self.comp.peek(i);
            self.free.push(self.umem.frame_base(a));
        }
        if n > 0 {
            self.comp.release(n);
            self.counters.tx_completed += n as u64;
        }
    }

    /// Copy `frame` into free UMEM chunks and queue its TX descriptors
    /// (published by [`flush`](Self::flush)): one chunk, or with
    /// multi-buffer on, as many as the frame needs, chained with
    /// `XDP_PKT_CONTD`. False if it is too long or no chunk / TX slot is free.
    pub fn tx(&mut self, frame: &[u8]) -> bool {
        self.tx_parts(&[frame])
    }

    /// [`tx`](Self::tx) for a frame given as consecutive parts (headers,
    /// then the payload where it lies): each part is copied straight into
    /// the UMEM chunks, filling one before the next, so the frame is never
    /// assembled anywhere else first.
    pub fn tx_parts(&mut self, frame: &[&[u8]]) -> bool {
        let chunk = self.umem.frame_size() as usize;
        let len: usize = frame.iter().map(|p| p.len()).sum();
        let Some(parts) = self.reserve(len) else {
            return false;
        };
        // The source: part `src`, from octet `at`.
        let (mut src, mut at) = (0, 0);
        for i in 0..parts {
            let Some(addr) = self.free.pop() else {
                return false; // checked above
            };
            let fill = (len - i * chunk).min(chunk);
            let mut off = 0;
            while off < fill {
                let Some(part) = frame.get(src) else {
                    break; // the lengths add up: not reached
                };
                let n = (part.len() - at).min(fill - off);
                // In the chunk by construction (off + n <= fill <= chunk).
                let _ = self.umem.write(addr + off as u64, &part[at..at + n]);
                off += n;
                at += n;
                if at == part.len() {
                    src += 1;
                    at = 0;
                }
            }
            self.tx.push(XdpDesc {
                addr,
                len: fill as u32,
                options: if i + 1 < parts { sys::XDP_PKT_CONTD } else { 0 },
            });
        }
        self.counters.tx_frames += 1;
        true
    }

    /// The chunks a frame of `len` octets takes, once there are that many
    /// free chunks and TX ring slots; `None` (counted) if it is too long
    /// for the socket or there is no room now.
    fn reserve(&mut self, len: usize) -> Option<usize> {
        let chunk = self.umem.frame_size() as usize;
        let parts = len.div_ceil(chunk).max(1);
        if parts > 1 && (!self.multi_buffer || parts > MAX_TX_PARTS) {
            self.counters.tx_too_big += 1;
            return None;
        }
        if !self.room_for(parts) {
            self.counters.tx_full += 1;
            return None;
        }
        Some(parts)
    }

    /// Whether `parts` free chunks and TX ring slots are there, reaping
    /// completions (and kicking the kernel) to make room if not.
    fn room_for(&mut self, parts: usize) -> bool {
        if self.free.len() < parts {
            self.reap();
            if self.free.len() < parts {
                // Get the kernel going on what is queued, then try again.
                self.flush();
            }
        }
        self.free.len() >= parts && self.tx.prod_free(parts as u32) >= parts as u32
    }

    /// Queue a frame of exactly `len` octets that `build` writes in place,
    /// into a free UMEM chunk: `build` gets the chunk's first `len` octets,
    /// and on success the chunk's descriptor goes on the TX ring (published
    /// by [`flush`](Self::flush)); `build` returning false cancels, and the
    /// chunk goes straight back to the free list. Nothing is copied.
    ///
    /// With no chunk or TX slot free (after reaping completions), or a
    /// frame too long, it is refused without calling `build`.
    ///
    /// A frame longer than a chunk (multi-buffer: an MTU of 9000 on
    /// 4096-octet chunks) cannot be built in place: its chunks are not
    /// contiguous in the UMEM. It is built in a scratch buffer and copied
    /// into its chunks as by [`tx_parts`](Self::tx_parts): one extra copy,
    /// for frames over a chunk only.
    pub fn tx_build(&mut self, len: usize, build: &mut dyn FnMut(&mut [u8]) -> bool) -> bool {
        self.tx_build_upto(len, &mut |b| build(b).then_some(len))
    }

    /// [`tx_build`](Self::tx_build) for a frame whose length is known only
    /// once built: `build` gets the chunk's first `max` octets and returns
    /// the frame's length (at most `max`), which goes into the descriptor;
    /// `None` cancels. Frames of up to `max` octets over a chunk are built
    /// in a scratch buffer and copied, as there.
    pub fn tx_build_upto(
        &mut self,
        max: usize,
        build: &mut dyn FnMut(&mut [u8]) -> Option<usize>,
    ) -> bool {
        let Some(parts) = self.reserve(max) else {
            return false;
        };
        if parts > 1 {
            let mut frame = std::mem::take(&mut self.built);
            frame.clear();
            frame.resize(max, 0);
            let sent = match build(&mut frame) {
                // Room checked above: this only copies.
                Some(n) if n <= max => self.tx_parts(&[&frame[..n]]),
                _ => {
                    self.counters.tx_build_cancelled += 1;
                    false
                }
            };
            self.built = frame;
            return sent;
        }
        let Some(addr) = self.free.pop() else {
            return false; // checked above
        };
        let Some(buf) = self.umem.slice_mut(addr, max) else {
            self.free.push(addr); // max <= chunk: not reached
            return false;
        };
        let len = match build(buf) {
            Some(n) if n <= max => n,
            _ => {
                self.free.push(addr);
                self.counters.tx_build_cancelled += 1;
                return false;
            }
        };
        self.tx.push(XdpDesc {
            addr,
            len: len as u32,
            options: 0,
        });
        self.counters.tx_frames += 1;
        self.counters.tx_built += 1;
        true
    }

    /// [`tx_build`](Self::tx_build) for a frame longer than one chunk too
    /// (multi-buffer): `build` gets the chunks themselves as consecutive
    /// pieces, so a jumbo frame is built in place like any other and sent
    /// as one descriptor per chunk (`XDP_PKT_CONTD` on all but the last).
    /// A frame that fits one chunk is lent as one piece.
    pub fn tx_build_sg(
        &mut self,
        len: usize,
        build: &mut dyn FnMut(&mut [&mut [u8]]) -> bool,
    ) -> bool {
        let chunk = self.umem.frame_size() as usize;
        if len <= chunk {
            return self.tx_build(len, &mut |b| build(&mut [b]));
        }
        let Some(parts) = self.reserve(len) else {
            return false;
        };
        let mut spans = [(0u64, 0usize); MAX_TX_PARTS];
        for (i, s) in spans.iter_mut().enumerate().take(parts) {
            let Some(addr) = self.free.pop() else {
                return false; // checked above: not reached
            };
            *s = (addr, (len - i * chunk).min(chunk));
        }
        let spans = &spans[..parts];
        let built = match self.umem.slices_mut(spans) {
            Some(mut pieces) => build(&mut pieces),
            None => false, // distinct free chunks: not reached
        };
        if !built {
            self.free.extend(spans.iter().map(|s| s.0));
            self.counters.tx_build_cancelled += 1;
            return false;
        }
        for (i, &(addr, l)) in spans.iter().enumerate() {
            self.tx.push(XdpDesc {
                addr,
                len: l as u32,
                options: if i + 1 < parts { sys::XDP_PKT_CONTD } else { 0 },
            });
        }
        self.counters.tx_frames += 1;
        self.counters.tx_built += 1;
        true
    }

    /// Publish queued TX descriptors, kick the kernel when it needs it, and
    /// reap completions.
    pub fn flush(&mut self) {
        if self.tx.unpublished() > 0 {
            self.tx.submit();
        }
        // Copy mode: only sendto moves the TX ring (the kernel's generic
        // transmit takes at most 32 descriptors a call and answers EAGAIN
        // for the rest), so kick whenever descriptors wait, whatever the
        // need_wakeup flag says; zero-copy drivers clear the flag while
        // their NAPI loop drains the ring.
        let kick = self.mode == XskMode::Copy || !self.need_wakeup || self.tx.needs_wakeup();
        if self.tx.in_flight() > 0 && kick {
            self.counters.tx_kicks += 1;
            match sys::kick_tx(self.fd.as_fd()) {
                Ok(()) => {}
                Err(libc::EAGAIN | libc::EBUSY | libc::ENOBUFS | libc::ENETDOWN) => {
                    self.counters.tx_kick_again += 1
                }
                Err(_) => self.counters.tx_kick_errors += 1,
            }
        }
        self.reap();
    }
}

impl AsFd for XskSocket {
    fn as_fd(&self) -> BorrowedFd<'_> {
        self.fd.as_fd()
    }
}
