//! The rping protocol (rdma-core's `librdmacm/examples/rping.c`) over our
//! API, in both roles, so the lab's `rping` talks to our stack.
//!
//! Each iteration: the client Sends `rping_rdma_info` {be64 addr, be32
//! rkey, be32 len} for its start buffer; the server RDMA Reads it and
//! Sends a go-ahead; the client Sends the info of its sink buffer; the
//! server RDMA Writes what it read into it and Sends a go-ahead; the client
//! compares sink and start. Every Send is exactly 16 octets (rping drops a
//! receive of any other length as "bogus data").

use std::time::{Duration, Instant};

use iwarp::{Access, Cq, Mr, Pd, Qp, Sge, Status, Wc, WcOpcode, WorkRequest};

/// Size of `rping_rdma_info`.
pub const INFO_LEN: usize = 16;

/// How long one step may take (the guests run under TCG).
pub const STEP: Duration = Duration::from_secs(20);

/// `rping_rdma_info` in network byte order.
pub fn info(addr: u64, rkey: u32, len: u32) -> [u8; INFO_LEN] {
    let mut b = [0u8; INFO_LEN];
    b[..8].copy_from_slice(&addr.to_be_bytes());
    b[8..12].copy_from_slice(&rkey.to_be_bytes());
    b[12..].copy_from_slice(&len.to_be_bytes());
    b
}

/// Parse `rping_rdma_info`: (addr, rkey, len).
pub fn parse_info(b: &[u8]) -> Option<(u64, u32, u32)> {
    let a = u64::from_be_bytes(b.get(..8)?.try_into().ok()?);
    let k = u32::from_be_bytes(b.get(8..12)?.try_into().ok()?);
    let l = u32::from_be_bytes(b.get(12..16)?.try_into().ok()?);
    Some((a, k, l))
}

/// rping's start-buffer contents, iteration by iteration: `"rdma-ping-N: "`
/// then letters from a rotating start character, NUL at the end.
#[derive(Debug)]
pub struct Pattern {
    start: u8,
}

impl Default for Pattern {
    fn default() -> Self {
        Pattern { start: b'A' }
    }
}

impl Pattern {
    /// The buffer of iteration `ping` (`size` ≥ 26, rping's minimum).
    pub fn next(&mut self, ping: u32, size: usize) -> Vec<u8> {
        let mut m = format!("rdma-ping-{ping}: ").into_bytes();
        m.truncate(size);
        let mut c = self.start;
        while m.len() < size {
            m.push(c);
            c = if c < b'z' { c + 1 } else { b'A' };
        }
        self.start = if self.start < b'z' {
            self.start + 1
        } else {
            b'A'
        };
        if let Some(last) = m.last_mut() {
            *last = 0;
        }
        m
    }
}

/// Collects the completions of one queue pair and hands them out by work
/// request id (those of other queue pairs sharing the CQ, such as the
/// flushed receives of an earlier connection, are dropped).
#[derive(Debug)]
pub struct Completions {
    cq: Cq,
    qp: usize,
    seen: Vec<Wc>,
}

impl Completions {
    /// The completions of `qp` on `cq`.
    pub fn new(cq: &Cq, qp: &Qp) -> Self {
        Completions {
            cq: cq.clone(),
            qp: qp.id(),
            seen: Vec::new(),
        }
    }

    /// The completion of `wr_id` (successful), waiting up to [`STEP`].
    pub fn take(&mut self, wr_id: u64, what: &str) -> Result<Wc, String> {
        let deadline = Instant::now() + STEP;
        loop {
            if let Some(i) = self.seen.iter().position(|w| w.wr_id == wr_id) {
                let wc = self.seen.remove(i);
                if wc.status != Status::Wc(iwarp::WcStatus::Success) {
                    return Err(format!("{what}: {:?}", wc.status));
                }
                return Ok(wc);
            }
            let left = deadline.saturating_duration_since(Instant::now());
            if left.is_zero() {
                return Err(format!(
                    "{what}: no completion in {STEP:?} (seen {:?})",
                    self.seen
                ));
            }
            if let Some(wc) = self.cq.wait(left.min(Duration::from_millis(100))) {
                if wc.qp == self.qp {
                    self.seen.push(wc);
                }
            }
        }
    }
}

/// Buffers of one side.
#[derive(Debug)]
pub struct Buffers {
    /// Client: the start buffer (read by the server). Server: where the
    /// Read lands and what the Write sends back.
    pub data: Mr,
    /// Client: the sink the server writes into.
    pub sink: Mr,
    /// Outgoing `rping_rdma_info`.
    pub send: Mr,
    /// Two receive slots of 16 octets.
    pub recv: Mr,
}

impl Buffers {
    /// Register buffers for messages up to `size` octets.
    pub fn new(pd: &Pd, size: usize) -> Result<Self, iwarp::Error> {
        Ok(Buffers {
            data: pd.register(
                vec![0; size],
                Access::LOCAL_READ
                    | Access::LOCAL_WRITE
                    | Access::REMOTE_READ
                    | Access::REMOTE_WRITE,
            )?,
            sink: pd.register(vec![0; size], Access::LOCAL_WRITE | Access::REMOTE_WRITE)?,
            send: pd.register(vec![0; INFO_LEN], Access::LOCAL_READ)?,
            recv: pd.register(vec![0; 2 * INFO_LEN], Access::LOCAL_WRITE)?,
        })
    }

    /// Receive slot `slot` (0 or 1) as an SGE.
    pub fn recv_slot(&self, slot: u64) -> Sge {
        self.recv.sge(slot * INFO_LEN as u64, INFO_LEN as u32)
    }
}

/// Work request id of receive slot 0 (slot 1 is the next id).
pub const RECV_WR: u64 = 100;
const RECV: u64 = RECV_WR;
const SEND: u64 = 1;
const RDMA: u64 = 2;

fn send_info(qp: &Qp, b: &Buffers, c: &mut Completions, msg: [u8; INFO_LEN]) -> Result<(), String> {
    b.send.write(0, &msg).map_err(|e| e.to_string())?;
    qp.post_send(WorkRequest::Send {
        wr_id: SEND,
        signaled: true,
        local: b.send.sge(0, INFO_LEN as u32).into(),
        solicited: false,
        invalidate: None,
    })
    .map_err(|e| e.to_string())?;
    c.take(SEND, "Send").map(|_| ())
}

fn recv_info(qp: &Qp, b: &Buffers, c: &mut Completions, slot: &mut u64) -> Result<Vec<u8>, String> {
    let s = *slot;
    let wc = c.take(RECV + s, "receive")?;
    if wc.opcode != Some(WcOpcode::Recv) || wc.byte_len as usize != INFO_LEN {
        return Err(format!("unexpected receive {wc:?}"));
    }
    let m = b
        .recv
        .read(s as usize * INFO_LEN, INFO_LEN)
        .map_err(|e| e.to_string())?;
    // Re-post the slot for the message after next.
    qp.post_recv(RECV + s, b.recv_slot(s))
        .map_err(|e| e.to_string())?;
    *slot = 1 - s;
    Ok(m)
}

/// Run `count` iterations of `size` octets as the rping client over a
/// connected `qp` whose receive queue holds both slots of `b.recv`
/// ([`post_initial_recvs`]). Checks each echo against the start buffer;
/// returns the text of each iteration (what the server prints).
pub fn client(
    qp: &Qp,
    cq: &Cq,
    b: &Buffers,
    size: usize,
    count: u32,
) -> Result<Vec<String>, String> {
    let mut c = Completions::new(cq, qp);
    let mut pat = Pattern::default();
    let mut slot = 0;
    let mut texts = Vec::new();
    for ping in 0..count {
        let start = pat.next(ping, size);
        b.data.write(0, &start).map_err(|e| e.to_string())?;
        b.sink.write(0, &vec![0; size]).map_err(|e| e.to_string())?;
        send_info(qp, b, &mut c, info(0, b.data.stag().0, size as u32))?;
        recv_info(qp, b, &mut c, &mut slot).map_err(|e| format!("ping {ping}: {e}"))?;
        send_info(qp, b, &mut c, info(0, b.sink.stag().0, size as u32))?;
        recv_info(qp, b, &mut c, &mut slot).map_err(|e| format!("ping {ping}: {e}"))?;
        let echo = b.sink.read(0, size).map_err(|e| e.to_string())?;
        if echo != start {
            let at = echo.iter().zip(&start).position(|(a, b)| a != b);
            return Err(format!("ping {ping}: echo differs from start at {at:?}"));
        }
        texts.push(String::from_utf8_lossy(&start[..size - 1]).into_owned());
    }
    Ok(texts)
}

/// Post both receive slots (before accepting, or right after connecting).
pub fn post_initial_recvs(
    post: impl Fn(u64, Sge) -> Result<(), iwarp::Error>,
    b: &Buffers,
) -> Result<(), iwarp::Error> {
    post(RECV, b.recv_slot(0))?;
    post(RECV + 1, b.recv_slot(1))
}

/// Serve `count` iterations as the rping server over an accepted `qp`
/// (receives posted with [`post_initial_recvs`]). What each Read brought
/// must be rping's pattern for `size`; returns how many were checked.
pub fn server(qp: &Qp, cq: &Cq, b: &Buffers, size: usize, count: u32) -> Result<u32, String> {
    let mut c = Completions::new(cq, qp);
    let mut pat = Pattern::default();
    let mut slot = 0;
    for ping in 0..count {
        let m = recv_info(qp, b, &mut c, &mut slot)?;
        let (addr, rkey, len) = parse_info(&m).ok_or("short rping_rdma_info")?;
        if len as usize != size {
            return Err(format!(
                "ping {ping}: client advertised {len} octets, expected {size}"
            ));
        }
        qp.post_send(WorkRequest::Read {
            wr_id: RDMA,
            signaled: true,
            local: b.data.sge(0, len).into(),
            remote_stag: iwarp::STag(rkey),
            remote_to: addr,
        })
        .map_err(|e| e.to_string())?;
        c.take(RDMA, "RDMA Read")?;
        let got = b.data.read(0, size).map_err(|e| e.to_string())?;
        let want = pat.next(ping, size);
        if got != want {
            let at = got.iter().zip(&want).position(|(a, b)| a != b);
            return Err(format!(
                "ping {ping}: Read data differs from rping's pattern at {at:?}"
            ));
        }
        send_info(qp, b, &mut c, info(0, b.data.stag().0, len))?;
        let m = recv_info(qp, b, &mut c, &mut slot)?;
        let (addr, rkey, slen) = parse_info(&m).ok_or("short rping_rdma_info")?;
        // rping writes strlen(buf) + 1 octets: the whole buffer here.
        let wlen = len.min(slen);
        qp.post_send(WorkRequest::Write {
            wr_id: RDMA,
            signaled: true,
            local: b.data.sge(0, wlen).into(),
            remote_stag: iwarp::STag(rkey),
            remote_to: addr,
        })
        .map_err(|e| e.to_string())?;
        c.take(RDMA, "RDMA Write")?;
        send_info(qp, b, &mut c, info(0, b.data.stag().0, len))?;
    }
    Ok(count)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn info_is_big_endian_addr_rkey_len() {
        let b = info(0x0102_0304_0506_0708, 0x1122_3344, 64);
        assert_eq!(
            b,
            [1, 2, 3, 4, 5, 6, 7, 8, 0x11, 0x22, 0x33, 0x44, 0, 0, 0, 64]
        );
        assert_eq!(
            parse_info(&b),
            Some((0x0102_0304_0506_0708, 0x1122_3344, 64))
        );
        assert_eq!(parse_info(&b[..15]), None);
    }

    #[test]
    fn pattern_matches_rping() {
        // As mpa_probe.py (the lab's reference rping client) builds it.
        let mut p = Pattern::default();
        let a = p.next(0, 30);
        assert_eq!(&a, b"rdma-ping-0: ABCDEFGHIJKLMNOP\0");
        let b = p.next(1, 30);
        assert_eq!(&b, b"rdma-ping-1: BCDEFGHIJKLMNOPQ\0");
        // The letters wrap from 'z' to 'A'.
        let mut p = Pattern { start: b'y' };
        assert_eq!(&p.next(2, 17), b"rdma-ping-2: yzA\0");
        assert_eq!(p.start, b'z');
        p.next(3, 17);
        assert_eq!(p.start, b'A');
    }
}

/// rping (rdma-core) never joins its CM thread: after the last iteration
/// the main thread disconnects, destroys its cm_id (which waits for the
/// DISCONNECTED event to be acknowledged) and then the event channel,
/// while the CM thread, having acknowledged that event, loops back into
/// `rdma_get_cm_event`. If the channel's descriptor is closed first, that
/// call fails with EBADF and the thread calls `exit(-1)`: status 255 after
/// a run that verified every iteration (seen in about one loaded run in
/// five, and once in CI). Where the number of the closed descriptor has
/// been given to a non-blocking one meanwhile, the read fails with EAGAIN
/// instead ("Resource temporarily unavailable": seen once on our library,
/// 2026-11-29). It is a race between two threads of the rping
/// process (siw's in a guest, or Debian's on our library), after every
/// iteration was verified and the orderly disconnect seen (both asserted
/// before this is asked). Only that
/// exact ending is excused: exit status 255, no verification or
/// completion error printed, and the perror line as the last output but
/// for rping's own ping lines. Those can follow it where stdout and stderr
/// share one pipe (the lab's guest commands): stdout is buffered there
/// and flushed by the `exit`, after the unbuffered perror line (seen in
/// CI, 2026-11-29: "client DISCONNECT EVENT...", the perror line, then
/// the ten "ping data" lines).
pub fn teardown_race(code: Option<i32>, out: &str) -> bool {
    if code != Some(255)
        || ["mismatch", "failed", "error"]
            .iter()
            .any(|w| out.contains(w))
    {
        return false;
    }
    let lines: Vec<&str> = out.trim_end().lines().collect();
    let Some(at) = lines.iter().rposition(|l| {
        matches!(
            *l,
            "rdma_get_cm_event: Bad file descriptor"
                | "rdma_get_cm_event: Resource temporarily unavailable"
        )
    }) else {
        return false;
    };
    lines[at + 1..]
        .iter()
        .all(|l| l.starts_with("ping data: ") || l.starts_with("server ping data: "))
}

#[cfg(test)]
#[test]
fn only_rpings_teardown_race_is_excused() {
    let ok = "ping data: rdma-ping-0: AB\nping data: rdma-ping-1: BC\nrdma_get_cm_event: Bad file descriptor\n";
    assert!(teardown_race(Some(255), ok));
    assert!(teardown_race(
        Some(255),
        "ping data: rdma-ping-0: AB\nrdma_get_cm_event: Resource temporarily unavailable\n"
    ));
    assert!(!teardown_race(
        Some(255),
        "ping data: rdma-ping-0: AB\nrdma_get_cm_event: No such device\n"
    ));
    assert!(!teardown_race(Some(1), ok));
    assert!(!teardown_race(None, ok));
    assert!(!teardown_race(
        Some(255),
        "ping data: rdma-ping-0: AB\ndata mismatch!\nrdma_get_cm_event: Bad file descriptor\n"
    ));
    assert!(!teardown_race(
        Some(255),
        "rdma_get_cm_event: Bad file descriptor\ncq completion failed status 5\n"
    ));
    // stdout and stderr on one pipe: the buffered ping lines come after
    // the perror line (siw's rping in the lab guest, CI 2026-11-29).
    let merged = "client DISCONNECT EVENT...\nrdma_get_cm_event: Bad file descriptor\nping data: rdma-ping-0: AB\nping data: rdma-ping-1: BC\n";
    assert!(teardown_race(Some(255), merged));
    // Anything else after it is not the race.
    assert!(!teardown_race(
        Some(255),
        "rdma_get_cm_event: Bad file descriptor\nping data: rdma-ping-0: AB\nwait for RDMA_READ_ADV state 10\n"
    ));
    assert!(!teardown_race(
        Some(255),
        "client DISCONNECT EVENT...\nping data: rdma-ping-0: AB\n"
    ));
}
