//! AF_XDP frame device for the iWARP stack, in plain Rust over `libc`.
//!
//! [`XdpDevice`] binds an AF_XDP socket to one queue of an interface and
//! attaches a small XDP program that steers only the stack's own traffic to
//! it: ARP whose target is our IPv4 address and IPv4 whose destination is our
//! address. Everything else goes on to the kernel (`XDP_PASS`), so the host
//! keeps its SSH, DHCP, IPv6 and whatever else shares the interface. It
//! implements [`iwarp_frame::FrameDevice`].
//!
//! Where the stack must use the kernel's own address (a Kubernetes pod has
//! one), [`Config::share`] steers only TCP to the stack's ports
//! ([`SharedPorts`]), leaves ARP to the kernel, and resolves the stack's
//! neighbours through the kernel's neighbour table (rtnetlink).
//!
//! # Why no `afxdp`/libbpf
//!
//! libbpf's (and hence the `afxdp` crate's) default XDP program redirects
//! *all* traffic of a queue to the socket, and loading a program of our own
//! through libbpf means an ELF object built by clang, plus libelf and a C
//! build. Instead — in the style of s2n-quic-xdp — the program is ~30
//! hand-assembled eBPF instructions ([`bpf`]), and this crate drives the
//! `bpf(2)` syscall (`BPF_MAP_CREATE`, `BPF_PROG_LOAD`, `BPF_LINK_CREATE`,
//! `BPF_MAP_UPDATE_ELEM`) and the AF_XDP socket options directly ([`sys`]).
//! No clang, no libelf, no C build, no BTF.
//!
//! # Pieces
//!
//! - [`Umem`]: one anonymous mapping of `frame_count × frame_size`.
//! - [`XskSocket`]: the socket, its fill/completion/RX/TX rings (shared
//!   indexes as `AtomicU32` with Acquire/Release, cached like libxdp's
//!   `xsk.h`), the free-frame list for TX, and the wakeups. A frame is
//!   transmitted either copied into its chunks from parts, or built in
//!   place in a free chunk that the socket lends to the caller
//!   ([`XskSocket::tx_build`], `FrameDevice::tx_build`).
//! - [`Program`] / [`XdpAttachment`]: the XSKMAP, the loaded program, and the
//!   BPF link that keeps it attached (dropping it detaches).
//! - [`XdpDevice`]: all of the above from a [`Config`].
//! - [`EventFd`] / [`Epoll`]: readiness descriptors for event loops,
//!   re-exported from `iwarp_frame::notify` (the device's doorbell is an
//!   `EventFd`).
//! - [`caps::raise_permitted`]: file capabilities given without the
//!   effective bit (`setcap …+p`), made effective at start.
//! - [`in_netns`]: run a closure on a thread inside a network namespace
//!   (tests open devices on veths in namespaces this way).
//!
//! Only this crate of the workspace uses `unsafe`; every block says why it
//! is sound.
#![deny(unsafe_op_in_unsafe_fn)]

pub mod bpf;
pub mod caps;
mod device;
mod error;
mod neigh;
mod program;
mod socket;
mod stats_fmt;
pub mod sys;
mod umem;

pub use bpf::SharedPorts;
pub use device::{in_netns, BusyPoll, Config, Stats, XdpDevice, XskMode};
pub use error::{Error, Warning};
pub use iwarp_frame::notify::{Epoll, EventFd};
pub use program::{AttachMode, Program, XdpAttachment, XskMap};
pub use socket::{Counters, SocketConfig, XskSocket};
pub use sys::XdpStatistics as KernelStats;
pub use umem::Umem;
