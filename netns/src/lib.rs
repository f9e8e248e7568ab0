//! Throw-away network namespaces and veth pairs for tests.
//!
//! Everything is done by running iproute2's `ip` (and `sh` for one sysctl
//! write), so this crate is safe Rust (its one dependency, `signal-hook`,
//! waits for signals). Names are unique per call (a prefix, the process id
//! and a counter) and every object is deleted in `Drop`, also while a test
//! unwinds from a panic; [`guard`] removes them on SIGINT/SIGTERM too and
//! sweeps those of dead processes. Every command
//! runs under a hard timeout: a child still running at the deadline is killed
//! and the error names the command.
//!
//! Entering a namespace from a thread needs `setns(2)`, which needs `unsafe`;
//! this crate only hands out [`Netns::ns_path`] (`/var/run/netns/<name>`) and
//! leaves entering to the caller (`iwarp_xdp::in_netns`).
//!
//! ```no_run
//! use netns_harness::{skip_test_without_root, End, Netns, VethPair};
//! if skip_test_without_root() {
//!     return; // printed `SKIP: why`; under CI it panicked instead
//! }
//! let a = Netns::new("t").unwrap();
//! let b = Netns::new("t").unwrap();
//! let mut veth = VethPair::new("t").unwrap();
//! veth.move_to(End::A, &a).unwrap();
//! veth.move_to(End::B, &b).unwrap();
//! veth.disable_ipv6(End::A).unwrap();
//! veth.disable_ipv6(End::B).unwrap();
//! veth.add_addr(End::B, "10.0.0.2/24").unwrap();
//! veth.set_up(End::A).unwrap();
//! veth.set_up(End::B).unwrap();
//! // … the namespaces and the pair are gone once `veth`, `b`, `a` drop.
//! ```
#![forbid(unsafe_code)]

use std::fmt;
use std::io::Read;
use std::path::PathBuf;
use std::process::{Child, Command, ExitStatus, Output, Stdio};
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::mpsc;
use std::time::{Duration, Instant};

pub mod guard;

/// Timeout of the `ip` commands this crate runs itself.
pub const IP_TIMEOUT: Duration = Duration::from_secs(20);

/// The longest interface name Linux accepts (IFNAMSIZ − 1).
pub const MAX_IFNAME: usize = 15;

static COUNTER: AtomicU32 = AtomicU32::new(0);

/// What went wrong running a command.
#[derive(Debug)]
pub enum Error {
    /// The command could not be started (not installed?).
    Spawn {
        /// The command line.
        cmd: String,
        /// Why.
        source: std::io::Error,
    },
    /// It exited unsuccessfully.
    Failed {
        /// The command line.
        cmd: String,
        /// Its exit status.
        status: ExitStatus,
        /// What it wrote to stderr.
        stderr: String,
    },
    /// It was still running at the deadline and was killed.
    Timeout {
        /// The command line.
        cmd: String,
        /// The limit it ran into.
        after: Duration,
        /// What it wrote before it was killed (stdout, then stderr; the
        /// last 4 KiB of each), to tell where it stopped.
        output: String,
    },
    /// Waiting for it failed.
    Wait {
        /// The command line.
        cmd: String,
        /// Why.
        source: std::io::Error,
    },
}

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Error::Spawn { cmd, source } => write!(f, "could not start `{cmd}`: {source}"),
            Error::Failed {
                cmd,
                status,
                stderr,
            } => write!(f, "`{cmd}` failed ({status}): {}", stderr.trim_end()),
            Error::Timeout { cmd, after, output } => {
                write!(f, "`{cmd}` still running after {after:?}; killed it")?;
                if !output.is_empty() {
                    write!(f, "; it had written:\n{}", output.trim_end())?;
                }
                Ok(())
            }
            Error::Wait { cmd, source } => write!(f, "waiting for `{cmd}`: {source}"),
        }
    }
}

impl std::error::Error for Error {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            Error::Spawn { source, .. } | Error::Wait { source, .. } => Some(source),
            _ => None,
        }
    }
}

/// Why namespace tests cannot run here, or `None` when they can: they need
/// root (effective uid 0 with CAP_SYS_ADMIN and CAP_NET_ADMIN, as `ip netns`
/// mounts and configures) and iproute2's `ip`. Tests call
/// [`skip_test_without_root`] (SKIP here, a failure under CI); tools decide
/// with this.
pub fn skip_reason() -> Option<String> {
    let status = match std::fs::read_to_string("/proc/self/status") {
        Ok(s) => s,
        Err(e) => return Some(format!("cannot read /proc/self/status: {e}")),
    };
    let field = |name: &str| {
        status
            .lines()
            .find_map(|l| l.strip_prefix(name))
            .map(str::trim)
    };
    let euid = field("Uid:").and_then(|v| v.split_whitespace().nth(1));
    if euid != Some("0") {
        return Some(format!(
            "needs root (effective uid is {})",
            euid.unwrap_or("unknown")
        ));
    }
    let caps = field("CapEff:").and_then(|v| u64::from_str_radix(v, 16).ok());
    const CAP_NET_ADMIN: u32 = 12;
    const CAP_SYS_ADMIN: u32 = 21;
    match caps {
        Some(c) if c & (1 << CAP_NET_ADMIN) != 0 && c & (1 << CAP_SYS_ADMIN) != 0 => {}
        _ => return Some("root, but without CAP_SYS_ADMIN and CAP_NET_ADMIN".into()),
    }
    if !command_available("ip") {
        return Some("iproute2 `ip` is not installed".into());
    }
    None
}

/// Whether this runs under CI: the `CI` environment variable is set and not
/// empty (GitHub Actions, GitLab and most others set `CI=true`).
pub fn under_ci() -> bool {
    std::env::var_os("CI").is_some_and(|v| !v.is_empty())
}

/// For a test that cannot run its real setup here (`why`): prints
/// `SKIP: {why}` so that it passes on a developer's machine, but under CI
/// ([`under_ci`]) panics with `why`, so that a test that did not run never
/// passes unseen there. The caller returns after it.
pub fn skip_test(why: &str) {
    assert!(!under_ci(), "CI must run this test, but cannot: {why}");
    println!("SKIP: {why}");
}

/// For a test that needs namespaces: `true` (after [`skip_test`] printed why)
/// when it cannot run here and should return, `false` when it can go on.
/// Under CI it panics instead of returning `true`.
pub fn skip_test_without_root() -> bool {
    match skip_reason() {
        Some(why) => {
            skip_test(&why);
            true
        }
        None => false,
    }
}

/// Whether `name` can be run (found on `PATH` and executable). Runs
/// `sh -c 'command -v NAME'`.
pub fn command_available(name: &str) -> bool {
    run(
        &["sh", "-c", "command -v \"$1\" >/dev/null", "sh", name],
        Duration::from_secs(5),
    )
    .map(|o| o.status.success())
    .unwrap_or(false)
}

fn unique_base(prefix: &str) -> (String, u32) {
    let n = COUNTER.fetch_add(1, Ordering::Relaxed);
    let pid = std::process::id();
    let p: String = prefix
        .chars()
        .filter(|c| c.is_ascii_alphanumeric())
        .take(5)
        .collect();
    // prefix ≤ 5, pid as exactly 5 base-36 digits (pid_max ≤ 2^22 < 36^5),
    // '-', counter (≤ 3 digits) and one suffix character: ≤ 15. The pid's
    // fixed width lets `guard::creator_pids` read it back unambiguously
    // whatever role character the prefix ends with.
    let base = format!("{p}{}-{}", pid_digits(pid), base36(n % 46_656));
    (base, pid.wrapping_mul(0x9e37_79b9) ^ n)
}

/// How many base-36 digits a process id takes in a name.
pub(crate) const PID_DIGITS: usize = 5;

/// `pid` in base 36, zero-padded to [`PID_DIGITS`] (wider only past
/// 36^5, which `pid_max`, at most 2^22, never reaches).
fn pid_digits(pid: u32) -> String {
    format!("{:0>width$}", base36(pid), width = PID_DIGITS)
}

fn base36(mut v: u32) -> String {
    const DIGITS: &[u8; 36] = b"0123456789abcdefghijklmnopqrstuvwxyz";
    let mut out = Vec::new();
    loop {
        out.push(DIGITS[(v % 36) as usize]);
        v /= 36;
        if v == 0 {
            break;
        }
    }
    out.reverse();
    String::from_utf8_lossy(&out).into_owned()
}

fn already_exists(e: &Error) -> bool {
    matches!(e, Error::Failed { stderr, .. } if stderr.contains("exists"))
}

fn no_free_name() -> Error {
    Error::Spawn {
        cmd: "ip … add".into(),
        source: std::io::Error::new(std::io::ErrorKind::AlreadyExists, "no free name"),
    }
}

fn cmd_line(args: &[&str]) -> String {
    args.join(" ")
}

/// Run `args` (program first) in the current namespace under a hard timeout.
/// A non-zero exit is not an error here: look at `status`.
pub fn run(args: &[&str], timeout: Duration) -> Result<Output, Error> {
    spawn(args)?.wait_timeout(timeout)
}

/// Run `args`; error on a non-zero exit too.
fn run_ok(args: &[&str], timeout: Duration) -> Result<Output, Error> {
    let out = run(args, timeout)?;
    if out.status.success() {
        Ok(out)
    } else {
        Err(Error::Failed {
            cmd: cmd_line(args),
            status: out.status,
            stderr: String::from_utf8_lossy(&out.stderr).into_owned(),
        })
    }
}

fn spawn(args: &[&str]) -> Result<Spawned, Error> {
    let cmd = cmd_line(args);
    let Some((prog, rest)) = args.split_first() else {
        return Err(Error::Spawn {
            cmd,
            source: std::io::Error::new(std::io::ErrorKind::InvalidInput, "empty command"),
        });
    };
    match Command::new(prog)
        .args(rest)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
    {
        Ok(child) => Ok(Spawned { child, cmd }),
        Err(source) => Err(Error::Spawn { cmd, source }),
    }
}

fn ns_args<'a>(ns: &'a Netns, args: &[&'a str]) -> Vec<&'a str> {
    let mut v = vec!["ip", "netns", "exec", ns.name()];
    v.extend_from_slice(args);
    v
}

/// Run `args` inside `ns` (`ip netns exec`) under a hard timeout: the child
/// is killed at the deadline and the error names the command. A non-zero
/// exit is not an error here: look at `status`.
pub fn run_in(ns: &Netns, args: &[&str], timeout: Duration) -> Result<Output, Error> {
    run(&ns_args(ns, args), timeout)
}

/// Start `args` inside `ns` in the background. Its stdout and stderr are
/// captured (collect them with [`Spawned::wait_timeout`]); it is killed when
/// the handle drops.
pub fn spawn_in(ns: &Netns, args: &[&str]) -> Result<Spawned, Error> {
    spawn(&ns_args(ns, args))
}

/// A running child process, killed (and reaped) on drop.
#[derive(Debug)]
pub struct Spawned {
    child: Child,
    cmd: String,
}

impl Spawned {
    /// The command line.
    pub fn cmd(&self) -> &str {
        &self.cmd
    }

    /// Its exit status, if it has exited.
    pub fn try_wait(&mut self) -> Result<Option<ExitStatus>, Error> {
        self.child.try_wait().map_err(|source| Error::Wait {
            cmd: self.cmd.clone(),
            source,
        })
    }

    /// Wait for it to exit, at most `timeout`; kill it then. Returns its
    /// status and what it wrote.
    pub fn wait_timeout(mut self, timeout: Duration) -> Result<Output, Error> {
        let deadline = Instant::now() + timeout;
        let out_rx = reader(self.child.stdout.take());
        let err_rx = reader(self.child.stderr.take());
        let status = loop {
            match self.try_wait()? {
                Some(status) => break status,
                None if Instant::now() >= deadline => {
                    let _ = self.child.kill();
                    let _ = self.child.wait();
                    let grace = Duration::from_secs(1);
                    let tail = |b: Vec<u8>| {
                        let s = String::from_utf8_lossy(&b).into_owned();
                        let cut = s.len().saturating_sub(4096);
                        let cut = (cut..=s.len())
                            .find(|&i| s.is_char_boundary(i))
                            .unwrap_or(0);
                        s[cut..].to_owned()
                    };
                    let output = [
                        tail(out_rx.recv_timeout(grace).unwrap_or_default()),
                        tail(err_rx.recv_timeout(grace).unwrap_or_default()),
                    ]
                    .concat();
                    return Err(Error::Timeout {
                        cmd: self.cmd.clone(),
                        after: timeout,
                        output,
                    });
                }
                None => std::thread::sleep(Duration::from_millis(5)),
            }
        };
        // A grandchild may still hold the pipes open: don't wait long for EOF.
        let grace = Duration::from_secs(1);
        Ok(Output {
            status,
            stdout: out_rx.recv_timeout(grace).unwrap_or_default(),
            stderr: err_rx.recv_timeout(grace).unwrap_or_default(),
        })
    }

    /// Kill it now (no error if it has already exited).
    pub fn kill(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn reader<R: Read + Send + 'static>(pipe: Option<R>) -> mpsc::Receiver<Vec<u8>> {
    let (tx, rx) = mpsc::channel();
    if let Some(mut p) = pipe {
        std::thread::spawn(move || {
            let mut buf = Vec::new();
            let _ = p.read_to_end(&mut buf);
            let _ = tx.send(buf);
        });
    } else {
        let _ = tx.send(Vec::new());
    }
    rx
}

impl Drop for Spawned {
    fn drop(&mut self) {
        if matches!(self.child.try_wait(), Ok(None)) {
            self.kill();
        }
    }
}

/// A named network namespace (`ip netns add`), deleted on drop.
#[derive(Debug)]
pub struct Netns {
    name: String,
    id: u32,
}

impl Netns {
    /// Create a namespace named `<prefix><pid>-<n>` with its loopback up
    /// (the prefix's first 5 letters and digits, the pid as 5 base-36 digits).
    pub fn new(prefix: &str) -> Result<Netns, Error> {
        guard::prepare(prefix);
        let mut last = None;
        for _ in 0..8 {
            let (name, id) = unique_base(prefix);
            match guard::create_netns(&name, || run_ok(&["ip", "netns", "add", &name], IP_TIMEOUT))
            {
                Ok(_) => {
                    let ns = Netns { name, id };
                    ns.ip(&["link", "set", "lo", "up"])?;
                    return Ok(ns);
                }
                // Left over from an earlier process with the same pid: next.
                Err(e) if already_exists(&e) => last = Some(e),
                Err(e) => return Err(e),
            }
        }
        Err(last.unwrap_or_else(no_free_name))
    }

    /// Its name.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// A number unique to this namespace in this process (derived from the
    /// pid and the counter), e.g. to pick a subnet.
    pub fn id(&self) -> u32 {
        self.id
    }

    /// The file to open for `setns(2)`: `/var/run/netns/<name>`.
    pub fn ns_path(&self) -> PathBuf {
        PathBuf::from("/var/run/netns").join(&self.name)
    }

    /// Run `ip -n <ns> <args>`; error on a non-zero exit.
    pub fn ip(&self, args: &[&str]) -> Result<Output, Error> {
        let mut v = vec!["ip", "-n", self.name()];
        v.extend_from_slice(args);
        run_ok(&v, IP_TIMEOUT)
    }

    /// Drop `permille`/1000 of the IP packets entering and of those leaving
    /// the namespace's stack at random (nftables `numgen random`, both
    /// hooks), replacing any earlier rule of ours; 0 removes it. Frames an
    /// XDP program steers to an AF_XDP socket never reach these hooks.
    pub fn set_random_loss(&self, permille: u32) -> Result<(), Error> {
        const TABLE: &str = "netns_harness_loss";
        let nft = |args: &[&str]| {
            let mut v = vec!["ip", "netns", "exec", self.name(), "nft"];
            v.extend_from_slice(args);
            run_ok(&v, IP_TIMEOUT)
        };
        // Absent the first time: nothing to delete.
        let _ = nft(&["delete", "table", "inet", TABLE]);
        if permille == 0 {
            return Ok(());
        }
        let n = permille.min(1000).to_string();
        nft(&["add", "table", "inet", TABLE])?;
        for (chain, hook) in [("in", "input"), ("out", "output")] {
            let spec = format!("{{ type filter hook {hook} priority 0 ; }}");
            nft(&["add", "chain", "inet", TABLE, chain, &spec])?;
            nft(&[
                "add", "rule", "inet", TABLE, chain, "numgen", "random", "mod", "1000", "<", &n,
                "drop",
            ])?;
        }
        Ok(())
    }
}

impl Drop for Netns {
    fn drop(&mut self) {
        let _ = run(&["ip", "netns", "delete", &self.name], IP_TIMEOUT);
        guard::forget_netns(&self.name);
    }
}

/// The names of the namespaces `ip netns list` shows.
pub fn list_netns() -> Result<Vec<String>, Error> {
    let out = run_ok(&["ip", "netns", "list"], IP_TIMEOUT)?;
    Ok(String::from_utf8_lossy(&out.stdout)
        .lines()
        .filter_map(|l| l.split_whitespace().next().map(str::to_owned))
        .collect())
}

/// Whether an interface of that name exists in the current namespace.
pub fn link_exists(name: &str) -> bool {
    run(&["ip", "link", "show", "dev", name], IP_TIMEOUT)
        .map(|o| o.status.success())
        .unwrap_or(false)
}

/// One end of a [`VethPair`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum End {
    /// The first end (`…a`).
    A,
    /// The second end (`…b`).
    B,
}

/// Join namespaces `a` and `b` through a bridge `br0` in `br`: end A of
/// `va` goes to `a` and end A of `vb` to `b`, both ends B to `br` as the
/// bridge's ports; IPv6 is off on every end (no router solicitations in
/// captures), everything is up, and this returns once each veth reports
/// `state UP` (at most 5 s each). The callers keep the veths and
/// namespaces, so their drop order stays theirs.
pub fn bridge(
    a: &Netns,
    b: &Netns,
    br: &Netns,
    va: &mut VethPair,
    vb: &mut VethPair,
) -> Result<(), Error> {
    va.move_to(End::A, a)?;
    va.move_to(End::B, br)?;
    vb.move_to(End::A, b)?;
    vb.move_to(End::B, br)?;
    br.ip(&["link", "add", "br0", "type", "bridge"])?;
    for v in [&*va, &*vb] {
        for end in [End::A, End::B] {
            v.disable_ipv6(end)?;
            v.set_up(end)?;
        }
        br.ip(&["link", "set", v.name(End::B), "master", "br0"])?;
    }
    br.ip(&["link", "set", "br0", "up"])?;
    for v in [&*va, &*vb] {
        for end in [End::A, End::B] {
            v.wait_up(end, Duration::from_secs(5))?;
        }
    }
    Ok(())
}

/// A veth pair, created in the current (root) namespace; either end can be
/// moved into a [`Netns`]. On drop both ends are deleted (deleting one
/// deletes its peer; an end whose namespace is already gone went with it).
#[derive(Debug)]
pub struct VethPair {
    names: [String; 2],
    ns: [Option<String>; 2],
}

fn idx(end: End) -> usize {
    match end {
        End::A => 0,
        End::B => 1,
    }
}

impl VethPair {
    /// Create `<prefix><pid>-<n>a` / `…b` (at most 15 characters each).
    pub fn new(prefix: &str) -> Result<VethPair, Error> {
        Self::with_queues(prefix, 1)
    }

    /// As [`VethPair::new`], each end with `queues` RX and TX queues
    /// (`numrxqueues`/`numtxqueues`): a frame sent on TX queue *i* of one
    /// end arrives on RX queue *i* of the other (veth keeps the sender's
    /// queue mapping), so a sender steers its flows across the peer's
    /// queues.
    pub fn with_queues(prefix: &str, queues: u32) -> Result<VethPair, Error> {
        guard::prepare(prefix);
        let mut last = None;
        let q = queues.max(1).to_string();
        for _ in 0..8 {
            let (base, _) = unique_base(prefix);
            let names = [format!("{base}a"), format!("{base}b")];
            debug_assert!(names.iter().all(|n| n.len() <= MAX_IFNAME));
            let r = guard::create_veth(&names, || {
                run_ok(
                    &[
                        "ip",
                        "link",
                        "add",
                        &names[0],
                        "numtxqueues",
                        &q,
                        "numrxqueues",
                        &q,
                        "type",
                        "veth",
                        "peer",
                        "name",
                        &names[1],
                        "numtxqueues",
                        &q,
                        "numrxqueues",
                        &q,
                    ],
                    IP_TIMEOUT,
                )
            });
            match r {
                Ok(_) => {
                    return Ok(VethPair {
                        names,
                        ns: [None, None],
                    })
                }
                Err(e) if already_exists(&e) => last = Some(e),
                Err(e) => return Err(e),
            }
        }
        Err(last.unwrap_or_else(no_free_name))
    }

    /// The interface name of `end`.
    pub fn name(&self, end: End) -> &str {
        &self.names[idx(end)]
    }

    /// The namespace `end` is in (`None`: the one it was created in).
    pub fn netns(&self, end: End) -> Option<&str> {
        self.ns[idx(end)].as_deref()
    }

    fn ip(&self, end: End, args: &[&str]) -> Result<Output, Error> {
        let mut v = vec!["ip"];
        if let Some(ns) = self.netns(end) {
            v.extend_from_slice(&["-n", ns]);
        }
        v.extend_from_slice(args);
        run_ok(&v, IP_TIMEOUT)
    }

    /// Move `end` into `ns`.
    pub fn move_to(&mut self, end: End, ns: &Netns) -> Result<(), Error> {
        let name = self.names[idx(end)].clone();
        self.ip(end, &["link", "set", "dev", &name, "netns", ns.name()])?;
        self.ns[idx(end)] = Some(ns.name().to_owned());
        Ok(())
    }

    /// Add an address (`10.1.2.3/24`) to `end`.
    pub fn add_addr(&self, end: End, cidr: &str) -> Result<(), Error> {
        self.ip(end, &["addr", "add", cidr, "dev", self.name(end)])
            .map(drop)
    }

    /// Set `end` up.
    pub fn set_up(&self, end: End) -> Result<(), Error> {
        self.ip(end, &["link", "set", "dev", self.name(end), "up"])
            .map(drop)
    }

    /// Wait until `end` is operationally up (`state UP` in `ip link`), at
    /// most `limit`. A veth is up only once both ends are, and the kernel
    /// reports the change through its link watch, which may batch it for
    /// up to a second after `ip link set up` returns: a tool that reads
    /// the state at once (perftest's `ibv_query_port`, through our
    /// library's `operstate`) can see the port down.
    pub fn wait_up(&self, end: End, limit: Duration) -> Result<(), Error> {
        let since = Instant::now();
        loop {
            let out = self.ip(end, &["-o", "link", "show", "dev", self.name(end)])?;
            let text = String::from_utf8_lossy(&out.stdout).into_owned();
            if text.contains("state UP") {
                return Ok(());
            }
            if since.elapsed() >= limit {
                return Err(Error::Timeout {
                    cmd: format!("waiting for {} to be up", self.name(end)),
                    after: limit,
                    output: text,
                });
            }
            std::thread::sleep(Duration::from_millis(10));
        }
    }

    /// Set the MTU of `end`.
    pub fn set_mtu(&self, end: End, mtu: u32) -> Result<(), Error> {
        let m = mtu.to_string();
        self.ip(end, &["link", "set", "dev", self.name(end), "mtu", &m])
            .map(drop)
    }

    /// Turn TX checksum offload off on `end` (`ethtool -K <if> tx off`, so
    /// ethtool must be installed). A veth leaves TCP/UDP checksums partial
    /// (CHECKSUM_PARTIAL) in frames it sends when offload is on: a kernel
    /// receiver does not mind, but an AF_XDP socket on the other end gets
    /// the frames with wrong checksums. Turn it off on the sending end.
    pub fn disable_tx_offload(&self, end: End) -> Result<(), Error> {
        let mut v = vec![];
        if let Some(ns) = self.netns(end) {
            v.extend_from_slice(&["ip", "netns", "exec", ns]);
        }
        v.extend_from_slice(&["ethtool", "-K", self.name(end), "tx", "off"]);
        run_ok(&v, IP_TIMEOUT).map(drop)
    }

    /// Turn off the offloads that let Linux move more than one MTU per
    /// packet through `end` (`ethtool -K <if> tso off gso off gro off`):
    /// for comparisons where both stacks must send, and lose, MTU-sized
    /// packets.
    pub fn disable_segmentation_offload(&self, end: End) -> Result<(), Error> {
        let mut v = vec![];
        if let Some(ns) = self.netns(end) {
            v.extend_from_slice(&["ip", "netns", "exec", ns]);
        }
        v.extend_from_slice(&[
            "ethtool",
            "-K",
            self.name(end),
            "tso",
            "off",
            "gso",
            "off",
            "gro",
            "off",
        ]);
        run_ok(&v, IP_TIMEOUT).map(drop)
    }

    /// Turn IPv6 off on `end` (no link-local address, no DAD/MLD/RS
    /// traffic), through `net.ipv6.conf.<if>.disable_ipv6`. A kernel
    /// without IPv6 counts as done.
    pub fn disable_ipv6(&self, end: End) -> Result<(), Error> {
        let script = "f=/proc/sys/net/ipv6/conf/$1/disable_ipv6; \
                      if [ -e /proc/sys/net/ipv6 ]; then echo 1 > \"$f\"; fi";
        let mut v = vec![];
        if let Some(ns) = self.netns(end) {
            v.extend_from_slice(&["ip", "netns", "exec", ns]);
        }
        v.extend_from_slice(&["sh", "-c", script, "sh", self.name(end)]);
        run_ok(&v, IP_TIMEOUT).map(drop)
    }
}

impl Drop for VethPair {
    fn drop(&mut self) {
        for end in [End::A, End::B] {
            if self
                .ip(end, &["link", "delete", "dev", self.name(end)])
                .is_ok()
            {
                break;
            }
        }
        guard::forget_veth(&self.names);
    }
}

/// Two namespaces joined by a veth pair, end A in `a` and end B in `b`,
/// both up (operationally: [`VethPair::wait_up`]) with IPv6 off: where
/// most namespace tests start. The veth is
/// deleted before the namespaces (field order).
#[derive(Debug)]
pub struct NsPair {
    /// The pair.
    pub veth: VethPair,
    /// End A's namespace.
    pub a: Netns,
    /// End B's namespace.
    pub b: Netns,
}

impl NsPair {
    /// Namespaces `<prefix>a…` and `<prefix>b…`, veth `<prefix>v…`
    /// (`prefix`: at most 3 characters, for the interface names' limit).
    pub fn new(prefix: &str) -> Result<NsPair, Error> {
        let a = Netns::new(&format!("{prefix}a"))?;
        let b = Netns::new(&format!("{prefix}b"))?;
        let mut veth = VethPair::new(&format!("{prefix}v"))?;
        veth.move_to(End::A, &a)?;
        veth.move_to(End::B, &b)?;
        for end in [End::A, End::B] {
            veth.disable_ipv6(end)?;
            veth.set_up(end)?;
        }
        for end in [End::A, End::B] {
            veth.wait_up(end, Duration::from_secs(5))?;
        }
        Ok(NsPair { veth, a, b })
    }

    /// Host `host` of a /24 unique to this pair in this process
    /// (10.x.y.0/24, from `a`'s id), for addresses that do not clash with
    /// other tests running at the same time.
    pub fn addr(&self, host: u8) -> std::net::Ipv4Addr {
        let id = self.a.id();
        std::net::Ipv4Addr::new(10, (id >> 8) as u8, id as u8, host)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_fit_ifnamsiz() {
        let (base, _) = unique_base("prefixtoolong");
        assert!(base.len() < MAX_IFNAME, "{base}");
        assert!(base36(u32::MAX).len() <= 7);
        assert_eq!(base36(0), "0");
        assert_eq!(base36(36), "10");
        assert_eq!(pid_digits(0), "00000");
        assert_eq!(pid_digits(4_194_304), "2hwcg");
        let (b1, _) = unique_base("x");
        let (b2, _) = unique_base("x");
        assert_ne!(b1, b2);
    }

    #[test]
    fn create_and_destroy() {
        if skip_test_without_root() {
            return;
        }
        let (ns_name, a_name, b_name);
        {
            let ns = Netns::new("nst").expect("netns");
            ns_name = ns.name().to_owned();
            assert!(ns.ns_path().exists());
            let mut veth = VethPair::new("nst").expect("veth");
            a_name = veth.name(End::A).to_owned();
            b_name = veth.name(End::B).to_owned();
            assert!(a_name.len() <= MAX_IFNAME && b_name.len() <= MAX_IFNAME);
            assert!(link_exists(&a_name) && link_exists(&b_name));
            veth.move_to(End::B, &ns).expect("move");
            assert!(!link_exists(&b_name));
            veth.disable_ipv6(End::A).expect("ipv6 a");
            veth.disable_ipv6(End::B).expect("ipv6 b");
            veth.set_mtu(End::B, 1400).expect("mtu");
            veth.add_addr(End::B, "10.200.0.2/24").expect("addr");
            veth.set_up(End::A).expect("up a");
            veth.set_up(End::B).expect("up b");
            let out = run_in(&ns, &["ip", "-o", "addr", "show"], IP_TIMEOUT).expect("run_in");
            let text = String::from_utf8_lossy(&out.stdout);
            assert!(text.contains("10.200.0.2/24"), "{text}");
            let v6 = text
                .lines()
                .any(|l| l.contains(&b_name) && l.contains("inet6"));
            assert!(!v6, "IPv6 still on: {text}");
            let mtu = ns.ip(&["link", "show", "dev", &b_name]).expect("show");
            assert!(String::from_utf8_lossy(&mtu.stdout).contains("mtu 1400"));
            assert!(list_netns().expect("list").contains(&ns_name));
        }
        assert!(!list_netns().expect("list").contains(&ns_name));
        assert!(!link_exists(&a_name));
        assert!(!link_exists(&b_name));
    }

    #[test]
    fn timeout_kills() {
        if skip_test_without_root() {
            return;
        }
        let ns = Netns::new("nst").expect("netns");
        let t = Instant::now();
        let err = run_in(&ns, &["sleep", "30"], Duration::from_millis(300)).unwrap_err();
        // Killed at its deadline, not after the 30 s sleep; the margin is
        // for a loaded machine.
        assert!(t.elapsed() < Duration::from_secs(20), "{:?}", t.elapsed());
        match &err {
            Error::Timeout { cmd, .. } => assert!(cmd.contains("sleep 30"), "{cmd}"),
            e => panic!("expected a timeout, got {e}"),
        }
        assert!(err.to_string().contains("sleep 30"));
        // spawn_in: the child dies with its handle.
        let child = spawn_in(&ns, &["sleep", "30"]).expect("spawn");
        let pid = child.child.id();
        drop(child);
        assert!(!std::path::Path::new(&format!("/proc/{pid}")).exists());
    }

    #[test]
    fn timeout_kills_without_root() {
        let t = Instant::now();
        let err = run(&["sleep", "30"], Duration::from_millis(200)).unwrap_err();
        assert!(matches!(err, Error::Timeout { .. }), "{err}");
        // Killed at its deadline, not after the 30 s sleep.
        assert!(t.elapsed() < Duration::from_secs(20), "{:?}", t.elapsed());
        let ok = run(&["sh", "-c", "echo hi; exit 3"], Duration::from_secs(5)).expect("sh");
        assert_eq!(ok.status.code(), Some(3));
        assert_eq!(ok.stdout, b"hi\n");
    }
}
