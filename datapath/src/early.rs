//! What waits before a connection's queue pair exists, over either
//! transport: the application's posts ([`EarlyWork`]) and the peer's
//! data ([`EarlyData`]).
//!
//! **Posts** wait over TCP until the MPA exchange ends, over SCTP until
//! the DDP Stream Session is accepted: one queue type for both
//! transports, bounded as the queue pair will be. A real queue pair in
//! its INIT state takes receives and holds them; here sends wait too and
//! go out, in posting order, once the queue pair is in full operation.
//! Each kind holds at most its queue's depth (`StreamParams::sq_depth`,
//! `rq_depth`): one more is refused with [`PostError::QueueFull`] at once,
//! as the queue pair would refuse it, so an application that posts in a
//! loop before the connection is up cannot make the loop hold without
//! bound.
//!
//! **Data** a peer sent ahead of full operation is held in one bounded
//! type whichever transport brought it: over MPA the octets behind a
//! Request while our application decides (RFC 5044 §7.1: the initiator
//! sends nothing more before the Reply, so a little is tolerated), over
//! SCTP the DDP segments that overtook the Session Accept (every chunk is
//! unordered, RFC 5043 §10). Past its bound the holder drops everything
//! and the caller fails the setup with `SetupFailure::EarlyData`.

use std::collections::VecDeque;

use iwarp_proto::qp::PostError;

use crate::over_tcp::HostCommand;

/// Posts waiting for a queue pair, each with the time it was posted (the
/// completion latency of a send counts from there).
#[derive(Debug, Default)]
pub struct EarlyWork {
    posts: VecDeque<(HostCommand, u64)>,
    sends: usize,
    recvs: usize,
    sq_depth: usize,
    rq_depth: usize,
}

impl EarlyWork {
    /// An empty queue for a queue pair of these depths.
    pub fn new(sq_depth: usize, rq_depth: usize) -> Self {
        EarlyWork {
            sq_depth,
            rq_depth,
            ..Self::default()
        }
    }

    /// Hold `cmd`, posted at `at`; refused (and not held) once its kind
    /// holds its queue's depth.
    pub fn push(&mut self, cmd: HostCommand, at: u64) -> Result<(), PostError> {
        let (held, depth) = match cmd {
            HostCommand::PostSend(_) => (&mut self.sends, self.sq_depth),
            HostCommand::PostRecv(..) => (&mut self.recvs, self.rq_depth),
        };
        if *held >= depth {
            return Err(PostError::QueueFull);
        }
        *held += 1;
        self.posts.push_back((cmd, at));
        Ok(())
    }

    /// Nothing waits.
    pub fn is_empty(&self) -> bool {
        self.posts.is_empty()
    }

    /// Posts waiting (tests).
    #[cfg(test)]
    fn len(&self) -> usize {
        self.posts.len()
    }

    /// Receives waiting (tests).
    #[cfg(test)]
    fn recvs(&self) -> usize {
        self.recvs
    }

    /// The oldest post.
    pub fn pop_front(&mut self) -> Option<(HostCommand, u64)> {
        let p = self.posts.pop_front()?;
        match p.0 {
            HostCommand::PostSend(_) => self.sends -= 1,
            HostCommand::PostRecv(..) => self.recvs -= 1,
        }
        Some(p)
    }

    /// Take the receives out, in posting order, leaving the sends (a
    /// queue pair takes its receives first, so that what arrives finds
    /// its buffers).
    pub fn take_recvs(&mut self) -> Vec<(HostCommand, u64)> {
        let (recvs, sends): (VecDeque<_>, VecDeque<_>) = std::mem::take(&mut self.posts)
            .into_iter()
            .partition(|(c, _)| matches!(c, HostCommand::PostRecv(..)));
        self.posts = sends;
        self.recvs = 0;
        recvs.into()
    }
}

/// Pieces of data held per connection at most, whatever their octets: a
/// peer sending many tiny segments ahead of the Accept cannot make us
/// keep a header per octet.
pub const MAX_EARLY_PIECES: usize = 4096;

/// The peer's data held until the queue pair exists: pieces in arrival
/// order, each with the DDP stream sequence number it came with (SCTP) or
/// 0 (a byte stream, kept as one growing piece).
#[derive(Debug, Default)]
pub struct EarlyData {
    pieces: Vec<(u16, Vec<u8>)>,
    octets: usize,
    max_octets: usize,
}

/// More was offered than an [`EarlyData`] holds; what it held is dropped.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct EarlyOverflow;

impl EarlyData {
    /// Holds up to `max_octets` octets.
    pub fn new(max_octets: usize) -> Self {
        EarlyData {
            max_octets,
            ..Self::default()
        }
    }

    /// Octets held now (they count against the connection's memory
    /// budget).
    pub fn octets(&self) -> usize {
        self.octets
    }

    /// Nothing held.
    pub fn is_empty(&self) -> bool {
        self.pieces.is_empty()
    }

    /// Room for `n` more octets in one more piece (or, `joined`, in the
    /// last); if not, drop everything held.
    fn admit(&mut self, n: usize, joined: bool) -> Result<(), EarlyOverflow> {
        let pieces = self.pieces.len() + usize::from(!joined);
        if self.octets.saturating_add(n) > self.max_octets || pieces > MAX_EARLY_PIECES {
            self.clear();
            return Err(EarlyOverflow);
        }
        self.octets += n;
        Ok(())
    }

    /// Append byte-stream octets (MPA), joined to what is held.
    pub fn hold_stream(&mut self, data: &[u8]) -> Result<(), EarlyOverflow> {
        if data.is_empty() {
            return Ok(());
        }
        self.admit(data.len(), !self.pieces.is_empty())?;
        match self.pieces.last_mut() {
            Some((_, held)) => held.extend_from_slice(data),
            None => self.pieces.push((0, data.to_vec())),
        }
        Ok(())
    }

    /// Hold one DDP segment (SCTP) that came with sequence number `ssn`.
    pub fn hold_segment(&mut self, ssn: u16, segment: Vec<u8>) -> Result<(), EarlyOverflow> {
        self.admit(segment.len(), false)?;
        self.pieces.push((ssn, segment));
        Ok(())
    }

    /// Everything held, in arrival order, leaving nothing.
    pub fn take(&mut self) -> Vec<(u16, Vec<u8>)> {
        self.octets = 0;
        std::mem::take(&mut self.pieces)
    }

    /// Drop everything held.
    pub fn clear(&mut self) {
        self.octets = 0;
        self.pieces = Vec::new();
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use iwarp_proto::mem::STag;
    use iwarp_proto::qp::{SgList, Sge, WorkRequest};

    fn send(wr_id: u64) -> HostCommand {
        HostCommand::PostSend(WorkRequest::Send {
            wr_id,
            signaled: true,
            solicited: false,
            local: SgList::default(),
            invalidate: None,
        })
    }

    fn recv(wr_id: u64) -> HostCommand {
        HostCommand::PostRecv(
            wr_id,
            Sge {
                stag: STag(1),
                to: 0,
                len: 8,
            }
            .into(),
        )
    }

    fn id(c: &HostCommand) -> u64 {
        match c {
            HostCommand::PostSend(w) => w.wr_id(),
            HostCommand::PostRecv(id, _) => *id,
        }
    }

    /// Each kind holds its queue's depth and no more; what leaves frees
    /// room for its kind alone.
    #[test]
    fn each_kind_holds_its_depth() {
        let mut q = EarlyWork::new(2, 3);
        assert_eq!(q.push(send(1), 0), Ok(()));
        assert_eq!(q.push(send(2), 0), Ok(()));
        assert_eq!(q.push(send(3), 0), Err(PostError::QueueFull));
        for i in 10..13 {
            assert_eq!(q.push(recv(i), 0), Ok(()));
        }
        assert_eq!(q.push(recv(13), 0), Err(PostError::QueueFull));
        assert_eq!((q.len(), q.recvs()), (5, 3));
        // The oldest (a send) leaves: room for one send, not a receive.
        assert_eq!(q.pop_front().map(|p| id(&p.0)), Some(1));
        assert_eq!(q.push(recv(14), 0), Err(PostError::QueueFull));
        assert_eq!(q.push(send(4), 5), Ok(()));
        assert_eq!(q.push(send(5), 5), Err(PostError::QueueFull));
    }

    /// Receives come out first and in order; the sends stay, in order,
    /// and the receive count starts again.
    #[test]
    fn receives_leave_first_in_order() {
        let mut q = EarlyWork::new(4, 4);
        for (i, c) in [send(1), recv(2), send(3), recv(4)].into_iter().enumerate() {
            q.push(c, i as u64).unwrap();
        }
        let r: Vec<_> = q.take_recvs().iter().map(|(c, at)| (id(c), *at)).collect();
        assert_eq!(r, [(2, 1), (4, 3)]);
        assert_eq!(q.recvs(), 0);
        let s: Vec<_> = std::iter::from_fn(|| q.pop_front())
            .map(|(c, at)| (id(&c), at))
            .collect();
        assert_eq!(s, [(1, 0), (3, 2)]);
        assert!(q.is_empty());
        for i in 0..4 {
            assert_eq!(q.push(recv(i), 9), Ok(()));
        }
    }

    /// A byte stream grows one piece up to its bound; one octet more
    /// drops it all.
    #[test]
    fn stream_octets_join_up_to_the_bound() {
        let mut d = EarlyData::new(10);
        assert_eq!(d.hold_stream(b"abcd"), Ok(()));
        assert_eq!(d.hold_stream(b""), Ok(()));
        assert_eq!(d.hold_stream(b"efghij"), Ok(()));
        assert_eq!(d.octets(), 10);
        assert_eq!(d.hold_stream(b"k"), Err(EarlyOverflow));
        assert!(d.is_empty());
        assert_eq!(d.octets(), 0);
        let mut d = EarlyData::new(10);
        d.hold_stream(b"ab").unwrap();
        d.hold_stream(b"cd").unwrap();
        assert_eq!(d.take(), vec![(0, b"abcd".to_vec())]);
        assert_eq!(d.octets(), 0);
    }

    /// Segments keep their sequence numbers and order; the octet bound and
    /// the piece bound each drop everything held when passed, and a
    /// trickle of one-octet stream pieces never meets the piece bound.
    #[test]
    fn segments_keep_order_within_both_bounds() {
        let mut d = EarlyData::new(8);
        d.hold_segment(7, b"abc".to_vec()).unwrap();
        d.hold_segment(5, b"de".to_vec()).unwrap();
        assert_eq!(d.take(), vec![(7, b"abc".to_vec()), (5, b"de".to_vec())]);
        d.hold_segment(1, b"abcdefgh".to_vec()).unwrap();
        assert_eq!(d.hold_segment(2, b"i".to_vec()), Err(EarlyOverflow));
        assert!(d.is_empty());

        let mut d = EarlyData::new(usize::MAX);
        for i in 0..MAX_EARLY_PIECES {
            d.hold_segment(i as u16, Vec::new()).unwrap();
        }
        assert_eq!(d.hold_segment(0, Vec::new()), Err(EarlyOverflow));
        assert!(d.is_empty());

        let mut d = EarlyData::new(usize::MAX);
        for _ in 0..=MAX_EARLY_PIECES {
            d.hold_stream(b"x").unwrap();
        }
        assert_eq!(d.octets(), MAX_EARLY_PIECES + 1);
        assert_eq!(d.take().len(), 1);
    }
}
