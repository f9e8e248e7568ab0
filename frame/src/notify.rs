//! Readiness file descriptors for event loops: an [`EventFd`] that a poll
//! loop signals (the iWARP API uses one per completion queue; a backend
//! uses one as its [`Doorbell`](crate::Doorbell)) and a small [`Epoll`] set
//! to wait on several descriptors at once. Thin wrappers over `rustix`'s
//! safe `eventfd`, `poll` (`ppoll(2)`, nanosecond timeouts) and `epoll`:
//! no `unsafe` here. Here rather than in a backend so that the API and
//! every backend share them without depending on each other.

use std::io;
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, OwnedFd, RawFd};
use std::time::Duration;

use rustix::event::{epoll, EventfdFlags, PollFd, PollFlags, Timespec};
use rustix::io::Errno;

/// A non-blocking, close-on-exec `eventfd(2)` counter.
///
/// [`signal`](Self::signal) adds one (from any thread; it never blocks);
/// the descriptor is readable while the counter is non-zero;
/// [`drain`](Self::drain) reads it back to zero.
#[derive(Debug)]
pub struct EventFd {
    fd: OwnedFd,
}

impl EventFd {
    /// A new counter at zero.
    pub fn new() -> io::Result<EventFd> {
        let fd = rustix::event::eventfd(0, EventfdFlags::NONBLOCK | EventfdFlags::CLOEXEC)?;
        Ok(EventFd { fd })
    }

    /// Add one to the counter (the descriptor becomes readable). Never
    /// blocks: at the counter's limit (2^64 - 2) the write fails with
    /// EAGAIN and the descriptor is readable anyway, so the error is
    /// ignored.
    pub fn signal(&self) {
        let _ = rustix::io::write(&self.fd, &1u64.to_ne_bytes());
    }

    /// Read the counter back to zero; returns what it held (0 if it was
    /// zero already).
    pub fn drain(&self) -> u64 {
        let mut v = [0u8; 8];
        match rustix::io::read(&self.fd, &mut v) {
            Ok(8) => u64::from_ne_bytes(v),
            _ => 0,
        }
    }

    /// Wait until the descriptor is readable or `timeout` passes (`None`:
    /// no limit); true if readable. Does not drain.
    pub fn wait(&self, timeout: Option<Duration>) -> io::Result<bool> {
        let ts = timeout.map(timespec);
        loop {
            let mut p = [PollFd::new(&self.fd, PollFlags::IN)];
            match rustix::event::poll(&mut p, ts.as_ref()) {
                Ok(n) => return Ok(n > 0 && p[0].revents().contains(PollFlags::IN)),
                Err(Errno::INTR) => continue,
                Err(e) => return Err(e.into()),
            }
        }
    }
}

impl AsFd for EventFd {
    fn as_fd(&self) -> BorrowedFd<'_> {
        self.fd.as_fd()
    }
}

impl AsRawFd for EventFd {
    fn as_raw_fd(&self) -> RawFd {
        self.fd.as_raw_fd()
    }
}

/// `timeout` as a `Timespec` (seconds beyond `i64` are clamped).
fn timespec(timeout: Duration) -> Timespec {
    Timespec {
        tv_sec: timeout.as_secs().min(i64::MAX as u64) as i64,
        tv_nsec: timeout.subsec_nanos().into(),
    }
}

/// Wait until one of `fds` is readable or `timeout` passes (nanosecond
/// precision, `ppoll(2)`); true if one is readable. At most 4 descriptors.
pub fn wait_readable(fds: &[BorrowedFd<'_>], timeout: Duration) -> io::Result<bool> {
    const MAX: usize = 4;
    let ts = timespec(timeout);
    let n = fds.len().min(MAX);
    loop {
        // On the stack (no allocation per wait): the slots past `n` repeat
        // a descriptor and are not passed.
        let mut p: [PollFd<'_>; MAX] = match fds.first() {
            Some(first) => {
                std::array::from_fn(|i| PollFd::new(fds.get(i).unwrap_or(first), PollFlags::IN))
            }
            None => return sleep_for(&ts),
        };
        match rustix::event::poll(&mut p[..n], Some(&ts)) {
            Ok(n) => return Ok(n > 0),
            Err(Errno::INTR) => continue,
            Err(e) => return Err(e.into()),
        }
    }
}

/// No descriptor to wait for: `ppoll(2)` on none, as before (the whole
/// timeout, or less if a signal came).
fn sleep_for(ts: &Timespec) -> io::Result<bool> {
    match rustix::event::poll(&mut [], Some(ts)) {
        Ok(_) | Err(Errno::INTR) => Ok(false),
        Err(e) => Err(e.into()),
    }
}

impl crate::Doorbell for EventFd {
    fn ring(&self) {
        self.signal();
    }
}

/// An `epoll(7)` set: register descriptors with a token, wait for the
/// readable ones (level-triggered).
#[derive(Debug)]
pub struct Epoll {
    fd: OwnedFd,
}

impl Epoll {
    /// An empty set.
    pub fn new() -> io::Result<Epoll> {
        let fd = epoll::create(epoll::CreateFlags::CLOEXEC)?;
        Ok(Epoll { fd })
    }

    /// Watch `fd` for readability; `token` comes back from [`wait`](Self::wait).
    /// The caller keeps `fd` open while it is in the set.
    pub fn add(&self, fd: BorrowedFd<'_>, token: u64) -> io::Result<()> {
        epoll::add(
            &self.fd,
            fd,
            epoll::EventData::new_u64(token),
            epoll::EventFlags::IN,
        )?;
        Ok(())
    }

    /// Wait up to `timeout` (`None`: no limit; a timeout is rounded up to
    /// whole milliseconds, so a short one does not become a busy loop) for
    /// readable descriptors and append their tokens to `ready`; returns
    /// how many (0 on timeout).
    pub fn wait(&self, ready: &mut Vec<u64>, timeout: Option<Duration>) -> io::Result<usize> {
        const MAX: usize = 32;
        let ts = timeout.map(timespec);
        let mut evs = [std::mem::MaybeUninit::<epoll::Event>::uninit(); MAX];
        loop {
            match epoll::wait(&self.fd, &mut evs[..], ts.as_ref()) {
                Ok((got, _)) => {
                    ready.extend(got.iter().map(|e| e.data.u64()));
                    return Ok(got.len());
                }
                Err(Errno::INTR) => continue,
                Err(e) => return Err(e.into()),
            }
        }
    }
}

impl AsFd for Epoll {
    fn as_fd(&self) -> BorrowedFd<'_> {
        self.fd.as_fd()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn eventfd_is_readable_after_signal_until_drained() {
        let e = EventFd::new().unwrap();
        assert!(!e.wait(Some(Duration::ZERO)).unwrap());
        e.signal();
        e.signal();
        assert!(e.wait(Some(Duration::ZERO)).unwrap());
        assert_eq!(e.drain(), 2);
        assert!(!e.wait(Some(Duration::ZERO)).unwrap());
        assert_eq!(e.drain(), 0);
    }

    #[test]
    fn wait_readable_sees_any_of_its_descriptors_and_times_out() {
        let (a, b) = (EventFd::new().unwrap(), EventFd::new().unwrap());
        let t = Duration::from_millis(30);
        let start = std::time::Instant::now();
        assert!(!wait_readable(&[a.as_fd(), b.as_fd()], t).unwrap());
        assert!(start.elapsed() >= t, "{:?}", start.elapsed());
        b.signal();
        assert!(wait_readable(&[a.as_fd(), b.as_fd()], t).unwrap());
        assert!(!wait_readable(&[a.as_fd()], Duration::ZERO).unwrap());
        let start = std::time::Instant::now();
        assert!(!wait_readable(&[], t).unwrap());
        assert!(start.elapsed() >= t, "{:?}", start.elapsed());
    }

    #[test]
    fn epoll_reports_the_token_of_the_signalled_fd() {
        let (a, b) = (EventFd::new().unwrap(), EventFd::new().unwrap());
        let ep = Epoll::new().unwrap();
        ep.add(a.as_fd(), 7).unwrap();
        ep.add(b.as_fd(), 9).unwrap();
        let mut ready = Vec::new();
        assert_eq!(ep.wait(&mut ready, Some(Duration::ZERO)).unwrap(), 0);
        b.signal();
        assert_eq!(ep.wait(&mut ready, Some(Duration::ZERO)).unwrap(), 1);
        assert_eq!(ready, [9]);
        // Level-triggered: still ready until drained.
        ready.clear();
        assert_eq!(ep.wait(&mut ready, Some(Duration::ZERO)).unwrap(), 1);
        b.drain();
        ready.clear();
        assert_eq!(ep.wait(&mut ready, Some(Duration::ZERO)).unwrap(), 0);
    }
}
