//! `iwarp-sim pcap --transport sctp`: one RDMAP session over DDP/SCTP
//! (RFC 5043) covering every RDMAP opcode, data checked, written as a pcap;
//! the same seed gives the same capture; tshark (when installed; required
//! under `CI`) finds every SCTP checksum good and DATA chunks with PPIDs 16
//! and 17.
#![allow(clippy::unwrap_used)] // test harness: a failed unwrap is a failed test

use std::process::Command;

use iwarp_sim::sctp::{rdmap_session, ALL_OPCODES};

#[test]
fn session_covers_every_opcode_with_data_checked() {
    let (cap, rep) = rdmap_session(7).unwrap();
    for op in ALL_OPCODES {
        assert!(
            rep.opcodes.get(op).copied().unwrap_or(0) > 0,
            "{op} missing: {:?}",
            rep.opcodes
        );
    }
    assert!(!rep.opcodes.contains_key("reserved"));
    assert_eq!(rep.ops, 10, "6 send-queue requests and 4 receives");
    assert_eq!(rep.bytes_verified, 4000 + 4 * 700 + 3000);
    // Initiate, Accept and at least one Session Terminate.
    assert!(rep.ppid17 >= 3, "{rep:?}");
    assert_eq!(rep.packets, cap.packets().len());
}

#[test]
fn same_seed_same_capture() {
    let write = |seed| {
        let (cap, _) = rdmap_session(seed).unwrap();
        let mut v = Vec::new();
        cap.write_pcap(&mut v).unwrap();
        v
    };
    assert_eq!(write(3), write(3));
    assert_ne!(write(3), write(4));
}

#[test]
fn cli_writes_an_sctp_capture_tshark_accepts() {
    let dir = std::env::temp_dir().join(format!("sctp-sim-pcap-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let out = dir.join("sctp.pcap");
    let o = Command::new(env!("CARGO_BIN_EXE_iwarp-sim"))
        .args(["pcap", "--transport", "sctp", "--seed", "5", "--out"])
        .arg(&out)
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&o.stdout);
    assert!(
        o.status.success(),
        "{stdout}{}",
        String::from_utf8_lossy(&o.stderr)
    );
    for op in ALL_OPCODES {
        assert!(stdout.contains(op), "{op} not in the summary: {stdout}");
    }
    let bytes = std::fs::read(&out).unwrap();
    // Little-endian nanosecond pcap (magic 0xa1b23c4d), Ethernet link type.
    assert_eq!(bytes[..4], [0x4d, 0x3c, 0xb2, 0xa1]);
    assert_eq!(bytes[20..24], [1, 0, 0, 0]);
    let t = Command::new("tshark")
        .arg("-r")
        .arg(&out)
        .args([
            "-o",
            "sctp.checksum:CRC 32c",
            "-T",
            "fields",
            "-e",
            "sctp.checksum.status",
            "-e",
            "sctp.data_payload_proto_id",
        ])
        .output();
    let _ = std::fs::remove_dir_all(&dir);
    let Ok(t) = t else {
        assert!(std::env::var_os("CI").is_none(), "tshark missing under CI");
        println!("SKIP: tshark not installed");
        return;
    };
    let text = String::from_utf8_lossy(&t.stdout);
    let lines: Vec<&str> = text.lines().collect();
    assert!(lines.len() > 10, "{text}");
    // Field 1: checksum status, 1 = good (Wireshark's PROTO_CHECKSUM_E_GOOD).
    assert!(
        lines.iter().all(|l| l.split('\t').next() == Some("1")),
        "{text}"
    );
    let ppids: Vec<&str> = lines
        .iter()
        .filter_map(|l| l.split('\t').nth(1))
        .flat_map(|f| f.split(','))
        .filter(|p| !p.is_empty())
        .collect();
    assert!(ppids.contains(&"16") && ppids.contains(&"17"), "{text}");
    assert!(ppids.iter().all(|p| *p == "16" || *p == "17"), "{text}");
}
