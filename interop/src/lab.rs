//! A driver for the siw lab (`interop/lab/lab.sh`): boot one qemu guest
//! running a given siw build, attach a veth to the lab bridge for our
//! AF_XDP stack, run commands in the guest, capture, and tear it all down
//! on drop. Only one lab exists at a time (it owns the netns `iwlab`).

use std::net::Ipv4Addr;
use std::path::PathBuf;
use std::process::Output;
use std::time::Duration;

use iwarp::{Context, Polling, XdpOptions};

/// Guest A's address on the lab link.
pub const GUEST: Ipv4Addr = Ipv4Addr::new(192, 168, 177, 2);
/// Our stack's address on the lab link (not configured in any kernel).
pub const HOST: Ipv4Addr = Ipv4Addr::new(192, 168, 177, 10);
/// The lab's network namespace.
pub const NETNS: &str = "iwlab";
/// The veth our stack opens with AF_XDP (its peer is on the lab bridge).
pub const VETH: &str = "iwhost0";
/// The guest kernel the lab boots.
pub const GUEST_KERNEL: &str = "/boot/vmlinuz-6.1.0-56-amd64";

/// The siw builds the lab offers (`lab.sh up --siw NAME`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Variant {
    /// Stock siw: CRC not requested, no peer-to-peer.
    Std,
    /// `mpa_crc_required = true`.
    Crc,
    /// `peer_to_peer = true` (MPA Rev 2 RTR).
    P2p,
    /// Both.
    CrcP2p,
}

impl Variant {
    /// All four.
    pub const ALL: [Variant; 4] = [Variant::Std, Variant::Crc, Variant::P2p, Variant::CrcP2p];

    /// The lab's name for it.
    pub fn name(self) -> &'static str {
        match self {
            Variant::Std => "std",
            Variant::Crc => "crc",
            Variant::P2p => "p2p",
            Variant::CrcP2p => "crcp2p",
        }
    }

    /// Whether this build asks for CRC.
    pub fn crc(self) -> bool {
        matches!(self, Variant::Crc | Variant::CrcP2p)
    }

    /// Whether this build speaks peer-to-peer (RTR) mode.
    pub fn p2p(self) -> bool {
        matches!(self, Variant::P2p | Variant::CrcP2p)
    }
}

/// The lab script: `$IWARP_LAB`, else the vendored copy.
pub fn script() -> PathBuf {
    match std::env::var_os("IWARP_LAB") {
        Some(p) => PathBuf::from(p),
        None => PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("lab/lab.sh"),
    }
}

/// Where the lab keeps its cache and run state (`$LAB_STATE`).
pub fn state_dir() -> PathBuf {
    match std::env::var_os("LAB_STATE") {
        Some(p) => PathBuf::from(p),
        None => PathBuf::from("/var/tmp/iwarp-lab"),
    }
}

/// Guest A's serial console as the last lab left it (it stays after
/// `lab.sh down`, until the next `up`).
pub fn last_console() -> String {
    std::fs::read(state_dir().join("run/A.console.log"))
        .map(|b| String::from_utf8_lossy(&b).into_owned())
        .unwrap_or_default()
}

/// Whether the guest's kernel found the transmit queue of its lab link
/// (`eth0`, an emulated virtio-net NIC) stuck: `eth0: NETDEV WATCHDOG: ...
/// transmit queue 0 timed out`. Seen under TCG on a loaded host (2 suite runs
/// in 19 here): the guest's NIC stops sending for good, whatever
/// the peer does (its frames reach us through the tap and the bridge, which
/// never push back on the guest), so nothing the guest sends after it
/// arrives and the exchange under way stalls.
pub fn guest_nic_wedged(console: &str) -> bool {
    // 6.1 prints `virtio_net virtio0 eth0: NETDEV WATCHDOG: CPU: 0:
    // transmit queue 0 timed out N ms`; older kernels `NETDEV WATCHDOG:
    // eth0 (virtio_net): transmit queue 0 timed out`.
    console.lines().any(|l| {
        l.contains("NETDEV WATCHDOG") && (l.contains("eth0:") || l.contains("WATCHDOG: eth0 "))
    })
}

/// Run `body` (one lab's worth of a test: it brings its own [`Lab`] up);
/// when it panics and the guest's console shows the guest's own NIC wedged
/// ([`guest_nic_wedged`]: the emulator's fault, not a peer's), run it once
/// more on a fresh guest, saying so on stderr. Any other failure, or a
/// second one, fails as it came.
pub fn retry_if_guest_nic_wedged(name: &str, body: impl Fn()) {
    let Err(panic) = std::panic::catch_unwind(std::panic::AssertUnwindSafe(&body)) else {
        return;
    };
    let console = last_console();
    if !guest_nic_wedged(&console) {
        std::panic::resume_unwind(panic);
    }
    let line = console
        .lines()
        .find(|l| guest_nic_wedged(l))
        .unwrap_or_default();
    eprintln!(
        "{name}: the guest's lab NIC stopped sending ({}); once more on a fresh guest",
        line.trim()
    );
    body();
}

/// Why the lab cannot run here, or `None` when it can.
pub fn skip_reason() -> Option<String> {
    if let Some(r) = netns_harness::skip_reason() {
        return Some(r);
    }
    if !script().exists() {
        return Some(format!("no lab script at {}", script().display()));
    }
    if !std::path::Path::new(GUEST_KERNEL).exists() {
        return Some(format!(
            "{GUEST_KERNEL} is missing (install linux-image-6.1.0-56-amd64; scripts/deps.sh does)"
        ));
    }
    let cache = state_dir().join("cache");
    for f in ["initramfs.cpio.gz", "siw-std.ko", "siw-crcp2p.ko"] {
        if !cache.join(f).exists() {
            return Some(format!(
                "the lab is not set up ({} missing: run `{} setup`)",
                cache.join(f).display(),
                script().display()
            ));
        }
    }
    None
}

/// Run the lab script with `args`, under `timeout`.
fn lab(args: &[&str], timeout: Duration) -> Result<Output, String> {
    let s = script();
    let s = s.to_string_lossy();
    let mut v = vec![s.as_ref()];
    v.extend_from_slice(args);
    let out = netns_harness::run(&v, timeout).map_err(|e| format!("lab.sh {args:?}: {e}"))?;
    if out.status.success() {
        Ok(out)
    } else {
        Err(format!(
            "lab.sh {args:?} failed ({}): {}",
            out.status,
            String::from_utf8_lossy(&out.stderr)
        ))
    }
}

/// A booted lab with one guest; `lab.sh down` on drop.
#[derive(Debug)]
pub struct Lab {
    variant: Variant,
    /// Exclusive lock on `suite.lock` in the state folder: one lab per
    /// machine (a second suite, say CI beside a developer's run, waits
    /// instead of tearing the first one's namespace down).
    _lock: std::fs::File,
}

/// Take the machine-wide lab lock, waiting up to `timeout`.
/// Whether this process has a lab up (from [`Lab::up`] to its drop).
static LAB_UP: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);

/// Whether `lab.sh up` is running for this process: a `down` meanwhile
/// would race it (the guest's qemu can start after `down` looked for its
/// pid file, and outlive everything).
static STARTING: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);

/// Start, once per process, a thread that on SIGINT or SIGTERM takes the
/// lab down (`lab.sh down`: the guest's qemu, the capture, the namespace)
/// and exits with 128 + the signal's number, as a shell reports a process
/// the signal killed: an interrupted suite leaves no guest running. A
/// signal while this process has no lab up only exits (another process may
/// hold the lab by then).
fn teardown_on_signal() {
    use signal_hook::consts::{SIGINT, SIGTERM};
    static INSTALLED: std::sync::Once = std::sync::Once::new();
    INSTALLED.call_once(|| {
        let Ok(mut signals) = signal_hook::iterator::Signals::new([SIGINT, SIGTERM]) else {
            eprintln!("lab: no signal handler: an interrupted run leaves the lab up (lab.sh down)");
            return;
        };
        let spawned = std::thread::Builder::new()
            .name("lab-teardown".into())
            .spawn(move || {
                if let Some(sig) = signals.forever().next() {
                    // A lab coming up finishes first (`lab.sh up` is
                    // bounded by 180 s), so that `down` finds its guest.
                    let deadline = std::time::Instant::now() + Duration::from_secs(180);
                    while STARTING.load(std::sync::atomic::Ordering::SeqCst)
                        && std::time::Instant::now() < deadline
                    {
                        std::thread::sleep(Duration::from_millis(100));
                    }
                    if LAB_UP.load(std::sync::atomic::Ordering::SeqCst)
                        && std::env::var_os("IWARP_LAB_KEEP").is_none()
                    {
                        let _ = lab(&["down"], Duration::from_secs(30));
                        eprintln!("lab: signal {sig}: lab taken down");
                    }
                    std::process::exit(128 + sig);
                }
            });
        if spawned.is_err() {
            eprintln!("lab: no signal thread: an interrupted run leaves the lab up (lab.sh down)");
        }
    });
}

fn lock(timeout: Duration) -> Result<std::fs::File, String> {
    let dir = state_dir();
    std::fs::create_dir_all(&dir).map_err(|e| format!("{}: {e}", dir.display()))?;
    let path = dir.join("suite.lock");
    let f = std::fs::OpenOptions::new()
        .create(true)
        .truncate(false)
        .write(true)
        .open(&path)
        .map_err(|e| format!("{}: {e}", path.display()))?;
    let deadline = std::time::Instant::now() + timeout;
    loop {
        match f.try_lock() {
            Ok(()) => return Ok(f),
            Err(std::fs::TryLockError::WouldBlock) => {}
            Err(std::fs::TryLockError::Error(e)) => return Err(format!("{}: {e}", path.display())),
        }
        if std::time::Instant::now() >= deadline {
            return Err(format!(
                "another lab held {} for {timeout:?}",
                path.display()
            ));
        }
        std::thread::sleep(Duration::from_millis(500));
    }
}

impl Lab {
    /// Boot guest A with siw build `variant`, running `cmd` (for example a
    /// server under `lab-serve`) once siw0 is up, and attach our veth.
    pub fn up(variant: Variant, cmd: &str) -> Result<Lab, String> {
        let mut args = vec!["up", "-n", "1", "--siw", variant.name()];
        if !cmd.is_empty() {
            args.extend_from_slice(&["--cmd", cmd]);
        }
        let lab_handle = Lab {
            variant,
            _lock: lock(Duration::from_secs(1200))?,
        };
        teardown_on_signal();
        LAB_UP.store(true, std::sync::atomic::Ordering::SeqCst);
        STARTING.store(true, std::sync::atomic::Ordering::SeqCst);
        let started = lab(&args, Duration::from_secs(180));
        STARTING.store(false, std::sync::atomic::Ordering::SeqCst);
        started?;
        lab(&["attach-veth", VETH], Duration::from_secs(30))?;
        // Our stack builds every frame and checks every checksum: keep the
        // kernel side of the veth from handing us unfinished checksums or
        // aggregated segments.
        let peer = format!("{VETH}-br");
        for dev in [VETH, peer.as_str()] {
            let _ = netns_harness::run(
                &[
                    "ip", "netns", "exec", NETNS, "ethtool", "-K", dev, "tx", "off", "rx", "off",
                    "tso", "off", "gso", "off", "gro", "off",
                ],
                Duration::from_secs(10),
            );
        }
        Ok(lab_handle)
    }

    /// The siw build running in the guest.
    pub fn variant(&self) -> Variant {
        self.variant
    }

    /// Run a shell command in guest A; its exit status and output.
    pub fn exec(&self, cmd: &str, timeout: Duration) -> Result<Output, String> {
        let s = script();
        let s = s.to_string_lossy();
        netns_harness::run(&[s.as_ref(), "exec", "A", cmd], timeout)
            .map_err(|e| format!("lab.sh exec {cmd:?}: {e}"))
    }

    /// Wait until a socket in the guest listens on `port` (asked with
    /// netstat in the guest, never by connecting: siw can lose a listener
    /// to a connect-and-close, lab README finding 3).
    pub fn wait_listening(&self, port: u16, timeout: Duration) -> Result<(), String> {
        let deadline = std::time::Instant::now() + timeout;
        let cmd = format!("netstat -tln | grep -q ':{port} '");
        loop {
            if let Ok(o) = self.exec(&cmd, Duration::from_secs(20)) {
                if o.status.success() {
                    return Ok(());
                }
            }
            if std::time::Instant::now() >= deadline {
                return Err(format!(
                    "nothing listens on guest port {port} after {timeout:?}"
                ));
            }
            std::thread::sleep(Duration::from_millis(300));
        }
    }

    /// Guest A's serial console so far (the output of the `up` command and
    /// the kernel's log, siw's messages included).
    pub fn console(&self) -> String {
        last_console()
    }

    /// Start a capture on guest A's bridge port into `results/NAME.pcap`.
    pub fn capture_start(&self, name: &str) -> Result<PathBuf, String> {
        lab(&["capture", "start", name], Duration::from_secs(30))?;
        Ok(state_dir().join("results").join(format!("{name}.pcap")))
    }

    /// Stop the capture.
    pub fn capture_stop(&self) -> Result<(), String> {
        lab(&["capture", "stop"], Duration::from_secs(30)).map(|_| ())
    }

    /// Our stack on the lab link: AF_XDP on the veth inside the lab's
    /// namespace, address [`HOST`].
    pub fn context(&self) -> Result<Context, iwarp::Error> {
        let mut o = XdpOptions::new(VETH, HOST, 24);
        o.host.netns = Some(PathBuf::from(format!("/var/run/netns/{NETNS}")));
        o.host.polling = Polling::Adaptive;
        Context::af_xdp(&o)
    }
}

impl Drop for Lab {
    fn drop(&mut self) {
        // Teardown is best effort: `down` only kills the lab's own pids
        // and deletes its namespace. IWARP_LAB_KEEP leaves the lab up for
        // inspection (a debugging aid; `lab.sh down` then cleans up).
        if std::env::var_os("IWARP_LAB_KEEP").is_none() {
            let _ = lab(&["down"], Duration::from_secs(60));
        }
        LAB_UP.store(false, std::sync::atomic::Ordering::SeqCst);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_wedged_lab_nic_is_told_from_other_console_lines() {
        // Seen in a failed run (siw crc+p2p, 1 MiB iwtest, loaded host).
        let wedged = "[   53.148428] virtio_net virtio0 eth0: NETDEV WATCHDOG: CPU: 0: \
                      transmit queue 0 timed out 42860 ms\n";
        assert!(guest_nic_wedged(wedged));
        // The management link (eth1) is not the lab link.
        assert!(!guest_nic_wedged(
            "virtio_net virtio1 eth1: NETDEV WATCHDOG: CPU: 0: transmit queue 0 timed out 5000 ms"
        ));
        assert!(guest_nic_wedged(
            "NETDEV WATCHDOG: eth0 (virtio_net): transmit queue 0 timed out"
        ));
        assert!(!guest_nic_wedged(
            "[    3.1] siw: device registered\n[    9.9] eth0: link up"
        ));
    }
}
