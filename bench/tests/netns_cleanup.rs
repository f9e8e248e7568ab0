//! The tools that create namespaces and veths leave none behind: killed
//! mid-run with SIGINT or SIGTERM, each removes what it created and exits
//! 130 or 143; `--cleanup` sweeps what a SIGKILLed run left. Each run uses
//! a prefix of its own (`--netns-prefix`), so runs in parallel do not see
//! each other's. Root only; under CI (`CI` set) a missing root fails.

use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// Why these tests cannot run here; panics under CI, where they must.
fn skip() -> Option<String> {
    let why = netns_harness::skip_reason()?;
    if std::env::var_os("CI").is_some() {
        panic!("CI must run the namespace cleanup tests: {why}");
    }
    Some(why)
}

/// A prefix unique to this process and `tag` (4 characters).
fn prefix(tag: char) -> String {
    const D: &[u8] = b"0123456789abcdefghijklmnopqrstuvwxyz";
    let p = std::process::id() as usize;
    format!("z{tag}{}{}", D[p % 36] as char, D[(p / 36) % 36] as char)
}

/// Kills the tool when the test ends, passing or not.
struct Tool(Child);

impl Drop for Tool {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

fn left(prefix: &str) -> Vec<String> {
    netns_harness::guard::with_prefix(prefix).expect("ip netns list / ip link")
}

/// Poll `what` until it holds or `secs` pass.
fn wait_for(secs: u64, mut what: impl FnMut() -> bool) -> bool {
    let end = Instant::now() + Duration::from_secs(secs);
    while Instant::now() < end {
        if what() {
            return true;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    what()
}

/// Start `bin args --netns-prefix P`, wait until both its namespaces and
/// its veth exist, send `signal`, and check the exit status and that
/// nothing named `P…` is left.
fn killed_mid_run_leaves_nothing(bin: &str, args: &[&str], tag: char, signal: &str) {
    let p = prefix(tag);
    assert!(
        left(&p).is_empty(),
        "leftovers before the run: {:?}",
        left(&p)
    );
    let child = Command::new(bin)
        .args(args)
        .args(["--netns-prefix", &p])
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .expect("start the tool");
    let mut tool = Tool(child);
    let pid = tool.0.id();
    // Two namespaces and a veth (its ends move into them): three names at
    // some point; then the run is under way.
    let started = wait_for(60, || {
        let l = left(&p);
        l.len() >= 2 || matches!(tool.0.try_wait(), Ok(Some(_)))
    });
    let before = left(&p);
    assert!(
        started && !before.is_empty(),
        "{bin}: no namespaces appeared"
    );
    assert!(
        matches!(tool.0.try_wait(), Ok(None)),
        "{bin} exited before the signal"
    );
    let sent = Command::new("kill")
        .args(["-s", signal, &pid.to_string()])
        .status()
        .expect("run kill");
    assert!(sent.success());
    let status = wait_for(30, || matches!(tool.0.try_wait(), Ok(Some(_))));
    assert!(status, "{bin} still running 30 s after {signal}");
    let out = tool.0.wait_with_output_stderr();
    let want = if signal == "INT" { 130 } else { 143 };
    assert_eq!(out.0, Some(want), "{bin} on SIG{signal}: {}", out.1);
    // A namespace's veth goes when the kernel tears the namespace down,
    // a moment after the last process left it.
    assert!(
        wait_for(10, || left(&p).is_empty()),
        "{bin} left after SIG{signal}: {:?} (had {before:?}); stderr: {}",
        left(&p),
        out.1
    );
}

trait WaitStderr {
    fn wait_with_output_stderr(&mut self) -> (Option<i32>, String);
}

impl WaitStderr for Child {
    fn wait_with_output_stderr(&mut self) -> (Option<i32>, String) {
        let status = self.wait().expect("wait");
        let mut err = String::new();
        if let Some(mut e) = self.stderr.take() {
            let _ = std::io::Read::read_to_string(&mut e, &mut err);
        }
        (status.code(), err)
    }
}

#[test]
fn iwarp_perf_write_bw_netns_cleans_up_on_sigint_and_sigterm() {
    if let Some(why) = skip() {
        println!("SKIP: {why}");
        return;
    }
    let bin = env!("CARGO_BIN_EXE_iwarp-perf");
    let out = std::env::temp_dir().join(format!("ipf-cleanup-{}", std::process::id()));
    let out = out.to_string_lossy().into_owned();
    let args = ["write_bw", "--netns", "--duration", "120", "--out", &out];
    killed_mid_run_leaves_nothing(bin, &args, 'p', "INT");
    killed_mid_run_leaves_nothing(bin, &args, 'q', "TERM");
    let _ = std::fs::remove_dir_all(&out);
}

#[test]
fn tcp_vs_linux_cleans_up_on_sigint_and_sigterm() {
    if let Some(why) = skip() {
        println!("SKIP: {why}");
        return;
    }
    let bin = env!("CARGO_BIN_EXE_tcp-vs-linux");
    let args = ["--iters", "10000000"];
    killed_mid_run_leaves_nothing(bin, &args, 't', "INT");
    killed_mid_run_leaves_nothing(bin, &args, 'u', "TERM");
}

#[test]
fn xdp_floor_cleans_up_on_sigint_and_sigterm() {
    if let Some(why) = skip() {
        println!("SKIP: {why}");
        return;
    }
    let bin = env!("CARGO_BIN_EXE_xdp-floor");
    let args = ["--secs", "30", "--mtu", "1500"];
    killed_mid_run_leaves_nothing(bin, &args, 'x', "INT");
    killed_mid_run_leaves_nothing(bin, &args, 'y', "TERM");
}

/// A run killed with SIGKILL cannot clean up; `--cleanup` with its prefix
/// removes what it left, and leaves a running tool's alone.
#[test]
fn cleanup_sweeps_what_a_killed_run_left() {
    if let Some(why) = skip() {
        println!("SKIP: {why}");
        return;
    }
    let bin = env!("CARGO_BIN_EXE_xdp-floor");
    let p = prefix('k');
    let tool = floor_running(bin, &p);
    // While it runs, --cleanup leaves its namespaces alone.
    let o = Command::new(bin)
        .args(["--cleanup", "--netns-prefix", &p])
        .output()
        .expect("xdp-floor --cleanup");
    assert!(o.status.success(), "{o:?}");
    assert!(!left(&p).is_empty(), "--cleanup removed a running tool's");
    let had = sigkill(tool, &p);
    let o = Command::new(bin)
        .args(["--cleanup", "--netns-prefix", &p])
        .output()
        .expect("xdp-floor --cleanup");
    let out = String::from_utf8_lossy(&o.stdout);
    assert!(o.status.success(), "{o:?}");
    assert!(out.contains("removed namespace"), "{out}");
    assert!(
        wait_for(10, || left(&p).is_empty()),
        "left after --cleanup: {:?} (had {had:?})",
        left(&p)
    );
    // iwarp-perf takes --cleanup without a TEST.
    let o = Command::new(env!("CARGO_BIN_EXE_iwarp-perf"))
        .args(["--cleanup", "--netns-prefix", &p])
        .output()
        .expect("iwarp-perf --cleanup");
    assert!(o.status.success(), "{o:?}");
}

/// A run removes what a killed run of its prefix left before it makes its
/// own namespaces (no `--cleanup` needed), and names it on stderr.
#[test]
fn the_next_run_sweeps_what_a_killed_run_left() {
    if let Some(why) = skip() {
        println!("SKIP: {why}");
        return;
    }
    let bin = env!("CARGO_BIN_EXE_xdp-floor");
    let p = prefix('n');
    let had = sigkill(floor_running(bin, &p), &p);
    let o = Command::new(bin)
        .args(["--secs", "1", "--mtu", "1500", "--netns-prefix", &p])
        .output()
        .expect("xdp-floor");
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(o.status.success(), "{o:?}");
    assert!(
        err.contains("left by a run that could not clean up"),
        "{err}"
    );
    assert!(
        wait_for(10, || left(&p).is_empty()),
        "left after the next run: {:?} (had {had:?})",
        left(&p)
    );
}

/// `xdp-floor` (`bin`) running with prefix `p`, once its namespaces exist.
fn floor_running(bin: &str, p: &str) -> Tool {
    let child = Command::new(bin)
        .args(["--secs", "30", "--mtu", "1500", "--netns-prefix", p])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("start xdp-floor");
    let tool = Tool(child);
    assert!(
        wait_for(60, || left(p).len() >= 2),
        "no namespaces appeared"
    );
    tool
}

/// SIGKILL `tool` (prefix `p`): what it left, which is not nothing.
fn sigkill(mut tool: Tool, p: &str) -> Vec<String> {
    tool.0.kill().expect("SIGKILL");
    tool.0.wait().expect("wait");
    let had = left(p);
    assert!(!had.is_empty(), "SIGKILL cleaned up?");
    had
}
