//! The kernel ABI: AF_XDP (`linux/if_xdp.h`), the parts of `bpf(2)`
//! (`linux/bpf.h`) and `linux/if_link.h` this crate uses, and thin wrappers
//! around the syscalls that return the errno on failure.
//!
//! Numbers and layouts were checked against the Debian 12 headers
//! (linux-libc-dev 6.1) with a C program printing them, except
//! `xdp_umem_reg::tx_metadata_len` (Linux 6.8), which fills what was the
//! structure's tail padding: the size stays 32 and older kernels require the
//! padding to be zero, which it is.

use std::ffi::CStr;
use std::mem::{size_of, MaybeUninit};
use std::os::fd::{AsRawFd, BorrowedFd, FromRawFd, OwnedFd, RawFd};

// ---------------------------------------------------------------- AF_XDP

/// `AF_XDP` address family.
pub const AF_XDP: libc::c_int = 44;
/// `SOL_XDP` socket option level.
pub const SOL_XDP: libc::c_int = 283;

/// Socket option: read the ring mmap offsets (`struct xdp_mmap_offsets`).
pub const XDP_MMAP_OFFSETS: libc::c_int = 1;
/// Socket option: RX ring size.
pub const XDP_RX_RING: libc::c_int = 2;
/// Socket option: TX ring size.
pub const XDP_TX_RING: libc::c_int = 3;
/// Socket option: register a UMEM (`struct xdp_umem_reg`).
pub const XDP_UMEM_REG: libc::c_int = 4;
/// Socket option: fill ring size.
pub const XDP_UMEM_FILL_RING: libc::c_int = 5;
/// Socket option: completion ring size.
pub const XDP_UMEM_COMPLETION_RING: libc::c_int = 6;
/// Socket option: read `struct xdp_statistics`.
pub const XDP_STATISTICS: libc::c_int = 7;
/// Socket option: read `struct xdp_options`.
pub const XDP_OPTIONS: libc::c_int = 8;

/// `sxdp_flags`: share the UMEM of `sxdp_shared_umem_fd`.
pub const XDP_SHARED_UMEM: u16 = 1 << 0;
/// `sxdp_flags`: force copy mode.
pub const XDP_COPY: u16 = 1 << 1;
/// `sxdp_flags`: force zero-copy mode.
pub const XDP_ZEROCOPY: u16 = 1 << 2;
/// `sxdp_flags`: the kernel may sleep; wake it when a ring says so.
pub const XDP_USE_NEED_WAKEUP: u16 = 1 << 3;
/// `sxdp_flags`: multi-buffer frames (Linux 6.6): a frame longer than a
/// UMEM chunk spans several descriptors.
pub const XDP_USE_SG: u16 = 1 << 4;
/// `xdp_desc.options` bit: more descriptors of this frame follow.
pub const XDP_PKT_CONTD: u32 = 1 << 0;
/// `BPF_PROG_LOAD` flag: the XDP program handles multi-buffer frames
/// (Linux 5.18); needed to attach to an interface whose MTU exceeds a page.
pub const BPF_F_XDP_HAS_FRAGS: u32 = 1 << 5;
/// Ring `flags` bit: the kernel needs a wakeup (sendto / recvfrom / poll).
pub const XDP_RING_NEED_WAKEUP: u32 = 1 << 0;
/// `xdp_options.flags` bit: the socket is bound in zero-copy mode.
pub const XDP_OPTIONS_ZEROCOPY: u32 = 1 << 0;

/// mmap page offset of the RX ring.
pub const XDP_PGOFF_RX_RING: i64 = 0;
/// mmap page offset of the TX ring.
pub const XDP_PGOFF_TX_RING: i64 = 0x8000_0000;
/// mmap page offset of the fill ring.
pub const XDP_UMEM_PGOFF_FILL_RING: i64 = 0x1_0000_0000;
/// mmap page offset of the completion ring.
pub const XDP_UMEM_PGOFF_COMPLETION_RING: i64 = 0x1_8000_0000;

/// Headroom the kernel reserves in front of a received frame in copy mode.
pub const XDP_PACKET_HEADROOM: u32 = 256;

/// `struct xdp_umem_reg` (Linux 6.8 layout; see the module docs).
#[repr(C)]
#[derive(Debug, Clone, Copy, Default)]
pub struct XdpUmemReg {
    /// Start of the packet data area.
    pub addr: u64,
    /// Its length.
    pub len: u64,
    /// Frame size.
    pub chunk_size: u32,
    /// Headroom in front of each frame.
    pub headroom: u32,
    /// `XDP_UMEM_*` flags.
    pub flags: u32,
    /// Tx metadata length (Linux ≥ 6.8; must be 0 before).
    pub tx_metadata_len: u32,
}

/// `struct sockaddr_xdp`.
#[repr(C)]
#[derive(Debug, Clone, Copy, Default)]
pub struct SockaddrXdp {
    /// `AF_XDP`.
    pub sxdp_family: u16,
    /// `XDP_COPY` / `XDP_ZEROCOPY` / `XDP_USE_NEED_WAKEUP` / `XDP_SHARED_UMEM`.
    pub sxdp_flags: u16,
    /// Interface index.
    pub sxdp_ifindex: u32,
    /// Queue id.
    pub sxdp_queue_id: u32,
    /// The socket whose UMEM to share (with `XDP_SHARED_UMEM`).
    pub sxdp_shared_umem_fd: u32,
}

/// `struct xdp_ring_offset`.
#[repr(C)]
#[derive(Debug, Clone, Copy, Default)]
pub struct XdpRingOffset {
    /// Offset of the producer index.
    pub producer: u64,
    /// Offset of the consumer index.
    pub consumer: u64,
    /// Offset of the descriptor array.
    pub desc: u64,
    /// Offset of the flags word.
    pub flags: u64,
}

/// `struct xdp_mmap_offsets`.
#[repr(C)]
#[derive(Debug, Clone, Copy, Default)]
pub struct XdpMmapOffsets {
    /// RX ring.
    pub rx: XdpRingOffset,
    /// TX ring.
    pub tx: XdpRingOffset,
    /// Fill ring.
    pub fr: XdpRingOffset,
    /// Completion ring.
    pub cr: XdpRingOffset,
}

/// `struct xdp_desc`: one RX or TX descriptor.
#[repr(C)]
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct XdpDesc {
    /// UMEM address of the frame data.
    pub addr: u64,
    /// Length.
    pub len: u32,
    /// Options (0).
    pub options: u32,
}

/// `struct xdp_statistics`.
#[repr(C)]
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct XdpStatistics {
    /// Dropped for other reasons.
    pub rx_dropped: u64,
    /// Dropped because of an invalid descriptor.
    pub rx_invalid_descs: u64,
    /// Invalid TX descriptors.
    pub tx_invalid_descs: u64,
    /// Dropped because the RX ring was full.
    pub rx_ring_full: u64,
    /// Times the fill ring was empty when a frame arrived.
    pub rx_fill_ring_empty_descs: u64,
    /// Times the TX ring was empty when the kernel looked.
    pub tx_ring_empty_descs: u64,
}

/// `struct xdp_options`.
#[repr(C)]
#[derive(Debug, Clone, Copy, Default)]
pub struct XdpOptions {
    /// `XDP_OPTIONS_*`.
    pub flags: u32,
}

/// `SO_BUSY_POLL` (asm-generic/socket.h).
pub const SO_BUSY_POLL: libc::c_int = 46;
/// `SO_PREFER_BUSY_POLL`.
pub const SO_PREFER_BUSY_POLL: libc::c_int = 69;
/// `SO_BUSY_POLL_BUDGET`.
pub const SO_BUSY_POLL_BUDGET: libc::c_int = 70;

// ---------------------------------------------------------------- bpf(2)

/// `BPF_MAP_CREATE`.
pub const BPF_MAP_CREATE: libc::c_int = 0;
/// `BPF_MAP_UPDATE_ELEM`.
pub const BPF_MAP_UPDATE_ELEM: libc::c_int = 2;
/// `BPF_MAP_DELETE_ELEM`.
pub const BPF_MAP_DELETE_ELEM: libc::c_int = 3;
/// `BPF_PROG_LOAD`.
pub const BPF_PROG_LOAD: libc::c_int = 5;
/// `BPF_LINK_CREATE`.
pub const BPF_LINK_CREATE: libc::c_int = 28;

/// `BPF_MAP_TYPE_XSKMAP`.
pub const BPF_MAP_TYPE_XSKMAP: u32 = 17;
/// `BPF_PROG_TYPE_XDP`.
pub const BPF_PROG_TYPE_XDP: u32 = 6;
/// `BPF_XDP` attach type.
pub const BPF_XDP: u32 = 37;
/// `BPF_ANY` map update flag.
pub const BPF_ANY: u64 = 0;

/// `XDP_FLAGS_UPDATE_IF_NOEXIST` (if_link.h).
pub const XDP_FLAGS_UPDATE_IF_NOEXIST: u32 = 1 << 0;
/// `XDP_FLAGS_SKB_MODE`: generic XDP, in the stack after the skb is built.
pub const XDP_FLAGS_SKB_MODE: u32 = 1 << 1;
/// `XDP_FLAGS_DRV_MODE`: native XDP, in the driver.
pub const XDP_FLAGS_DRV_MODE: u32 = 1 << 2;

/// `XDP_ABORTED` action.
pub const XDP_ABORTED: i32 = 0;
/// `XDP_DROP` action.
pub const XDP_DROP: i32 = 1;
/// `XDP_PASS` action.
pub const XDP_PASS: i32 = 2;

/// Helper id of `bpf_redirect_map`.
pub const BPF_FUNC_REDIRECT_MAP: i32 = 51;

/// `bpf_attr` for `BPF_MAP_CREATE` (the prefix we use).
#[repr(C)]
#[derive(Debug, Clone, Copy, Default)]
pub struct MapCreateAttr {
    /// Map type.
    pub map_type: u32,
    /// Key size.
    pub key_size: u32,
    /// Value size.
    pub value_size: u32,
    /// Entries.
    pub max_entries: u32,
    /// Flags.
    pub map_flags: u32,
    /// Inner map (maps of maps).
    pub inner_map_fd: u32,
    /// NUMA node.
    pub numa_node: u32,
    /// Name (NUL-padded, ≤ 15 characters).
    pub map_name: [u8; 16],
}

/// `bpf_attr` for `BPF_MAP_*_ELEM`.
#[repr(C)]
#[derive(Debug, Clone, Copy, Default)]
pub struct MapElemAttr {
    /// Map.
    pub map_fd: u32,
    /// Padding before the aligned key pointer.
    pub _pad: u32,
    /// Pointer to the key.
    pub key: u64,
    /// Pointer to the value.
    pub value: u64,
    /// `BPF_ANY` etc.
    pub flags: u64,
}

/// `bpf_attr` for `BPF_PROG_LOAD` (up to `expected_attach_type`).
#[repr(C)]
#[derive(Debug, Clone, Copy, Default)]
pub struct ProgLoadAttr {
    /// Program type.
    pub prog_type: u32,
    /// Number of instructions.
    pub insn_cnt: u32,
    /// Pointer to the instructions.
    pub insns: u64,
    /// Pointer to the NUL-terminated license.
    pub license: u64,
    /// Verifier log level.
    pub log_level: u32,
    /// Log buffer size.
    pub log_size: u32,
    /// Pointer to the log buffer.
    pub log_buf: u64,
    /// Unused.
    pub kern_version: u32,
    /// Flags.
    pub prog_flags: u32,
    /// Name.
    pub prog_name: [u8; 16],
    /// Offload target.
    pub prog_ifindex: u32,
    /// Expected attach type.
    pub expected_attach_type: u32,
}

/// `bpf_attr` for `BPF_LINK_CREATE` (the XDP part).
#[repr(C)]
#[derive(Debug, Clone, Copy, Default)]
pub struct LinkCreateAttr {
    /// Program.
    pub prog_fd: u32,
    /// Interface index.
    pub target_ifindex: u32,
    /// `BPF_XDP`.
    pub attach_type: u32,
    /// `XDP_FLAGS_*`.
    pub flags: u32,
}

/// A 16-octet object name, NUL-padded.
pub fn obj_name(name: &str) -> [u8; 16] {
    let mut out = [0u8; 16];
    for (o, b) in out.iter_mut().zip(name.bytes().take(15)) {
        *o = b;
    }
    out
}

// ---------------------------------------------------------------- wrappers

/// The calling thread's errno.
pub fn errno() -> i32 {
    std::io::Error::last_os_error().raw_os_error().unwrap_or(0)
}

/// Marker for `#[repr(C)]` plain-old-data structures the kernel reads or
/// fills: every bit pattern is valid and there are no pointers to own.
///
/// # Safety
/// Implementors must be `#[repr(C)]`, contain only integers and arrays of
/// integers, and be valid for every bit pattern.
pub unsafe trait Pod: Copy {}
// SAFETY: all of these are #[repr(C)] structs of integers (or integers).
unsafe impl Pod for XdpUmemReg {}
// SAFETY: as above.
unsafe impl Pod for XdpMmapOffsets {}
// SAFETY: as above.
unsafe impl Pod for XdpStatistics {}
// SAFETY: as above.
unsafe impl Pod for XdpOptions {}
// SAFETY: as above.
unsafe impl Pod for MapCreateAttr {}
// SAFETY: as above.
unsafe impl Pod for MapElemAttr {}
// SAFETY: as above.
unsafe impl Pod for ProgLoadAttr {}
// SAFETY: as above.
unsafe impl Pod for LinkCreateAttr {}
// SAFETY: plain integers.
unsafe impl Pod for u32 {}
// SAFETY: plain integers.
unsafe impl Pod for i32 {}

/// `bpf(cmd, attr, sizeof attr)`; returns the result (an fd for the
/// creating commands) or the errno.
///
/// # Safety
/// Every pointer stored in `attr` must be valid for what `cmd` does with it
/// (read or write, and the length given alongside) for the call's duration.
pub unsafe fn bpf<T: Pod>(cmd: libc::c_int, attr: &mut T) -> Result<libc::c_long, i32> {
    // SAFETY: `attr` is a valid, writable `T` of the size we pass; the
    // kernel reads at most that many octets (treating the rest of its
    // `union bpf_attr` as zero) and may write results back into it. The
    // pointers inside are the caller's obligation (see # Safety).
    let r = unsafe {
        libc::syscall(
            libc::SYS_bpf,
            cmd,
            attr as *mut T as *mut libc::c_void,
            size_of::<T>() as libc::c_uint,
        )
    };
    if r < 0 {
        Err(errno())
    } else {
        Ok(r)
    }
}

/// Take ownership of a file descriptor a syscall just returned.
pub fn owned_fd(fd: libc::c_long) -> OwnedFd {
    // SAFETY: `fd` was just returned by a successful syscall that creates a
    // new descriptor, nothing else owns it, and it is in range for RawFd.
    unsafe { OwnedFd::from_raw_fd(fd as RawFd) }
}

/// `socket(domain, type | SOCK_CLOEXEC, 0)`.
pub fn socket(domain: libc::c_int, ty: libc::c_int) -> Result<OwnedFd, i32> {
    // SAFETY: socket(2) takes no pointers.
    let fd = unsafe { libc::socket(domain, ty | libc::SOCK_CLOEXEC, 0) };
    if fd < 0 {
        Err(errno())
    } else {
        Ok(owned_fd(fd as libc::c_long))
    }
}

/// `setsockopt(fd, level, name, &value, sizeof value)`.
pub fn setsockopt<T: Pod>(
    fd: BorrowedFd<'_>,
    level: libc::c_int,
    name: libc::c_int,
    value: &T,
) -> Result<(), i32> {
    // SAFETY: `value` points to a readable `T` of the length we pass; the
    // kernel only reads it.
    let r = unsafe {
        libc::setsockopt(
            fd.as_raw_fd(),
            level,
            name,
            value as *const T as *const libc::c_void,
            size_of::<T>() as libc::socklen_t,
        )
    };
    if r < 0 {
        Err(errno())
    } else {
        Ok(())
    }
}

/// `getsockopt(fd, level, name, &out, &len)`; returns the value and the
/// length the kernel wrote (older kernels write shorter versions of some
/// structures; the rest stays zero).
pub fn getsockopt<T: Pod + Default>(
    fd: BorrowedFd<'_>,
    level: libc::c_int,
    name: libc::c_int,
) -> Result<(T, usize), i32> {
    let mut out = T::default();
    let mut len = size_of::<T>() as libc::socklen_t;
    // SAFETY: `out` is a writable `T` of `len` octets and `len` a writable
    // socklen_t; the kernel writes at most `len` octets and any bit pattern
    // is a valid `T` (Pod).
    let r = unsafe {
        libc::getsockopt(
            fd.as_raw_fd(),
            level,
            name,
            &mut out as *mut T as *mut libc::c_void,
            &mut len,
        )
    };
    if r < 0 {
        Err(errno())
    } else {
        Ok((out, len as usize))
    }
}

/// `bind(fd, &sockaddr_xdp, sizeof)`.
pub fn bind_xdp(fd: BorrowedFd<'_>, addr: &SockaddrXdp) -> Result<(), i32> {
    // SAFETY: `addr` is a readable sockaddr_xdp of the length we pass.
    let r = unsafe {
        libc::bind(
            fd.as_raw_fd(),
            addr as *const SockaddrXdp as *const libc::sockaddr,
            size_of::<SockaddrXdp>() as libc::socklen_t,
        )
    };
    if r < 0 {
        Err(errno())
    } else {
        Ok(())
    }
}

/// Kick the TX path: `sendto(fd, NULL, 0, MSG_DONTWAIT, NULL, 0)`.
pub fn kick_tx(fd: BorrowedFd<'_>) -> Result<(), i32> {
    // SAFETY: a zero-length send with null buffer and address is valid;
    // the kernel dereferences neither.
    let r = unsafe {
        libc::sendto(
            fd.as_raw_fd(),
            std::ptr::null(),
            0,
            libc::MSG_DONTWAIT,
            std::ptr::null(),
            0,
        )
    };
    if r < 0 {
        Err(errno())
    } else {
        Ok(())
    }
}

/// Wake the RX/fill path: `recvfrom(fd, NULL, 0, MSG_DONTWAIT, NULL, NULL)`.
pub fn kick_rx(fd: BorrowedFd<'_>) -> Result<(), i32> {
    // SAFETY: a zero-length receive with null buffer and address is valid.
    let r = unsafe {
        libc::recvfrom(
            fd.as_raw_fd(),
            std::ptr::null_mut(),
            0,
            libc::MSG_DONTWAIT,
            std::ptr::null_mut(),
            std::ptr::null_mut(),
        )
    };
    if r < 0 {
        Err(errno())
    } else {
        Ok(())
    }
}

/// `if_nametoindex(name)`; `None` when there is no such interface in the
/// calling thread's network namespace (or the name is not a C string).
pub fn if_nametoindex(name: &str) -> Option<u32> {
    let c = std::ffi::CString::new(name).ok()?;
    // SAFETY: `c` is a valid NUL-terminated string for the call's duration.
    let i = unsafe { libc::if_nametoindex(c.as_ptr()) };
    (i != 0).then_some(i)
}

fn ifreq_for(name: &str) -> Option<libc::ifreq> {
    if name.is_empty() || name.len() >= libc::IFNAMSIZ || name.contains('\0') {
        return None;
    }
    // SAFETY: ifreq is a C struct of integers, arrays and a union of such;
    // all-zero is a valid value.
    let mut ifr: libc::ifreq = unsafe { MaybeUninit::zeroed().assume_init() };
    for (d, s) in ifr.ifr_name.iter_mut().zip(name.bytes()) {
        *d = s as libc::c_char;
    }
    Some(ifr)
}

/// The hardware address and MTU of interface `name` (SIOCGIFHWADDR,
/// SIOCGIFMTU on a throw-away AF_INET socket, so in the calling thread's
/// network namespace).
pub fn if_hwaddr_mtu(name: &str) -> Result<([u8; 6], u32), i32> {
    let sock = socket(libc::AF_INET, libc::SOCK_DGRAM)?;
    let mut ifr = ifreq_for(name).ok_or(libc::EINVAL)?;
    // SAFETY: SIOCGIFHWADDR reads the name from and writes the address into
    // `ifr`, a valid, writable ifreq.
    if unsafe { libc::ioctl(sock.as_raw_fd(), libc::SIOCGIFHWADDR, &mut ifr) } < 0 {
        return Err(errno());
    }
    // SAFETY: after SIOCGIFHWADDR succeeded the union holds ifru_hwaddr.
    let sa = unsafe { ifr.ifr_ifru.ifru_hwaddr };
    let mut mac = [0u8; 6];
    for (m, b) in mac.iter_mut().zip(sa.sa_data.iter()) {
        *m = *b as u8;
    }
    let mut ifr = ifreq_for(name).ok_or(libc::EINVAL)?;
    // SAFETY: as above, for SIOCGIFMTU.
    if unsafe { libc::ioctl(sock.as_raw_fd(), libc::SIOCGIFMTU, &mut ifr) } < 0 {
        return Err(errno());
    }
    // SAFETY: after SIOCGIFMTU succeeded the union holds ifru_mtu.
    let mtu = unsafe { ifr.ifr_ifru.ifru_mtu };
    Ok((mac, mtu.max(0) as u32))
}

/// Raise RLIMIT_MEMLOCK so that `extra` more octets can be locked, if the
/// process may (older kernels charge UMEM to it; ≥ 5.11 charge the memory
/// cgroup instead). Failure is ignored: registration reports it.
pub fn raise_memlock(extra: u64) {
    let mut lim = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: `lim` is a valid, writable rlimit.
    if unsafe { libc::getrlimit(libc::RLIMIT_MEMLOCK, &mut lim) } != 0 {
        return;
    }
    if lim.rlim_cur == libc::RLIM_INFINITY {
        return;
    }
    let want = lim.rlim_cur.saturating_add(extra);
    let new = libc::rlimit {
        rlim_cur: if lim.rlim_max == libc::RLIM_INFINITY {
            want
        } else {
            want.min(lim.rlim_max)
        },
        rlim_max: lim.rlim_max,
    };
    let raised = libc::rlimit {
        rlim_cur: want,
        rlim_max: want.max(lim.rlim_max),
    };
    // SAFETY: valid rlimit values by pointer; raising rlim_max needs
    // CAP_SYS_RESOURCE and fails harmlessly without it.
    unsafe {
        if libc::setrlimit(libc::RLIMIT_MEMLOCK, &raised) != 0 {
            libc::setrlimit(libc::RLIMIT_MEMLOCK, &new);
        }
    }
}

/// A C string literal's pointer as the u64 the bpf attrs want.
pub fn cstr_ptr(s: &CStr) -> u64 {
    s.as_ptr() as u64
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::mem::{offset_of, size_of};

    #[test]
    fn layouts_match_the_headers() {
        assert_eq!(size_of::<XdpUmemReg>(), 32);
        assert_eq!(size_of::<SockaddrXdp>(), 16);
        assert_eq!(size_of::<XdpMmapOffsets>(), 128);
        assert_eq!(size_of::<XdpStatistics>(), 48);
        assert_eq!(size_of::<XdpDesc>(), 16);
        assert_eq!(offset_of!(ProgLoadAttr, log_buf), 32);
        assert_eq!(offset_of!(ProgLoadAttr, expected_attach_type), 68);
        assert_eq!(offset_of!(MapElemAttr, key), 8);
        assert_eq!(size_of::<LinkCreateAttr>(), 16);
        assert_eq!(offset_of!(MapCreateAttr, map_name), 28);
    }

    #[test]
    fn names_are_truncated_and_nul_padded() {
        assert_eq!(&obj_name("abc")[..4], b"abc\0");
        let long = obj_name("0123456789abcdefXYZ");
        assert_eq!(&long[..15], b"0123456789abcde");
        assert_eq!(long[15], 0);
    }
}
