//! `iwarp-sim`: run the deterministic two-node simulator.
//!
//! ```text
//! iwarp-sim pcap --out FILE [--seed N] [--transport mpa|sctp]
//!                                        write the scripted sessions as a pcap
//!                                        (sctp: one RDMAP session over DDP/SCTP,
//!                                        RFC 5043, covering every opcode)
//! iwarp-sim demo [--out FILE] [--seed N] run them, print what was checked, decode with tshark if present
//! ```
//!
//! Exit status: 0 when every transfer was checked; 1 when a session failed
//! or the capture could not be written; 2 for a usage error (clap's).

use std::path::{Path, PathBuf};
use std::process::ExitCode;

use clap::{Parser, Subcommand, ValueEnum};
use iwarp_sim::scenario::{all_sessions, write_pcap, SessionReport};

/// Deterministic two-node iWARP simulator: scripted sessions over a seeded
/// byte stream, every transfer checked, written as a pcap.
#[derive(Debug, Parser)]
#[command(name = "iwarp-sim", version)]
struct Cli {
    #[command(subcommand)]
    cmd: Cmd,
}

#[derive(Debug, Subcommand)]
enum Cmd {
    /// Run the scripted sessions and write them into one pcap.
    Pcap {
        /// The capture file to write.
        #[arg(long, value_name = "FILE")]
        out: PathBuf,
        /// Seed of the stream segmentation (same seed, same capture).
        #[arg(long, value_name = "N", default_value_t = 1)]
        seed: u64,
        /// The lower layer: MPA over TCP, or DDP over SCTP (RFC 5043).
        #[arg(long, value_enum, default_value_t = Transport::Mpa)]
        transport: Transport,
    },
    /// Run them, print what was checked, and decode the capture with tshark
    /// when it is installed.
    Demo {
        /// The capture file to write [default: iwarp-sim-demo.pcap in the
        /// temporary directory].
        #[arg(long, value_name = "FILE")]
        out: Option<PathBuf>,
        /// Seed of the stream segmentation (same seed, same capture).
        #[arg(long, value_name = "N", default_value_t = 1)]
        seed: u64,
    },
}

/// Which lower layer `pcap` writes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
enum Transport {
    /// MPA over TCP (RFC 5044): the scripted sessions.
    Mpa,
    /// DDP over SCTP (RFC 5043): one session with every RDMAP opcode.
    Sctp,
}

fn main() -> ExitCode {
    match Cli::parse().cmd {
        Cmd::Pcap {
            out,
            seed,
            transport: Transport::Sctp,
        } => match run_sctp(&out, seed) {
            Ok(()) => {
                println!("wrote {}", out.display());
                ExitCode::SUCCESS
            }
            Err(e) => {
                eprintln!("iwarp-sim: {e}");
                ExitCode::FAILURE
            }
        },
        Cmd::Pcap {
            out,
            seed,
            transport: Transport::Mpa,
        } => match run(&out, seed) {
            Ok(sessions) => {
                summary(&sessions);
                println!("wrote {}", out.display());
                ExitCode::SUCCESS
            }
            Err(e) => {
                eprintln!("iwarp-sim: {e}");
                ExitCode::FAILURE
            }
        },
        Cmd::Demo { out, seed } => {
            let path = out.unwrap_or_else(|| std::env::temp_dir().join("iwarp-sim-demo.pcap"));
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
            println!("\ncapture: {}", path.display());
            tshark(&path, &sessions);
            ExitCode::SUCCESS
        }
    }
}

fn run(path: &Path, seed: u64) -> Result<Vec<SessionReport>, Box<dyn std::error::Error>> {
    let sessions = all_sessions(seed)?;
    let f = std::fs::File::create(path)
        .map_err(|e| format!("cannot create {}: {e}", path.display()))?;
    write_pcap(std::io::BufWriter::new(f), &sessions)?;
    Ok(sessions)
}
fn run_sctp(path: &Path, seed: u64) -> Result<(), Box<dyn std::error::Error>> {
    let (cap, rep) = iwarp_sim::sctp::rdmap_session(seed)?;
    let f = std::fs::File::create(path)
        .map_err(|e| format!("cannot create {}: {e}", path.display()))?;
    cap.write_pcap(std::io::BufWriter::new(f))?;
    println!(
        "RDMAP over DDP/SCTP (RFC 5043), seed {seed}: {} operations checked, {} octets verified, \
         {} SCTP packets, {} DDP Segments (PPID 16), {} session control messages (PPID 17)",
        rep.ops, rep.bytes_verified, rep.packets, rep.ppid16, rep.ppid17
    );
    for (op, n) in &rep.opcodes {
        println!("  {op:<28} {n}");
    }
    println!("  Terminate received: {}", rep.terminate);
    Ok(())
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
                "{:<28} deliberate error (a Write to an unregistered STag, an atomic without remote-atomic access) -> Terminate received: {t}",
                ""
            );
        }
    }
}

fn tshark(path: &Path, sessions: &[SessionReport]) {
    let run = std::process::Command::new("tshark")
        .arg("-r")
        .arg(path)
        .args([
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
