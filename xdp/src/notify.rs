//! Readiness file descriptors for event loops: an [`EventFd`] that a poll
//! loop signals (the iWARP API uses one per completion queue) and a small
//! [`Epoll`] set to wait on several descriptors at once. Plain `libc`
//! wrappers; they live here because this is the crate that may hold
//! `unsafe`.

use std::io;
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, FromRawFd, OwnedFd, RawFd};
use std::time::Duration;

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
        // SAFETY: eventfd takes two integers and returns a new descriptor
        // or -1; no memory is passed.
        let fd = unsafe { libc::eventfd(0, libc::EFD_NONBLOCK | libc::EFD_CLOEXEC) };
        if fd < 0 {
            return Err(io::Error::last_os_error());
        }
        // SAFETY: `fd` was just returned by eventfd, is valid and owned by
        // nothing else.
        Ok(EventFd {
            fd: unsafe { OwnedFd::from_raw_fd(fd) },
        })
    }

    /// Add one to the counter (the descriptor becomes readable). Never
    /// blocks: at the counter's limit (2^64 - 2) the write fails with
    /// EAGAIN and the descriptor is readable anyway, so the error is
    /// ignored.
    pub fn signal(&self) {
        let one: u64 = 1;
        // SAFETY: writes 8 octets from a live local u64 to a descriptor
        // this object owns.
        let _ = unsafe {
            libc::write(
                self.fd.as_raw_fd(),
                (&one as *const u64).cast::<libc::c_void>(),
                8,
            )
        };
    }

    /// Read the counter back to zero; returns what it held (0 if it was
    /// zero already).
    pub fn drain(&self) -> u64 {
        let mut v: u64 = 0;
        // SAFETY: reads at most 8 octets into a live local u64 from a
        // descriptor this object owns.
        let n = unsafe {
            libc::read(
                self.fd.as_raw_fd(),
                (&mut v as *mut u64).cast::<libc::c_void>(),
                8,
            )
        };
        if n == 8 {
            v
        } else {
            0
        }
    }

    /// Wait until the descriptor is readable or `timeout` passes (`None`:
    /// no limit); true if readable. Does not drain.
    pub fn wait(&self, timeout: Option<Duration>) -> io::Result<bool> {
        let mut p = libc::pollfd {
            fd: self.fd.as_raw_fd(),
            events: libc::POLLIN,
            revents: 0,
        };
        loop {
            // SAFETY: one valid pollfd on the stack, count 1.
            let r = unsafe { libc::poll(&mut p, 1, timeout_ms(timeout)) };
            if r >= 0 {
                return Ok(r > 0 && p.revents & libc::POLLIN != 0);
            }
            let e = io::Error::last_os_error();
            if e.kind() != io::ErrorKind::Interrupted {
                return Err(e);
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

/// Milliseconds for poll/epoll_wait: -1 for no limit, rounded up so a short
/// timeout does not become a busy loop.
/// Wait until one of `fds` is readable or `timeout` passes (nanosecond
/// precision, `ppoll(2)`); true if one is readable. At most 4 descriptors.
pub fn wait_readable(fds: &[BorrowedFd<'_>], timeout: Duration) -> io::Result<bool> {
    const MAX: usize = 4;
    let mut p = [libc::pollfd {
        fd: -1,
        events: 0,
        revents: 0,
    }; MAX];
    let n = fds.len().min(MAX);
    for (slot, fd) in p.iter_mut().zip(fds) {
        slot.fd = fd.as_raw_fd();
        slot.events = libc::POLLIN;
    }
    let ts = libc::timespec {
        tv_sec: timeout.as_secs().min(libc::time_t::MAX as u64) as libc::time_t,
        tv_nsec: libc::c_long::from(timeout.subsec_nanos() as i32),
    };
    loop {
        // SAFETY: `p` holds `n` initialised pollfds the kernel may write
        // `revents` into; `ts` is a valid timespec read during the call;
        // a null signal mask leaves the mask unchanged.
        let r = unsafe { libc::ppoll(p.as_mut_ptr(), n as libc::nfds_t, &ts, std::ptr::null()) };
        if r >= 0 {
            return Ok(r > 0);
        }
        let e = io::Error::last_os_error();
        if e.kind() != io::ErrorKind::Interrupted {
            return Err(e);
        }
    }
}

impl iwarp_frame::Doorbell for EventFd {
    fn ring(&self) {
        self.signal();
    }
}

fn timeout_ms(t: Option<Duration>) -> libc::c_int {
    match t {
        None => -1,
        Some(d) => {
            let ms = d.as_nanos().div_ceil(1_000_000);
            ms.min(libc::c_int::MAX as u128) as libc::c_int
        }
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
        // SAFETY: epoll_create1 takes a flag and returns a new descriptor or -1.
        let fd = unsafe { libc::epoll_create1(libc::EPOLL_CLOEXEC) };
        if fd < 0 {
            return Err(io::Error::last_os_error());
        }
        // SAFETY: `fd` was just returned by epoll_create1 and is owned by
        // nothing else.
        Ok(Epoll {
            fd: unsafe { OwnedFd::from_raw_fd(fd) },
        })
    }

    /// Watch `fd` for readability; `token` comes back from [`wait`](Self::wait).
    /// The caller keeps `fd` open while it is in the set.
    pub fn add(&self, fd: BorrowedFd<'_>, token: u64) -> io::Result<()> {
        let mut ev = libc::epoll_event {
            events: libc::EPOLLIN as u32,
            u64: token,
        };
        // SAFETY: both descriptors are valid (one owned here, one borrowed
        // for the call); `ev` is a live local the kernel only reads.
        let r = unsafe {
            libc::epoll_ctl(
                self.fd.as_raw_fd(),
                libc::EPOLL_CTL_ADD,
                fd.as_raw_fd(),
                &mut ev,
            )
        };
        if r < 0 {
            return Err(io::Error::last_os_error());
        }
        Ok(())
    }

    /// Wait up to `timeout` (`None`: no limit) for readable descriptors and
    /// append their tokens to `ready`; returns how many (0 on timeout).
    pub fn wait(&self, ready: &mut Vec<u64>, timeout: Option<Duration>) -> io::Result<usize> {
        const MAX: usize = 32;
        let mut evs = [libc::epoll_event { events: 0, u64: 0 }; MAX];
        loop {
            // SAFETY: `evs` is a live array of MAX events the kernel fills
            // (at most MAX, as passed).
            let n = unsafe {
                libc::epoll_wait(
                    self.fd.as_raw_fd(),
                    evs.as_mut_ptr(),
                    MAX as libc::c_int,
                    timeout_ms(timeout),
                )
            };
            if n >= 0 {
                let n = n as usize;
                ready.extend(evs[..n].iter().map(|e| e.u64));
                return Ok(n);
            }
            let e = io::Error::last_os_error();
            if e.kind() != io::ErrorKind::Interrupted {
                return Err(e);
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
