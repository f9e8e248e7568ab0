//! The crate without DPDK: same API, every constructor fails with
//! [`Error::Unavailable`], and no value of [`Port`] can exist.

use iwarp_frame::FrameDevice;

use crate::{Counters, Error, PortStats, Queues, RssConf, RSS_KEY_LEN};

/// The largest frame a port sends at the default MTU.
pub const MAX_FRAME: usize = 2048;
/// The MTU `Port::open` configures.
pub const DEFAULT_MTU: u16 = 1500;

/// Always `None`: built without DPDK.
pub fn thread_lcore_id() -> Option<u32> {
    None
}

#[derive(Debug, Clone, Copy)]
enum Never {}

/// The EAL; cannot be initialised in this build.
#[derive(Debug, Clone)]
pub struct Eal(Never);

impl Eal {
    /// Always [`Error::Unavailable`]: built without DPDK.
    pub fn init<I, S>(_args: I) -> Result<Eal, Error>
    where
        I: IntoIterator<Item = S>,
        S: AsRef<str>,
    {
        Err(Error::Unavailable)
    }

    /// The arguments the real build would use (see the DPDK build's docs).
    pub fn vdev_args(vdevs: &[&str]) -> Vec<String> {
        crate::vdev_args(vdevs)
    }

    /// Unreachable: no `Eal` exists.
    pub fn parsed_args(&self) -> usize {
        match self.0 {}
    }
}

/// A port; cannot be opened in this build.
#[derive(Debug)]
pub struct Port(Never, std::marker::PhantomData<std::cell::Cell<()>>);

/// As the real port's (which stops and closes it): code that drops a port
/// explicitly reads the same against the stub.
impl Drop for Port {
    fn drop(&mut self) {
        match self.0 {}
    }
}

impl Port {
    /// Always [`Error::Unavailable`]: built without DPDK.
    pub fn open(_eal: &Eal, _name_or_vdev: &str, _queues: Queues) -> Result<Port, Error> {
        Err(Error::Unavailable)
    }
    /// Always [`Error::Unavailable`]: built without DPDK.
    pub fn open_mtu(
        _eal: &Eal,
        _name_or_vdev: &str,
        _queues: Queues,
        _mtu: u16,
    ) -> Result<Port, Error> {
        Err(Error::Unavailable)
    }
    /// Always [`Error::Unavailable`]: built without DPDK.
    pub fn open_queues(
        _eal: &Eal,
        _name_or_vdev: &str,
        _n: u16,
        _queues: Queues,
        _mtu: u16,
        _rss_key: Option<[u8; RSS_KEY_LEN]>,
    ) -> Result<Vec<PortQueue>, Error> {
        Err(Error::Unavailable)
    }
    /// Unreachable: no `Port` exists.
    pub fn max_frame(&self) -> usize {
        match self.0 {}
    }
    /// Unreachable: no `Port` exists.
    pub fn name(&self) -> &str {
        match self.0 {}
    }
    /// Unreachable: no `Port` exists.
    pub fn port_id(&self) -> u16 {
        match self.0 {}
    }
    /// Unreachable: no `Port` exists.
    pub fn mac_address(&self) -> [u8; 6] {
        match self.0 {}
    }
    /// Unreachable: no `Port` exists.
    pub fn mtu(&self) -> u16 {
        match self.0 {}
    }
    /// Unreachable: no `Port` exists.
    pub fn counters(&self) -> Counters {
        match self.0 {}
    }
    /// Unreachable: no `Port` exists.
    pub fn pool_available(&self) -> u32 {
        match self.0 {}
    }
    /// Unreachable: no `Port` exists.
    pub fn stats(&self) -> Result<PortStats, Error> {
        match self.0 {}
    }
}

impl FrameDevice for Port {
    fn rx_burst(&mut self, _max: usize, _sink: &mut dyn FnMut(&[u8])) -> usize {
        match self.0 {}
    }
    fn tx(&mut self, _frame: &[u8]) -> bool {
        match self.0 {}
    }
}

/// A queue of a port; cannot be opened in this build. Neither it nor
/// [`Port`] is `Sync`, as in the real build.
#[derive(Debug)]
pub struct PortQueue(Never, std::marker::PhantomData<std::cell::Cell<()>>);

/// As the real queue's (which flushes it).
impl Drop for PortQueue {
    fn drop(&mut self) {
        match self.0 {}
    }
}

impl PortQueue {
    /// Unreachable: no `PortQueue` exists.
    pub fn name(&self) -> &str {
        match self.0 {}
    }
    /// Unreachable: no `PortQueue` exists.
    pub fn port_id(&self) -> u16 {
        match self.0 {}
    }
    /// Unreachable: no `PortQueue` exists.
    pub fn queue(&self) -> u16 {
        match self.0 {}
    }
    /// Unreachable: no `PortQueue` exists.
    pub fn queue_count(&self) -> u16 {
        match self.0 {}
    }
    /// Unreachable: no `PortQueue` exists.
    pub fn link_up(&self) -> Result<bool, Error> {
        match self.0 {}
    }
    /// Unreachable: no `PortQueue` exists.
    pub fn rss(&self) -> bool {
        match self.0 {}
    }
    /// Unreachable: no `PortQueue` exists.
    pub fn rss_hashes_sctp(&self) -> bool {
        match self.0 {}
    }
    /// Unreachable: no `PortQueue` exists.
    pub fn rss_conf(&self) -> Result<RssConf, Error> {
        match self.0 {}
    }
    /// Unreachable: no `PortQueue` exists.
    pub fn mac_address(&self) -> [u8; 6] {
        match self.0 {}
    }
    /// Unreachable: no `PortQueue` exists.
    pub fn mtu(&self) -> u16 {
        match self.0 {}
    }
    /// Unreachable: no `PortQueue` exists.
    pub fn max_frame(&self) -> usize {
        match self.0 {}
    }
    /// Unreachable: no `PortQueue` exists.
    pub fn counters(&self) -> Counters {
        match self.0 {}
    }
    /// Unreachable: no `PortQueue` exists.
    pub fn pool_available(&self) -> u32 {
        match self.0 {}
    }
    /// Unreachable: no `PortQueue` exists.
    pub fn stats(&self) -> Result<PortStats, Error> {
        match self.0 {}
    }
}

impl FrameDevice for PortQueue {
    fn rx_burst(&mut self, _max: usize, _sink: &mut dyn FnMut(&[u8])) -> usize {
        match self.0 {}
    }
    fn tx(&mut self, _frame: &[u8]) -> bool {
        match self.0 {}
    }
}
