//! The links tests, examples and benchmarks run the stack over, in one
//! place. Each carries frames (or segments) between engines with no
//! network and no privileges:
//!
//! | link | clock | carries | faults |
//! |---|---|---|---|
//! | [`MemDevice`] | wall (real poll loops) | Ethernet frames | none |
//! | [`FaultyDevice`] | wall (real poll loops) | Ethernet frames | [`Faults`]: loss, reorder, duplication, corruption, delay |
//! | [`virtual_link::VirtualLink`] | virtual, stepped | Ethernet frames between two engines | [`virtual_link::LinkFaults`]: the same plus loss bursts |
//! | [`TcpHost`] | wall (a real poll loop) | bare TCP segments for one [`IwarpOverTcp`](crate::over_tcp::IwarpOverTcp) | none |
//!
//! Every fault decision comes from one seeded
//! [`SplitMix64`](iwarp_frame::SplitMix64), so a seed replays the same
//! pattern for the same frame sequence; [`iwarp_frame::RxLoss`] (receive
//! loss on any device, AF_XDP included) draws from the same generator.
//! Links that live elsewhere, because of what they may depend on: the
//! byte-stream and segment simulators of `iwarp-sim` (`sim/`, on virtual
//! time; `sim::tcp_link` runs [`IwarpOverTcp`](crate::over_tcp::IwarpOverTcp)
//! pairs), and tcp-lite's in-module `Pair` (tcp-lite cannot depend on this
//! crate).

mod mem;
mod tcp_host;
pub mod virtual_link;

pub use mem::{Faults, FaultyDevice, MemDevice};
pub use tcp_host::TcpHost;
