//! Scripted sessions that exercise every opcode and both MPA revisions, with
//! their results checked, for `iwarp-sim pcap` / `iwarp-sim demo` and the
//! Wireshark test.

use iwarp_control::{MpaConfig, RtrOffer};
use iwarp_proto::mem::{Access, STag};
use iwarp_proto::qp::{QpEvent, Sge, WcOpcode, WcStatus, WorkRequest};
use iwarp_proto::wire::TermCode;

use crate::{CapturedFrame, Sim, SimConfig};

/// One scripted session's outcome.
#[derive(Debug)]
pub struct SessionReport {
    /// Short name.
    pub name: &'static str,
    /// What the session negotiated, in words.
    pub settings: String,
    /// Frames (handshake, MPA exchange, FPDUs, FIN).
    pub frames: Vec<CapturedFrame>,
    /// FPDUs sent, both directions.
    pub fpdus: usize,
    /// Payload octets moved and checked at the destination.
    pub bytes_verified: u64,
    /// Operations completed successfully.
    pub ops: usize,
    /// CRC negotiated.
    pub crc: bool,
    /// Virtual time the session took.
    pub virtual_ns: u64,
    /// Terminates seen (code, received by the initiator).
    pub terminates: Vec<TermCode>,
}

/// Why a scripted session failed.
#[derive(Debug)]
pub struct ScenarioError(pub String);

impl core::fmt::Display for ScenarioError {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for ScenarioError {}

fn check(ok: bool, what: impl FnOnce() -> String) -> Result<(), ScenarioError> {
    if ok {
        Ok(())
    } else {
        Err(ScenarioError(what()))
    }
}

fn data(len: usize, salt: u8) -> Vec<u8> {
    (0..len)
        .map(|i| (i as u8).wrapping_mul(13).wrapping_add(salt) ^ ((i >> 8) as u8))
        .collect()
}

struct Script<'a> {
    s: &'a mut Sim,
    verified: u64,
    ops: usize,
}

impl Script<'_> {
    fn run(&mut self) -> Result<(), ScenarioError> {
        self.s
            .run_until_idle(2_000_000)
            .map(|_| ())
            .map_err(|e| ScenarioError(format!("simulation stuck: {e:?}")))
    }

    /// RDMA Write a -> b of `len` octets and check it.
    fn write(&mut self, len: usize, salt: u8) -> Result<(), ScenarioError> {
        let d = data(len, salt);
        let src = self.s.a.register_buf(d.clone(), Access::LOCAL_READ, 0);
        let dst =
            self.s
                .b
                .register_buf(vec![0; len.max(1)], Access::REMOTE_WRITE, 0x0001_0000_0000);
        let local = if len == 0 {
            Sge::EMPTY
        } else {
            Sge {
                stag: src,
                to: 0,
                len: len as u32,
            }
        };
        self.s
            .a
            .post_send(WorkRequest::Write {
                wr_id: self.ops as u64,
                signaled: true,
                local: local.into(),
                remote_stag: dst,
                remote_to: 0x0001_0000_0000,
            })
            .map_err(|e| ScenarioError(format!("post write: {e}")))?;
        self.run()?;
        check(
            self.s
                .b
                .mem
                .snapshot(dst)
                .is_some_and(|b| b.get(..len) == Some(&d[..])),
            || format!("write of {len} octets corrupted"),
        )?;
        self.done(len)
    }

    /// RDMA Read by a from b.
    fn read(&mut self, len: usize, salt: u8) -> Result<(), ScenarioError> {
        let d = data(len, salt);
        let src = self
            .s
            .b
            .register_buf(d.clone(), Access::REMOTE_READ, 0x4000);
        let sink = self.s.a.register(len.max(1), Access::LOCAL_WRITE);
        let local = if len == 0 {
            Sge::EMPTY
        } else {
            Sge {
                stag: sink,
                to: 0,
                len: len as u32,
            }
        };
        self.s
            .a
            .post_send(WorkRequest::Read {
                wr_id: self.ops as u64,
                signaled: true,
                local: local.into(),
                remote_stag: src,
                remote_to: 0x4000,
            })
            .map_err(|e| ScenarioError(format!("post read: {e}")))?;
        self.run()?;
        check(
            self.s
                .a
                .mem
                .snapshot(sink)
                .is_some_and(|b| b.get(..len) == Some(&d[..])),
            || format!("read of {len} octets corrupted"),
        )?;
        self.done(len)
    }

    /// A Send variant a -> b.
    fn send(&mut self, len: usize, solicited: bool, invalidate: bool) -> Result<(), ScenarioError> {
        let d = data(len, 7);
        let src = self.s.a.register_buf(d.clone(), Access::LOCAL_READ, 0);
        let rbuf = self.s.b.register(len.max(1), Access::LOCAL_WRITE);
        self.s
            .b
            .post_recv(
                self.ops as u64,
                Sge {
                    stag: rbuf,
                    to: 0,
                    len: len as u32,
                },
            )
            .map_err(|e| ScenarioError(format!("post recv: {e}")))?;
        let inv = if invalidate {
            Some(self.s.b.register(64, Access::REMOTE_WRITE))
        } else {
            None
        };
        let local = if len == 0 {
            Sge::EMPTY
        } else {
            Sge {
                stag: src,
                to: 0,
                len: len as u32,
            }
        };
        self.s
            .a
            .post_send(WorkRequest::Send {
                wr_id: self.ops as u64,
                signaled: true,
                local: local.into(),
                solicited,
                invalidate: inv,
            })
            .map_err(|e| ScenarioError(format!("post send: {e}")))?;
        self.run()?;
        let c = self.s.b.completions.last().copied();
        check(
            c.is_some_and(|c| {
                c.status == WcStatus::Success
                    && c.byte_len as usize == len
                    && c.solicited == solicited
                    && c.invalidated == inv
            }),
            || format!("send completion wrong: {c:?}"),
        )?;
        if let Some(i) = inv {
            check(!self.s.b.mem.is_valid(i), || "STag not invalidated".into())?;
        }
        check(
            self.s
                .b
                .mem
                .snapshot(rbuf)
                .is_some_and(|b| b.get(..len) == Some(&d[..])),
            || "send payload corrupted".into(),
        )?;
        self.done(len)
    }

    /// RDMA Write with Immediate a -> b (RFC 7306): `len` octets placed,
    /// then b's receive completes with the immediate.
    fn write_imm(&mut self, len: usize, imm: u32, solicited: bool) -> Result<(), ScenarioError> {
        let d = data(len, 11);
        let src = self.s.a.register_buf(d.clone(), Access::LOCAL_READ, 0);
        let dst = self
            .s
            .b
            .register_buf(vec![0; len.max(1)], Access::REMOTE_WRITE, 0x9000);
        let rbuf = self.s.b.register(1, Access::LOCAL_WRITE);
        self.s
            .b
            .post_recv(
                self.ops as u64,
                Sge {
                    stag: rbuf,
                    to: 0,
                    len: 0,
                },
            )
            .map_err(|e| ScenarioError(format!("post recv: {e}")))?;
        let local = if len == 0 {
            Sge::EMPTY
        } else {
            Sge {
                stag: src,
                to: 0,
                len: len as u32,
            }
        };
        self.s
            .a
            .post_send(WorkRequest::WriteImm {
                wr_id: self.ops as u64,
                signaled: true,
                local: local.into(),
                remote_stag: dst,
                remote_to: 0x9000,
                imm,
                solicited,
            })
            .map_err(|e| ScenarioError(format!("post write with immediate: {e}")))?;
        self.run()?;
        let c = self.s.b.completions.last().copied();
        check(
            c.is_some_and(|c| {
                c.status == WcStatus::Success
                    && c.opcode == WcOpcode::RecvRdmaWithImm
                    && c.imm == Some(imm)
                    && c.solicited == solicited
            }),
            || format!("immediate completion wrong: {c:?}"),
        )?;
        check(
            self.s
                .b
                .mem
                .snapshot(dst)
                .is_some_and(|b| b.get(..len) == Some(&d[..])),
            || "write with immediate corrupted".into(),
        )?;
        self.done(len)
    }

    /// An RFC 7306 atomic by a on b's 8 octets holding `orig`: Fetch and
    /// Add of `add` when `cmp` is `None`, else Compare and Swap
    /// (`compare`, `swap`). Checks the value returned and the one left.
    fn atomic(
        &mut self,
        orig: u64,
        add: u64,
        cmp: Option<(u64, u64)>,
    ) -> Result<(), ScenarioError> {
        let mut buf = vec![0u8; 16];
        buf[8..].copy_from_slice(&orig.to_ne_bytes());
        let target = self.s.b.register_buf(buf, Access::REMOTE_ATOMIC, 0x7000);
        let local = self.s.a.register(8, Access::LOCAL_WRITE);
        let sge = Sge {
            stag: local,
            to: 0,
            len: 8,
        };
        let wr = match cmp {
            None => WorkRequest::FetchAdd {
                wr_id: self.ops as u64,
                signaled: true,
                local: sge,
                remote_stag: target,
                remote_to: 0x7008,
                add,
            },
            Some((compare, swap)) => WorkRequest::CmpSwap {
                wr_id: self.ops as u64,
                signaled: true,
                local: sge,
                remote_stag: target,
                remote_to: 0x7008,
                compare,
                swap,
            },
        };
        self.s
            .a
            .post_send(wr)
            .map_err(|e| ScenarioError(format!("post atomic: {e}")))?;
        self.run()?;
        let want = match cmp {
            None => orig.wrapping_add(add),
            Some((c, s)) if c == orig => s,
            Some(_) => orig,
        };
        let at = |m: &iwarp_proto::mem::MemoryTable, stag, i: usize| {
            m.snapshot(stag).and_then(|b| {
                b.get(i..i + 8)
                    .map(|s| u64::from_ne_bytes(s.try_into().unwrap_or([0; 8])))
            })
        };
        check(at(&self.s.a.mem, local, 0) == Some(orig), || {
            "atomic original value wrong".into()
        })?;
        check(at(&self.s.b.mem, target, 8) == Some(want), || {
            "atomic result wrong".into()
        })?;
        self.done(8)
    }

    fn done(&mut self, len: usize) -> Result<(), ScenarioError> {
        let c = self.s.a.completions.last().copied();
        check(c.is_some_and(|c| c.status == WcStatus::Success), || {
            format!("completion: {c:?}; events {:?}", self.s.a.events)
        })?;
        self.verified += len as u64;
        self.ops += 1;
        Ok(())
    }
}

fn session(
    name: &'static str,
    seed: u64,
    port: u16,
    ini: MpaConfig,
    resp: MpaConfig,
    one_fpdu: bool,
    body: impl FnOnce(&mut Script<'_>) -> Result<(), ScenarioError>,
) -> Result<SessionReport, ScenarioError> {
    let cfg = SimConfig {
        seed,
        initiator: ini,
        responder: resp,
        capture: true,
        one_fpdu_per_segment: one_fpdu,
        ports: (port, 7174),
        ..Default::default()
    };
    let mut s = Sim::new(cfg);
    s.connect()
        .map_err(|e| ScenarioError(format!("{name}: connect: {e:?}")))?;
    check(s.connected(), || {
        format!("{name}: not connected: {:?}", s.a.conn.setup_error())
    })?;
    let n =
        s.a.conn
            .negotiated()
            .cloned()
            .ok_or_else(|| ScenarioError("no negotiation".into()))?;
    let settings = format!(
        "MPA rev {}, CRC {}, markers a->b {} b->a {}, IRD/ORD {}/{}, RTR {:?}",
        n.rev,
        if n.crc { "on" } else { "off" },
        if n.markers_tx { "on" } else { "off" },
        if n.markers_rx { "on" } else { "off" },
        n.ird,
        n.ord,
        n.rtr
    );
    let mut sc = Script {
        s: &mut s,
        verified: 0,
        ops: 0,
    };
    body(&mut sc).map_err(|e| ScenarioError(format!("{name}: {e}")))?;
    let (verified, ops) = (sc.verified, sc.ops);
    let terminates =
        s.a.events
            .iter()
            .filter_map(|e| match e {
                QpEvent::TerminateReceived(t) => Some(t.code),
                _ => None,
            })
            .collect();
    let virtual_ns = s.now_ns;
    let frames = s.finish_capture();
    let fpdus = frames.iter().map(|f| f.fpdus.len()).sum();
    Ok(SessionReport {
        name,
        settings,
        frames,
        fpdus,
        bytes_verified: verified,
        ops,
        crc: n.crc,
        virtual_ns,
        terminates,
    })
}

/// Run every scripted session. Session `i` starts `i` virtual seconds in, on
/// its own initiator port, so they merge into one capture.
pub fn all_sessions(seed: u64) -> Result<Vec<SessionReport>, ScenarioError> {
    let rev1 = MpaConfig {
        rev: 1,
        ..Default::default()
    };
    let crc = MpaConfig {
        crc: true,
        ird: 8,
        ord: 8,
        ..Default::default()
    };
    let markers = MpaConfig {
        crc: true,
        markers_rx: true,
        ird: 8,
        ord: 8,
        ..Default::default()
    };
    let p2p_ini = MpaConfig {
        crc: true,
        peer_to_peer: true,
        rtr: RtrOffer {
            zero_length_fpdu: false,
            write: false,
            read: true,
        },
        ird: 32,
        ord: 32,
        ..Default::default()
    };
    let p2p_resp = MpaConfig {
        crc: true,
        peer_to_peer: true,
        ird: 32,
        ord: 32,
        ..Default::default()
    };
    let mut out = vec![
        session("rev1-no-crc", seed, 40001, rev1.clone(), rev1, false, |s| {
            s.send(100, false, false)?;
            s.write(1024, 1)
        })?,
        session(
            "rev2-crc-every-opcode",
            seed + 1,
            40002,
            crc.clone(),
            crc.clone(),
            false,
            |s| {
                s.write(0, 0)?;
                s.write(1, 1)?;
                s.write(100_000, 2)?;
                s.write(1 << 20, 3)?;
                s.read(0, 4)?;
                s.read(1 << 20, 5)?;
                s.send(0, false, false)?;
                s.send(8, false, false)?;
                s.send(3000, true, false)?;
                s.send(64, false, true)?;
                s.send(64, true, true)?;
                // An RDMA Write to an STag the peer never registered: the peer
                // answers with a Terminate (DDP tagged, invalid STag).
                let src = s.s.a.register(32, Access::LOCAL_READ);
                s.s.a
                    .post_send(WorkRequest::Write {
                        wr_id: 999,
                        signaled: true,
                        local: Sge {
                            stag: src,
                            to: 0,
                            len: 32,
                        }
                        .into(),
                        remote_stag: STag(0x00ee_ee00),
                        remote_to: 0,
                    })
                    .map_err(|e| ScenarioError(format!("post: {e}")))?;
                s.run()
            },
        )?,
        session(
            "rev2-crc-markers-both-ways",
            seed + 2,
            40003,
            markers.clone(),
            markers,
            true,
            |s| {
                s.write(70_000, 6)?;
                s.read(65_536, 7)?;
                s.send(2000, false, false)?;
                s.send(10, true, true)?;
                s.write(0, 8)
            },
        )?,
        session(
            "rev2-crc-rfc7306",
            seed + 4,
            40005,
            crc.clone(),
            crc.clone(),
            false,
            |s| {
                s.write_imm(300, 0x1234_5678, false)?;
                s.write_imm(0, 0xdead_beef, true)?;
                s.atomic(40, 2, None)?;
                s.atomic(7, 0, Some((7, 99)))?;
                s.atomic(7, 0, Some((8, 99)))?;
                // An atomic on memory without remote-atomic access: the
                // peer answers with a Terminate (RDMAP, access rights).
                let plain = s.s.b.register_buf(vec![0; 8], Access::REMOTE_WRITE, 0);
                let local = s.s.a.register(8, Access::LOCAL_WRITE);
                s.s.a
                    .post_send(WorkRequest::FetchAdd {
                        wr_id: 999,
                        signaled: true,
                        local: Sge {
                            stag: local,
                            to: 0,
                            len: 8,
                        },
                        remote_stag: plain,
                        remote_to: 0,
                        add: 1,
                    })
                    .map_err(|e| ScenarioError(format!("post: {e}")))?;
                s.run()
            },
        )?,
        session(
            "rev2-p2p-read-rtr",
            seed + 3,
            40004,
            p2p_ini,
            p2p_resp,
            false,
            |s| {
                s.send(32, false, false)?;
                s.read(4096, 9)
            },
        )?,
    ];
    for (i, r) in out.iter_mut().enumerate() {
        for f in &mut r.frames {
            f.ts_ns += i as u64 * 1_000_000_000;
        }
    }
    Ok(out)
}

/// Write all sessions' frames into one classic pcap.
pub fn write_pcap<W: std::io::Write>(out: W, sessions: &[SessionReport]) -> std::io::Result<W> {
    let mut w = crate::pcap::PcapWriter::new(out)?;
    for s in sessions {
        for f in &s.frames {
            w.write_frame(f.ts_ns, &f.frame)?;
        }
    }
    Ok(w.into_inner())
}
