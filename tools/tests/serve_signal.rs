//! `iwarp-serve --sim` ends gracefully on SIGTERM and SIGINT: it closes its
//! client connection, prints its final statistics and exits 0.

use std::io::{BufRead, BufReader, Read};
use std::process::{Child, Command, Stdio};

/// Kills the server when the test ends, passing or not.
struct Server(Child);

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// Start a `--sim` server, wait until its built-in client is connected,
/// send `signal` (a name for kill(1)), and return the exit code and the
/// whole of its standard output.
fn run_until(signal: &str) -> (Option<i32>, String) {
    let child = Command::new(env!("CARGO_BIN_EXE_iwarp-serve"))
        // --seconds bounds the run should the signal be ignored; the
        // output then says "at the end of --seconds" and the test fails.
        .args(["--sim", "--region-mib", "1", "--seconds", "120"])
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .spawn()
        .expect("start iwarp-serve");
    let mut server = Server(child);
    let mut out = BufReader::new(server.0.stdout.take().expect("piped stdout"));
    let mut seen = String::new();
    let mut line = String::new();
    // The banner and the accept come first (bounded).
    for _ in 0..10 {
        line.clear();
        if out.read_line(&mut line).expect("read stdout") == 0 {
            break;
        }
        seen.push_str(&line);
        if line.contains("accepted 10.0.0.2") {
            break;
        }
    }
    assert!(
        seen.contains("accepted 10.0.0.2"),
        "the built-in client connected:\n{seen}"
    );
    let pid = server.0.id().to_string();
    let sent = Command::new("kill")
        .args(["-s", signal, &pid])
        .status()
        .expect("run kill");
    assert!(sent.success(), "kill -s {signal} {pid}");
    // Its stdout ends when it exits.
    out.read_to_string(&mut seen).expect("read stdout");
    let status = server.0.wait().expect("wait for iwarp-serve");
    (status.code(), seen)
}

fn check(signal: &str) {
    let (code, out) = run_until(signal);
    assert_eq!(
        code,
        Some(0),
        "exit status after SIG{signal}; output:\n{out}"
    );
    assert!(
        out.contains(&format!("iwarp-serve: stopping by SIG{signal} after")),
        "{out}"
    );
    // The built-in client finished its block and found every Read equal
    // (a wrong one makes the exit status 1, checked above).
    assert!(
        out.lines()
            .any(|l| l.starts_with("client: ") && l.ends_with(" blocks written and read back")),
        "{out}"
    );
    assert!(
        out.contains("iwarp-serve: closed 1 of 1 client connections"),
        "{out}"
    );
    assert!(
        out.contains("iwarp-serve: final stats: 1 clients accepted"),
        "{out}"
    );
}

#[test]
fn sigterm_closes_clients_prints_stats_and_exits_0() {
    check("TERM");
}

#[test]
fn sigint_closes_clients_prints_stats_and_exits_0() {
    check("INT");
}
