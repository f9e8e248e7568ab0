//! `iwarp-sim`: run the deterministic two-node simulator.
//!
//! ```text
//! iwarp-sim pcap --out FILE [--seed N]   write the scripted sessions as a pcap
//! iwarp-sim demo [--out FILE] [--seed N] run them, print what was checked, decode with tshark if present
//! ```

use std::process::ExitCode;

use iwarp_sim::scenario::{all_sessions, write_pcap, SessionReport};

fn usage() -> ExitCode {
    eprintln!("usage: iwarp-sim pcap --out FILE [--seed N]\n       iwarp-sim demo [--out FILE] [--seed N]");
    ExitCode::from(2)
}

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let Some(cmd) = args.first() else {
        return usage();
    };
    let mut out: Option<String> = None;
    let mut seed = 1u64;
    let mut i = 1;
    while i < args.len() {
        match (args[i].as_str(), args.get(i + 1)) {
            ("--out", Some(v)) => out = Some(v.clone()),
            ("--seed", Some(v)) => match v.parse() {
                Ok(s) => seed = s,
                Err(_) => return usage(),
            },
            _ => return usage(),
        }
        i += 2;
    }
    match cmd.as_str() {
        "pcap" => {
            let Some(path) = out else { return usage() };
            match run(&path, seed) {
                Ok(sessions) => {
                    summary(&sessions);
                    println!("wrote {path}");
                    ExitCode::SUCCESS
                }
                Err(e) => {
                    eprintln!("iwarp-sim: {e}");
                    ExitCode::FAILURE
                }
            }
        }
        "demo" => {
            let path = out.unwrap_or_else(|| {
                std::env::temp_dir()
                    .join("iwarp-sim-demo.pcap")
                    .display()
                    .to_string()
            });
            let sessions = match run(&path, seed) {
                Ok(s) => s,
                Err(e) => {
                    eprintln!("iwarp-sim: {e}");
                    return ExitCode::FAILURE;
                }
            };
            println!(
                "iWARP over a simulated TCP stream: two nodes, seeded segmentation (seed {seed})\n"
            );
            summary(&sessions);
            println!("\ncapture: {path}");
            tshark(&path, &sessions);
            ExitCode::SUCCESS
        }
        _ => usage(),
    }
}

fn run(path: &str, seed: u64) -> Result<Vec<SessionReport>, Box<dyn std::error::Error>> {
    let sessions = all_sessions(seed)?;
    let f = std::fs::File::create(path).map_err(|e| format!("cannot create {path}: {e}"))?;
    write_pcap(std::io::BufWriter::new(f), &sessions)?;
    Ok(sessions)
}

fn summary(sessions: &[SessionReport]) {
    println!(
        "{:<28} {:>6} {:>7} {:>12}  settings",
        "session", "ops ok", "FPDUs", "bytes ok"
    );
    for s in sessions {
        println!(
            "{:<28} {:>6} {:>7} {:>12}  {}",
            s.name, s.ops, s.fpdus, s.bytes_verified, s.settings
        );
        for t in &s.terminates {
            println!(
                "{:<28} deliberate Write to an unregistered STag -> Terminate received: {t}",
                ""
            );
        }
    }
}

fn tshark(path: &str, sessions: &[SessionReport]) {
    let run = std::process::Command::new("tshark")
        .args([
            "-r",
            path,
            "-V",
            "--disable-heuristic",
            "rpcrdma_iwarp",
            "--disable-heuristic",
            "smb_direct_iwarp",
        ])
        .output();
    let Ok(o) = run else {
        println!("tshark not installed: skipping the Wireshark decode");
        return;
    };
    let text = String::from_utf8_lossy(&o.stdout);
    let good = text.matches("(Good CRC32)").count();
    let bad = text.matches("Bad CRC32").count();
    let crc_fpdus: usize = sessions.iter().filter(|s| s.crc).map(|s| s.fpdus).sum();
    println!(
        "tshark: {} MPA Request/Reply frames, {good} FPDUs with Good CRC32 (of {crc_fpdus} sent with CRC), {bad} Bad CRC32",
        text.matches("Request frame header").count() + text.matches("Reply frame header").count(),
    );
}
