//! [`MemifServer`]: a server end that is a frame device from the start
//! and accepts its client in the background, as DPDK's memif server port
//! opens at once and its link comes up when a client connects. A client
//! that leaves is replaced by the next one to connect.

use std::io;
use std::os::fd::AsFd;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc::{self, Receiver, Sender, TryRecvError};
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
    incoming: Receiver<Memif>,
    want: Sender<()>,
    stop: Arc<AtomicBool>,
    /// The last refused client or broken link, for [`status`](Self::status).
    last: Arc<Mutex<Option<String>>>,
    /// One doorbell for the device's life, given to each connection.
    bell: Arc<EventFd>,
    /// Counters of the connections before this one.
    past: Stats,
    clients: u64,
}

impl MemifServer {
    /// Listen on `cfg.socket` (a stale socket file is replaced, a live
    /// server's is `AddrInUse`) and accept clients on a thread of its own.
    pub fn bind(cfg: Config) -> io::Result<MemifServer> {
        let listener = Listener::bind(cfg)?;
        let (tx, incoming) = mpsc::channel();
        let (want, want_rx) = mpsc::channel::<()>();
        let stop = Arc::new(AtomicBool::new(false));
        let last = Arc::new(Mutex::new(None));
        let (stop2, last2) = (stop.clone(), last.clone());
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
                        match listener.accept_within(ACCEPT_SLICE) {
                            Ok(m) => {
                                if tx.send(m).is_err() {
                                    return;
                                }
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
        Ok(MemifServer {
            conn: None,
            incoming,
            want,
            stop,
            last,
            bell: Arc::new(EventFd::new()?),
            past: Stats::default(),
            clients: 0,
        })
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
                let _ = self.want.send(());
            }
        }
        if self.conn.is_none() {
            match self.incoming.try_recv() {
                Ok(mut m) => {
                    m.set_bell(self.bell.clone());
                    self.conn = Some(m);
                    self.clients += 1;
                }
                Err(TryRecvError::Empty) | Err(TryRecvError::Disconnected) => return None,
            }
        }
        self.conn.as_mut()
    }
}

impl Drop for MemifServer {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
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
