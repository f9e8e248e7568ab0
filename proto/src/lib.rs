//! I/O-free iWARP protocol core.
//!
//! The three iWARP layers as state machines that take bytes in and give bytes,
//! completions and events out, never touching a socket or a clock:
//!
//! * [`wire`]: header formats of MPA (RFC 5044/6581), DDP (RFC 5041) and RDMAP
//!   (RFC 5040), as zero-copy views plus plain representations;
//! * [`crc`]: CRC32c in MPA's byte order;
//! * [`mpa`]: FPDU framing (length, PAD, CRC, markers) and the streaming
//!   deframer that hands DDP headers and payload pieces to placement as they
//!   arrive, across any TCP segmentation;
//! * [`mem`]: protection domains, memory registration, memory windows and
//!   STag checks;
//! * [`qp`]: the DDP/RDMAP endpoint (one RDMAP stream): untagged queues, tagged
//!   placement, Read Request/Response with IRD/ORD, Send variants, Terminate,
//!   and the completion ordering of RFC 5040 §5.5; scatter/gather lists,
//!   signaled and unsignaled requests, verbs completion statuses; over MPA
//!   or over DDP/SCTP's whole, unordered segments (`qp::llp`);
//! * [`srq`]: the shared receive queue several QPs take receive buffers from;
//! * [`txq`]: one-copy transmit: FPDUs as descriptors of registered memory,
//!   written into each frame as it is built.
//!
//! The same code runs inline in a pinned poll loop, under DPDK, and inside the
//! deterministic simulator (`iwarp-sim`).
#![forbid(unsafe_code)]
#![warn(missing_docs)]

pub mod crc;
#[doc(hidden)]
pub mod hostile;
pub mod mem;
pub mod mpa;
pub mod qp;
pub mod srq;
pub mod txq;
pub mod wire;
