//! [`MemifServer`]: a server end that is a frame device from the start
//! and accepts its client in the background, as DPDK's memif server port
//! opens at once and its link comes up when a client connects. A client
//! that leaves is replaced by the next one to connect.
//!
//! A server of several queue pairs ([`MemifServer::bind_queues`]) is one
//! device per queue pair, each for a poll loop of its own; the accepting
//! thread hands each the queue pair of its number of every client it
//! connects, and queue 0's device asks for the next client once its
//! link broke (each device lets go of the old link at its next look).

use std::io;
use std::os::fd::AsFd;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc::{self, Sender};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use iwarp_frame::notify::{wait_readable, EventFd};
use iwarp_frame::{Doorbell, FrameDevice};

use crate::{Config, Listener, Memif, Stats};

/// How often the accepting thread looks whether its server was dropped.
const ACCEPT_SLICE: Duration = Duration::from_millis(100);

/// A memif server end: listening at once, connected when a client comes
/// (and again when a new one comes after it left). Moves no frame while no
/// client is connected (transmits are refused, as on a link that is
/// down).
#[derive(Debug)]
pub struct MemifServer {
    conn: Option<Memif>,
    /// This device's queue pair.
    queue: u16,
    /// Each client's queue pairs as the accepting thread connects it, for
    /// each device to take its own.
    incoming: Arc<Mutex<Incoming>>,
    /// Queue 0's device: asks the accepting thread for the next client.
    want: Option<Sender<()>>,
    /// Stops the accepting thread once every device of the server is gone.
    _stop: Arc<StopOnDrop>,
    /// The last refused client or broken link, for [`status`](Self::status).
    last: Arc<Mutex<Option<String>>>,
    /// One doorbell for the device's life, given to each connection.
    bell: Arc<EventFd>,
    /// Counters of the connections before this one.
    past: Stats,
    clients: u64,
}

/// The queue pairs of the client connected last, each until its device
/// takes it.
#[derive(Debug, Default)]
struct Incoming {
    queues: Vec<Option<Memif>>,
}

/// Raises the accepting thread's stop flag when dropped (by the last
/// device of its server).
#[derive(Debug)]
struct StopOnDrop(Arc<AtomicBool>);

impl Drop for StopOnDrop {
    fn drop(&mut self) {
        self.0.store(true, Ordering::Relaxed);
    }
}

impl MemifServer {
    /// Listen on `cfg.socket` (a stale socket file is replaced, a live
    /// server's is `AddrInUse`) and accept clients on a thread of its own.
    pub fn bind(cfg: Config) -> io::Result<MemifServer> {
        let mut v = Self::bind_queues(cfg, 1)?;
        v.pop()
            .ok_or_else(|| io::Error::other("a memif server of no queue pair"))
    }

    /// [`bind`](Self::bind) for links of `queues` queue pairs (1 to
    /// [`MAX_QUEUES`](crate::MAX_QUEUES)): one device per queue pair, in
    /// order. Each client must bring exactly that many
    /// ([`Memif::connect_queues`]); one that brings another count is
    /// refused ([`status`](Self::status) says so).
    pub fn bind_queues(cfg: Config, queues: u16) -> io::Result<Vec<MemifServer>> {
        let listener = Listener::bind_queues(cfg, queues)?;
        let incoming = Arc::new(Mutex::new(Incoming::default()));
        let (want, want_rx) = mpsc::channel::<()>();
        let stop = Arc::new(AtomicBool::new(false));
        let last = Arc::new(Mutex::new(None));
        let (stop2, last2, tx) = (stop.clone(), last.clone(), incoming.clone());
        std::thread::Builder::new()
            .name("memif-accept".into())
            .spawn(move || {
                // One client at a time: the next is accepted once the
                // device has asked (its client left).
                while want_rx.recv().is_ok() {
                    loop {
                        if stop2.load(Ordering::Relaxed) {
                            return;
                        }
                        match listener.accept_queues_within(ACCEPT_SLICE) {
                            Ok(m) => {
                                tx.lock().unwrap_or_else(|p| p.into_inner()).queues =
                                    m.into_iter().map(Some).collect();
                                break;
                            }
                            Err(e) if e.kind() == io::ErrorKind::TimedOut => {}
                            Err(e) => {
                                *last2.lock().unwrap_or_else(|p| p.into_inner()) =
                                    Some(format!("a client was refused: {e}"));
                            }
                        }
                    }
                }
            })?;
        let _ = want.send(());
        let stop = Arc::new(StopOnDrop(stop));
        let mut want = Some(want);
        (0..queues)
            .map(|queue| {
                Ok(MemifServer {
                    conn: None,
                    queue,
                    incoming: incoming.clone(),
                    want: want.take(),
                    _stop: stop.clone(),
                    last: last.clone(),
                    bell: Arc::new(EventFd::new()?),
                    past: Stats::default(),
                    clients: 0,
                })
            })
            .collect()
    }

    /// This device's queue pair on its link (0 for a server of one).
    pub fn queue(&self) -> u16 {
        self.queue
    }

    /// The connected client's end, if one is connected.
    pub fn connection(&self) -> Option<&Memif> {
        self.conn.as_ref()
    }

    /// Clients connected so far.
    pub fn clients(&self) -> u64 {
        self.clients
    }

    /// Why no client is connected (`None` while one is): waiting for the
    /// first, or what happened to the last (it left, it was refused).
    pub fn status(&self) -> Option<String> {
        if self.conn.is_some() {
            return None;
        }
        let last = self.last.lock().unwrap_or_else(|p| p.into_inner()).clone();
        Some(match last {
            Some(l) => format!("waiting for a client ({l})"),
            None => "waiting for a client".to_owned(),
        })
    }

    /// Counters of every connection so far, summed.
    pub fn stats(&self) -> Stats {
        let mut s = self.past;
        if let Some(c) = &self.conn {
            s += c.stats();
        }
        s
    }

    /// The connection, taking a newly accepted one and letting go of a
    /// broken one.
    fn link(&mut self) -> Option<&mut Memif> {
        if let Some(c) = &self.conn {
            if let Some(why) = c.broken() {
                *self.last.lock().unwrap_or_else(|p| p.into_inner()) =
                    Some(format!("the last client's link broke: {why}"));
                self.past = self.stats();
                self.conn = None;
                if let Some(w) = &self.want {
                    let _ = w.send(());
                }
            }
        }
        if self.conn.is_none() {
            // Not contended: the accepting thread holds it only to hand
            // a client over.
            let taken = self
                .incoming
                .try_lock()
                .ok()
                .and_then(|mut g| g.queues.get_mut(usize::from(self.queue))?.take());
            let mut m = taken?;
            m.set_bell(self.bell.clone());
            self.conn = Some(m);
            self.clients += 1;
        }
        self.conn.as_mut()
    }
}

impl FrameDevice for MemifServer {
    fn rx_burst(&mut self, max: usize, sink: &mut dyn FnMut(&[u8])) -> usize {
        match self.link() {
            Some(c) => c.rx_burst(max, sink),
            None => 0,
        }
    }

    fn tx(&mut self, frame: &[u8]) -> bool {
        self.link().is_some_and(|c| c.tx(frame))
    }

    fn tx_parts(&mut self, parts: &[&[u8]]) -> bool {
        self.link().is_some_and(|c| c.tx_parts(parts))
    }

    fn tx_build(&mut self, len: usize, build: &mut dyn FnMut(&mut [u8]) -> bool) -> bool {
        self.link().is_some_and(|c| c.tx_build(len, build))
    }

    fn tx_build_upto(
        &mut self,
        max: usize,
        build: &mut dyn FnMut(&mut [u8]) -> Option<usize>,
    ) -> bool {
        self.link().is_some_and(|c| c.tx_build_upto(max, build))
    }

    fn flush(&mut self) {
        if let Some(c) = self.conn.as_mut() {
            c.flush();
        }
    }

    fn doorbell(&self) -> Option<Arc<dyn Doorbell>> {
        Some(self.bell.clone() as Arc<dyn Doorbell>)
    }

    fn wait(&mut self, timeout: Duration) {
        match self.link() {
            Some(c) => c.wait(timeout),
            None => {
                // No client yet: sleep on the doorbell, looking for one
                // every 10 ms.
                let _ = wait_readable(&[self.bell.as_fd()], timeout.min(Duration::from_millis(10)));
                self.bell.drain();
            }
        }
    }
}
