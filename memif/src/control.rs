//! The control channel: one `SOCK_SEQPACKET` Unix socket per link, one
//! [`Msg`] per packet, a descriptor (region memfd, ring eventfd) in the
//! ancillary data of ADD_REGION and ADD_RING.

use std::io::{self, IoSlice, IoSliceMut};
use std::mem::MaybeUninit;
use std::os::fd::{BorrowedFd, OwnedFd};
use std::time::Instant;

use rustix::event::{PollFd, PollFlags, Timespec};
use rustix::io::Errno;
use rustix::net::{
    RecvAncillaryBuffer, RecvAncillaryMessage, RecvFlags, ReturnFlags, SendAncillaryBuffer,
    SendAncillaryMessage, SendFlags,
};

use crate::msg::{Msg, MSG_LEN};

/// A connected control socket.
#[derive(Debug)]
pub struct Control {
    fd: OwnedFd,
}

impl Control {
    pub fn new(fd: OwnedFd) -> Control {
        Control { fd }
    }

    /// Send `m`, with `fd` in its ancillary data if given.
    pub fn send(&self, m: &Msg, fd: Option<BorrowedFd<'_>>) -> io::Result<()> {
        let b = m.encode();
        let mut space = [MaybeUninit::uninit(); rustix::cmsg_space!(ScmRights(1))];
        let mut anc = SendAncillaryBuffer::new(&mut space);
        let fds;
        if let Some(fd) = fd {
            fds = [fd];
            if !anc.push(SendAncillaryMessage::ScmRights(&fds)) {
                return Err(io::Error::other("no room for a descriptor"));
            }
        }
        loop {
            match rustix::net::sendmsg(&self.fd, &[IoSlice::new(&b)], &mut anc, SendFlags::NOSIGNAL)
            {
                Ok(n) if n == MSG_LEN => return Ok(()),
                Ok(n) => return Err(io::Error::other(format!("sent {n} of {MSG_LEN} octets"))),
                Err(Errno::INTR) => continue,
                Err(e) => return Err(e.into()),
            }
        }
    }

    /// Wait until `deadline` for the next message, with the descriptor it
    /// carried if any. A closed socket is `UnexpectedEof`; a message of the
    /// wrong length or type `InvalidData`; no message by the deadline
    /// `TimedOut`.
    pub fn recv(&self, deadline: Instant) -> io::Result<(Msg, Option<OwnedFd>)> {
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            let ts = Timespec {
                tv_sec: left.as_secs() as i64,
                tv_nsec: i64::from(left.subsec_nanos()),
            };
            let mut p = [PollFd::new(&self.fd, PollFlags::IN)];
            match rustix::event::poll(&mut p, Some(&ts)) {
                Ok(0) => {
                    return Err(io::Error::new(
                        io::ErrorKind::TimedOut,
                        "no memif control message in time",
                    ))
                }
                Ok(_) => {}
                Err(Errno::INTR) => continue,
                Err(e) => return Err(e.into()),
            }
            match self.try_recv()? {
                Some(r) => return Ok(r),
                None => continue,
            }
        }
    }

    /// The next message if one is waiting (`None` if none).
    pub fn try_recv(&self) -> io::Result<Option<(Msg, Option<OwnedFd>)>> {
        let mut b = [0u8; MSG_LEN + 1];
        let mut space = [MaybeUninit::uninit(); rustix::cmsg_space!(ScmRights(2))];
        let mut anc = RecvAncillaryBuffer::new(&mut space);
        let r = match rustix::net::recvmsg(
            &self.fd,
            &mut [IoSliceMut::new(&mut b)],
            &mut anc,
            RecvFlags::CMSG_CLOEXEC | RecvFlags::DONTWAIT,
        ) {
            Ok(r) => r,
            Err(Errno::AGAIN) | Err(Errno::INTR) => return Ok(None),
            Err(e) => return Err(e.into()),
        };
        let mut fd = None;
        for m in anc.drain() {
            if let RecvAncillaryMessage::ScmRights(fds) = m {
                for f in fds {
                    // The first descriptor is the message's; any other is
                    // closed as it drops.
                    if fd.is_none() {
                        fd = Some(f);
                    }
                }
            }
        }
        if r.bytes == 0 {
            return Err(io::Error::new(
                io::ErrorKind::UnexpectedEof,
                "the memif peer closed its control socket",
            ));
        }
        if r.flags.contains(ReturnFlags::TRUNC) || r.flags.contains(ReturnFlags::CTRUNC) {
            return Err(io::Error::new(
                io::ErrorKind::InvalidData,
                "a memif control message longer than 128 octets or with too many descriptors",
            ));
        }
        let m = Msg::decode(&b[..r.bytes])
            .map_err(|e| io::Error::new(io::ErrorKind::InvalidData, e.to_string()))?;
        Ok(Some((m, fd)))
    }
}
