//! Our side of `interop/guest/iwtest.c`, a small rdma_cm program the suite
//! builds on the host and runs in the siw guest: RDMA Write, RDMA Read and
//! Send of one size (1 octet to 1 MiB and more) in both directions, with
//! private data both ways. The protocol is described in the C file.

use std::path::{Path, PathBuf};
use std::time::Duration;

use iwarp::{Access, Cq, Mr, Pd, Qp, SgList, WorkRequest};

use crate::lab::Lab;
use crate::rping::{info, parse_info, Completions};

/// The C source.
pub fn source() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("guest/iwtest.c")
}

/// Octet `i` of pattern `which` (as `pat()` in the C file).
pub fn pattern(which: usize, i: usize) -> u8 {
    ((i * 131 + which * 29 + (i >> 9)) % 251) as u8
}

fn filled(which: usize, n: usize) -> Vec<u8> {
    (0..n).map(|i| pattern(which, i)).collect()
}

/// What ends the exchange (16 octets).
pub const DONE: &[u8; 16] = b"iwtest-done-ok!!";

/// Build the guest program into `dir` with the host's C compiler (needs
/// librdmacm-dev and libibverbs-dev: the guest has the same libraries).
pub fn build(dir: &Path) -> Result<PathBuf, String> {
    std::fs::create_dir_all(dir).map_err(|e| format!("{}: {e}", dir.display()))?;
    let out = dir.join("iwtest");
    let src = source();
    let o = netns_harness::run(
        &[
            "cc",
            "-O2",
            "-Wall",
            "-o",
            &out.to_string_lossy(),
            &src.to_string_lossy(),
            "-lrdmacm",
            "-libverbs",
        ],
        Duration::from_secs(120),
    )
    .map_err(|e| e.to_string())?;
    if !o.status.success() {
        return Err(format!(
            "building iwtest: {}",
            String::from_utf8_lossy(&o.stderr)
        ));
    }
    Ok(out)
}

/// Copy the program to `/tmp/iwtest` in the guest (base64 over the exec
/// channel, in pieces).
pub fn install(lab: &Lab, bin: &Path) -> Result<(), String> {
    let o = netns_harness::run(
        &["base64", "-w0", &bin.to_string_lossy()],
        Duration::from_secs(30),
    )
    .map_err(|e| e.to_string())?;
    let b64 = String::from_utf8_lossy(&o.stdout).into_owned();
    lab.exec("rm -f /tmp/iwtest.b64", Duration::from_secs(20))?;
    for piece in b64.as_bytes().chunks(8192) {
        let piece = String::from_utf8_lossy(piece);
        let r = lab.exec(
            &format!("printf %s '{piece}' >> /tmp/iwtest.b64"),
            Duration::from_secs(20),
        )?;
        if !r.status.success() {
            return Err("copying iwtest into the guest failed".into());
        }
    }
    let r = lab.exec(
        "base64 -d /tmp/iwtest.b64 > /tmp/iwtest && chmod +x /tmp/iwtest && /tmp/iwtest x 2>&1 | grep -q usage",
        Duration::from_secs(20),
    )?;
    if !r.status.success() {
        return Err(format!(
            "iwtest does not run in the guest: {}",
            String::from_utf8_lossy(&r.stdout)
        ));
    }
    Ok(())
}

/// Our buffers for one exchange of `size` octets.
#[derive(Debug)]
pub struct Buffers {
    size: usize,
    /// Where our Read of the peer's `t` lands.
    read_sink: Mr,
    /// Pattern 2 (our Write) and pattern 3 (our Send).
    p2: Mr,
    p3: Mr,
    /// `u`: pattern 4, read and then written (pattern 5) by the peer.
    u: Mr,
    /// Receives: INFO(t), then the peer's Send (pattern 6).
    r_info: Mr,
    r_send: Mr,
    /// Outgoing INFO(u) and DONE.
    out: Mr,
}

const R_INFO: u64 = 10;
const R_SEND: u64 = 11;

impl Buffers {
    /// Register everything for `size` octets.
    pub fn new(pd: &Pd, size: usize) -> Result<Self, iwarp::Error> {
        Ok(Buffers {
            size,
            read_sink: pd.register(vec![0; size], Access::LOCAL_WRITE)?,
            p2: pd.register(filled(2, size), Access::LOCAL_READ)?,
            p3: pd.register(filled(3, size), Access::LOCAL_READ)?,
            u: pd.register(
                filled(4, size),
                Access::LOCAL_READ | Access::REMOTE_READ | Access::REMOTE_WRITE,
            )?,
            r_info: pd.register(vec![0; 16], Access::LOCAL_WRITE)?,
            r_send: pd.register(vec![0; size], Access::LOCAL_WRITE)?,
            out: pd.register(vec![0; 32], Access::LOCAL_READ)?,
        })
    }

    /// The receives to have in place before the connection is up.
    pub fn recvs(&self) -> Vec<(u64, SgList)> {
        vec![
            (R_INFO, self.r_info.sge(0, 16).into()),
            (R_SEND, self.r_send.sge(0, self.size as u32).into()),
        ]
    }
}

fn send(qp: &Qp, c: &mut Completions, wr_id: u64, sgl: SgList, what: &str) -> Result<(), String> {
    qp.post_send(WorkRequest::Send {
        wr_id,
        signaled: true,
        local: sgl,
        solicited: false,
        invalidate: None,
    })
    .map_err(|e| e.to_string())?;
    c.take(wr_id, what).map(|_| ())
}

fn check(got: &[u8], which: usize, what: &str) -> Result<(), String> {
    match got
        .iter()
        .enumerate()
        .find(|&(i, &b)| b != pattern(which, i))
    {
        None => Ok(()),
        Some((i, b)) => Err(format!(
            "{what}: octet {i} is {b}, expected {}",
            pattern(which, i)
        )),
    }
}

/// Run our side over a connected `qp` whose receives came from
/// [`Buffers::recvs`]. Every octet we receive is checked.
pub fn peer(qp: &Qp, cq: &Cq, b: &Buffers) -> Result<(), String> {
    let size = b.size as u32;
    let mut c = Completions::new(cq, qp);
    let e = |e: iwarp::Error| e.to_string();
    let wc = c.take(R_INFO, "INFO(t)")?;
    if wc.byte_len != 16 {
        return Err(format!("INFO(t) of {} octets", wc.byte_len));
    }
    let (addr, rkey, len) = parse_info(&b.r_info.read(0, 16).map_err(e)?).ok_or("INFO(t)")?;
    if len != size {
        return Err(format!("INFO(t) says {len} octets, expected {size}"));
    }
    qp.post_send(WorkRequest::Read {
        wr_id: 1,
        signaled: true,
        local: b.read_sink.sge(0, size).into(),
        remote_stag: iwarp::STag(rkey),
        remote_to: addr,
    })
    .map_err(e)?;
    c.take(1, "Read of t")?;
    check(&b.read_sink.read(0, b.size).map_err(e)?, 1, "Read of t")?;
    qp.post_send(WorkRequest::Write {
        wr_id: 2,
        signaled: true,
        local: b.p2.sge(0, size).into(),
        remote_stag: iwarp::STag(rkey),
        remote_to: addr,
    })
    .map_err(e)?;
    c.take(2, "Write into t")?;
    send(qp, &mut c, 3, b.p3.sge(0, size).into(), "Send of pattern 3")?;
    b.out.write(0, &info(0, b.u.stag().0, size)).map_err(e)?;
    send(qp, &mut c, 4, b.out.sge(0, 16).into(), "INFO(u)")?;
    let wc = c.take(R_SEND, "the peer's Send")?;
    if wc.byte_len != size {
        return Err(format!("the peer's Send has {} octets", wc.byte_len));
    }
    check(&b.r_send.read(0, b.size).map_err(e)?, 6, "the peer's Send")?;
    // The peer's Write was placed before its Send completed here.
    check(
        &b.u.read(0, b.size).map_err(e)?,
        5,
        "the peer's Write into u",
    )?;
    b.out.write(16, DONE).map_err(e)?;
    send(qp, &mut c, 5, b.out.sge(16, 16).into(), "DONE")?;
    Ok(())
}
