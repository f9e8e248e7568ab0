//! The simulator's capture, decoded by Wireshark (tshark): every FPDU has a
//! good CRC, no length errors, both MPA revisions and every opcode appear, and
//! the DDP/RDMAP fields Wireshark decodes equal what was sent.
//!
//! Skipped (with a message) where tshark is not installed, except under CI
//! (`CI` set), where a missing tshark is a failure: `.ci/run` installs it.

#![allow(clippy::unwrap_used)] // test harness: a failed unwrap is a failed test

use std::collections::BTreeSet;
use std::process::Command;

use iwarp_proto::wire::DdpHeader;
use iwarp_sim::scenario::{all_sessions, write_pcap};

const NO_HEURISTICS: [&str; 4] = [
    "--disable-heuristic",
    "rpcrdma_iwarp",
    "--disable-heuristic",
    "smb_direct_iwarp",
];

fn tshark(args: &[&str]) -> Option<String> {
    let o = Command::new("tshark")
        .args(args)
        .args(NO_HEURISTICS)
        .output()
        .ok()?;
    assert!(
        o.status.success(),
        "tshark failed: {}",
        String::from_utf8_lossy(&o.stderr)
    );
    Some(String::from_utf8_lossy(&o.stdout).into_owned())
}

#[test]
fn wireshark_decodes_every_fpdu_as_sent() {
    if Command::new("tshark").arg("--version").output().is_err() {
        assert!(std::env::var_os("CI").is_none(), "tshark missing under CI");
        eprintln!("tshark not installed: skipping");
        return;
    }
    let sessions = all_sessions(1).expect("scenario");
    let dir = std::env::temp_dir().join(format!("iwarp-wireshark-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join("sim.pcap");
    write_pcap(std::fs::File::create(&path).unwrap(), &sessions).unwrap();
    let p = path.to_str().unwrap();

    // 1. CRC verdicts and expert items from the full decode.
    let text = tshark(&["-r", p, "-V"]).unwrap();
    let crc_fpdus: usize = sessions.iter().filter(|s| s.crc).map(|s| s.fpdus).sum();
    assert!(crc_fpdus > 1000);
    assert_eq!(text.matches("(Good CRC32)").count(), crc_fpdus);
    assert_eq!(text.matches("Bad CRC32").count(), 0);
    assert_eq!(text.matches("Request frame header").count(), sessions.len());
    assert_eq!(text.matches("Reply frame header").count(), sessions.len());
    assert!(!text.contains("Malformed"), "malformed packet in decode");
    let experts = tshark(&[
        "-r",
        p,
        "-Y",
        "iwarp_mpa.bad_length || _ws.malformed || _ws.expert.severity >= warning && iwarp_mpa",
        "-T",
        "fields",
        "-e",
        "frame.number",
    ])
    .unwrap();
    assert_eq!(experts.trim(), "", "frames with MPA errors: {experts}");
    let revs = tshark(&["-r", p, "-T", "fields", "-e", "iwarp_mpa.rev"]).unwrap();
    let revs: BTreeSet<&str> = revs.lines().filter(|l| !l.is_empty()).collect();
    assert_eq!(revs, BTreeSet::from(["1", "2"]));

    // 2. Per frame, the DDP/RDMAP fields Wireshark decoded equal what was sent.
    let fields = tshark(&[
        "-r",
        p,
        "-T",
        "fields",
        "-E",
        "separator=|",
        "-E",
        "aggregator=;",
        "-E",
        "occurrence=a",
        "-e",
        "frame.number",
        "-e",
        "iwarp_rdma.opcode",
        "-e",
        "iwarp_ddp.stag",
        "-e",
        "iwarp_ddp.tagged_offset",
        "-e",
        "iwarp_ddp.qn",
        "-e",
        "iwarp_ddp.msn",
        "-e",
        "iwarp_ddp.mo",
        "-e",
        "iwarp_ddp.last_flag",
    ])
    .unwrap();
    let frames: Vec<_> = sessions.iter().flat_map(|s| s.frames.iter()).collect();
    let mut seen_ops = BTreeSet::new();
    let mut compared = 0;
    for line in fields.lines() {
        let col: Vec<&str> = line.split('|').collect();
        let n: usize = col[0].parse().unwrap();
        let sent = &frames[n - 1].fpdus;
        let split = |s: &str| -> Vec<String> {
            if s.is_empty() {
                vec![]
            } else {
                s.split(';').map(str::to_owned).collect()
            }
        };
        let (ops, stags, tos, qns, msns, mos, lasts) = (
            split(col[1]),
            split(col[2]),
            split(col[3]),
            split(col[4]),
            split(col[5]),
            split(col[6]),
            split(col[7]),
        );
        let hdrs: Vec<DdpHeader> = sent.iter().filter_map(|f| f.header).collect();
        assert_eq!(ops.len(), hdrs.len(), "frame {n}: FPDU count");
        let (mut t, mut u) = (0, 0);
        for (i, h) in hdrs.iter().enumerate() {
            assert_eq!(
                ops[i],
                format!("{:#04x}", h.rdmap().opcode().bits()),
                "frame {n} opcode"
            );
            assert_eq!(
                lasts[i],
                if h.ddp().last() { "1" } else { "0" },
                "frame {n} L flag"
            );
            seen_ops.insert(h.rdmap().opcode().bits());
            match h {
                DdpHeader::Tagged(x) => {
                    assert_eq!(stags[t], format!("{:#010x}", x.stag), "frame {n} stag");
                    assert_eq!(tos[t], format!("{:#018x}", x.to), "frame {n} TO");
                    t += 1;
                }
                DdpHeader::Untagged(x) => {
                    assert_eq!(qns[u], x.qn.to_string(), "frame {n} QN");
                    assert_eq!(msns[u], x.msn.to_string(), "frame {n} MSN");
                    assert_eq!(mos[u], x.mo.to_string(), "frame {n} MO");
                    u += 1;
                }
            }
            compared += 1;
        }
        assert_eq!(
            (t, u),
            (stags.len(), qns.len()),
            "frame {n}: tagged/untagged split"
        );
    }
    let sent_total: usize = sessions.iter().map(|s| s.fpdus).sum();
    assert_eq!(
        compared, sent_total,
        "every FPDU sent was decoded and compared"
    );
    // Every RDMAP opcode of RFC 5040: Write .. Terminate.
    assert_eq!(seen_ops, (0u8..=7).collect());
    let _ = std::fs::remove_dir_all(&dir);
}
