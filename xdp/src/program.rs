//! The XSKMAP, the loaded filter program, and its attachment to an
//! interface through a BPF link.

use std::os::fd::{AsFd, AsRawFd, BorrowedFd, OwnedFd};

use crate::bpf::{xdp_filter_program, xdp_shared_program, Insn, SharedPorts};
use crate::error::Error;
use crate::sys;

/// Where to run the XDP program.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum AttachMode {
    /// Driver mode if the driver supports it, generic (SKB) mode otherwise.
    #[default]
    Auto,
    /// Generic XDP (`XDP_FLAGS_SKB_MODE`): after the kernel built the skb;
    /// works on every interface, copies.
    Skb,
    /// Native XDP in the driver (`XDP_FLAGS_DRV_MODE`).
    Driver,
}

/// A `BPF_MAP_TYPE_XSKMAP`: queue id → AF_XDP socket.
#[derive(Debug)]
pub struct XskMap {
    fd: OwnedFd,
    max_entries: u32,
}

impl XskMap {
    /// A map with room for queues `0..max_entries`.
    pub fn new(max_entries: u32) -> Result<XskMap, Error> {
        let mut attr = sys::MapCreateAttr {
            map_type: sys::BPF_MAP_TYPE_XSKMAP,
            key_size: 4,
            value_size: 4,
            max_entries,
            map_name: sys::obj_name("iwarp_xsks"),
            ..Default::default()
        };
        // SAFETY: MapCreateAttr holds no pointers.
        let fd = unsafe { sys::bpf(sys::BPF_MAP_CREATE, &mut attr) }
            .map_err(|e| Error::sys("creating the XSKMAP (bpf BPF_MAP_CREATE)", e))?;
        Ok(XskMap {
            fd: sys::owned_fd(fd),
            max_entries,
        })
    }

    /// Its size.
    pub fn max_entries(&self) -> u32 {
        self.max_entries
    }

    /// Steer queue `queue` to the bound AF_XDP socket `socket`.
    pub fn insert(&self, queue: u32, socket: BorrowedFd<'_>) -> Result<(), Error> {
        if queue >= self.max_entries {
            return Err(Error::InvalidConfig {
                reason: "queue id is not below the XSKMAP size",
            });
        }
        let key: u32 = queue;
        let value: u32 = socket.as_raw_fd() as u32;
        let mut attr = sys::MapElemAttr {
            map_fd: self.fd.as_raw_fd() as u32,
            key: &key as *const u32 as u64,
            value: &value as *const u32 as u64,
            flags: sys::BPF_ANY,
            ..Default::default()
        };
        // SAFETY: `key` and `value` are live u32s (the map's key and value
        // sizes) for the duration of the call; the kernel only reads them.
        unsafe { sys::bpf(sys::BPF_MAP_UPDATE_ELEM, &mut attr) }
            .map_err(|e| Error::sys("inserting the socket into the XSKMAP", e))?;
        Ok(())
    }

    /// Remove queue `queue`'s entry (its traffic then passes to the kernel).
    pub fn remove(&self, queue: u32) -> Result<(), Error> {
        let key: u32 = queue;
        let mut attr = sys::MapElemAttr {
            map_fd: self.fd.as_raw_fd() as u32,
            key: &key as *const u32 as u64,
            ..Default::default()
        };
        // SAFETY: `key` is a live u32 for the call; the kernel only reads it.
        unsafe { sys::bpf(sys::BPF_MAP_DELETE_ELEM, &mut attr) }
            .map_err(|e| Error::sys("removing from the XSKMAP", e))?;
        Ok(())
    }
}

impl AsFd for XskMap {
    fn as_fd(&self) -> BorrowedFd<'_> {
        self.fd.as_fd()
    }
}

/// The loaded filter program (not attached yet) and its XSKMAP.
#[derive(Debug)]
pub struct Program {
    fd: OwnedFd,
    map: XskMap,
    insns: usize,
}

/// License string handed to the kernel. `bpf_redirect_map` is not GPL-only,
/// but a GPL-compatible license keeps every helper available.
const LICENSE: &std::ffi::CStr = c"Dual MIT/GPL";

impl Program {
    /// Create an XSKMAP for `max_queues` queues and load the filter for
    /// `our_ip`. With `frags`, the program is loaded as multi-buffer aware
    /// (`BPF_F_XDP_HAS_FRAGS`: it reads only the Ethernet, ARP and IPv4
    /// headers, which are always in the first buffer), so it may attach to
    /// an interface with jumbo frames. On a verifier refusal the error
    /// carries the verifier log.
    ///
    /// With `shared`, the address is the kernel's too: the program steers
    /// only TCP to those ports and leaves ARP to the kernel
    /// ([`xdp_shared_program`]).
    pub fn load(
        our_ip: [u8; 4],
        max_queues: u32,
        frags: bool,
        shared: Option<&SharedPorts>,
    ) -> Result<Program, Error> {
        if let Some(p) = shared {
            p.check()
                .map_err(|reason| Error::InvalidConfig { reason })?;
        }
        let map = XskMap::new(max_queues)?;
        let insns = match shared {
            Some(p) => xdp_shared_program(our_ip, p, map.fd.as_raw_fd()),
            None => xdp_filter_program(our_ip, map.fd.as_raw_fd()),
        };
        let fd = load_xdp(&insns, if frags { sys::BPF_F_XDP_HAS_FRAGS } else { 0 })?;
        Ok(Program {
            fd,
            map,
            insns: insns.len(),
        })
    }

    /// The map the program redirects through.
    pub fn map(&self) -> &XskMap {
        &self.map
    }

    /// Number of instructions loaded.
    pub fn len(&self) -> usize {
        self.insns
    }

    /// Always false (a program has instructions).
    pub fn is_empty(&self) -> bool {
        self.insns == 0
    }

    /// Attach to interface `ifindex` (named `iface` in errors) through a BPF
    /// link. `Auto` tries driver mode and falls back to generic mode unless
    /// the interface is busy with another program or privileges are
    /// missing. Detaching is dropping the returned attachment.
    pub fn attach(
        self,
        iface: &str,
        ifindex: u32,
        mode: AttachMode,
    ) -> Result<XdpAttachment, Error> {
        let try_mode = |m: AttachMode| -> Result<OwnedFd, Error> {
            let flags = match m {
                AttachMode::Driver => sys::XDP_FLAGS_DRV_MODE,
                _ => sys::XDP_FLAGS_SKB_MODE,
            };
            let mut attr = sys::LinkCreateAttr {
                prog_fd: self.fd.as_raw_fd() as u32,
                target_ifindex: ifindex,
                attach_type: sys::BPF_XDP,
                flags,
            };
            // SAFETY: LinkCreateAttr holds no pointers.
            match unsafe { sys::bpf(sys::BPF_LINK_CREATE, &mut attr) } {
                Ok(fd) => Ok(sys::owned_fd(fd)),
                Err(e) if e == libc::EBUSY || e == libc::EEXIST => Err(Error::AttachBusy {
                    iface: iface.to_owned(),
                    mode: m,
                    errno: e,
                }),
                Err(e) if e == libc::EPERM || e == libc::EACCES => Err(Error::Permission {
                    op: "attaching the XDP program (bpf BPF_LINK_CREATE)",
                    errno: e,
                }),
                Err(e) => Err(Error::Attach {
                    iface: iface.to_owned(),
                    mode: m,
                    errno: e,
                }),
            }
        };
        let (link, got) = match mode {
            AttachMode::Auto => match try_mode(AttachMode::Driver) {
                Ok(l) => (l, AttachMode::Driver),
                Err(Error::Attach { .. }) => (try_mode(AttachMode::Skb)?, AttachMode::Skb),
                Err(e) => return Err(e),
            },
            m => (try_mode(m)?, m),
        };
        Ok(XdpAttachment {
            link,
            prog: self,
            mode: got,
            ifindex,
        })
    }
}

fn load_xdp(insns: &[Insn], prog_flags: u32) -> Result<OwnedFd, Error> {
    let attempt = |log: Option<&mut Vec<u8>>| {
        let mut attr = sys::ProgLoadAttr {
            prog_type: sys::BPF_PROG_TYPE_XDP,
            insn_cnt: insns.len() as u32,
            insns: insns.as_ptr() as u64,
            license: sys::cstr_ptr(LICENSE),
            prog_name: sys::obj_name("iwarp_xdp"),
            expected_attach_type: sys::BPF_XDP,
            prog_flags,
            ..Default::default()
        };
        if let Some(buf) = log {
            attr.log_level = 1;
            attr.log_size = buf.len() as u32;
            attr.log_buf = buf.as_mut_ptr() as u64;
        }
        // SAFETY: `insns` (insn_cnt × 8 octets, Insn is #[repr(C)] and
        // matches struct bpf_insn) and LICENSE (NUL-terminated) are live and
        // only read; the log buffer, when given, is live, writable and
        // log_size octets long. All outlive the call.
        unsafe { sys::bpf(sys::BPF_PROG_LOAD, &mut attr) }
    };
    match attempt(None) {
        Ok(fd) => Ok(sys::owned_fd(fd)),
        Err(e) if e == libc::EPERM || e == libc::EACCES => Err(Error::Permission {
            op: "loading the XDP program (bpf BPF_PROG_LOAD)",
            errno: e,
        }),
        Err(first) => {
            // Load again with the verifier log on, to say why.
            let mut buf = vec![0u8; 1 << 16];
            match attempt(Some(&mut buf)) {
                Ok(fd) => Ok(sys::owned_fd(fd)),
                Err(e) => {
                    let end = buf.iter().position(|&b| b == 0).unwrap_or(buf.len());
                    Err(Error::ProgramLoad {
                        errno: if e == libc::ENOSPC { first } else { e },
                        log: String::from_utf8_lossy(&buf[..end]).into_owned(),
                    })
                }
            }
        }
    }
}

/// The program attached to an interface. Dropping it closes the link,
/// which detaches the program; the map goes when the last reference does.
#[derive(Debug)]
pub struct XdpAttachment {
    link: OwnedFd,
    prog: Program,
    mode: AttachMode,
    ifindex: u32,
}

impl XdpAttachment {
    /// The mode obtained: `Driver` or `Skb`, never `Auto`.
    pub fn mode(&self) -> AttachMode {
        self.mode
    }

    /// The interface.
    pub fn ifindex(&self) -> u32 {
        self.ifindex
    }

    /// The program.
    pub fn program(&self) -> &Program {
        &self.prog
    }

    /// Steer queue `queue` to `socket` (a bound AF_XDP socket).
    pub fn insert(&self, queue: u32, socket: BorrowedFd<'_>) -> Result<(), Error> {
        self.prog.map.insert(queue, socket)
    }

    /// The link's file descriptor.
    pub fn link_fd(&self) -> BorrowedFd<'_> {
        self.link.as_fd()
    }
}
