//! Leave nothing behind: the namespaces and veths this process created are
//! removed on SIGINT and SIGTERM too, and those of runs that died (SIGKILL,
//! a crash, a power cut) can be swept.
//!
//! Every [`Netns`](crate::Netns) and [`VethPair`](crate::VethPair) enters a
//! registry of this process when created and leaves it when dropped.
//! [`install_signal_cleanup`] starts one thread that waits for SIGINT or
//! SIGTERM, removes what the registry holds and exits 130 or 143 (128 plus
//! the signal's number, as a shell reports a process the signal killed).
//! Call it first thing in `main`, before any thread enters a namespace: the
//! `ip` commands it runs must start in the root namespace. The first
//! [`Netns::new`](crate::Netns::new) or [`VethPair::new`](crate::VethPair::new)
//! of a prefix in a process installs it too and sweeps what dead runs of
//! that prefix left, so test binaries, which have no `main` of their own,
//! leave nothing behind on SIGINT or SIGTERM either.
//!
//! Names carry the creating process's id (`<prefix><pid in 5 base-36 digits>-<n>`,
//! see [`Netns::new`](crate::Netns::new)), so [`sweep_stale`] can tell a
//! dead run's leftovers from a running one's without any file on disk.

use std::sync::{Mutex, MutexGuard, OnceLock};
use std::time::Duration;

use crate::{list_netns, run, run_ok, Error, IP_TIMEOUT};

/// The longest prefix the tools accept: with a one-character role (`a`,
/// `b`, `v`) it is the five characters [`Netns::new`](crate::Netns::new)
/// keeps.
pub const MAX_PREFIX: usize = 4;

/// How long each removal may take when a signal came: the user is waiting.
const SIGNAL_TIMEOUT: Duration = Duration::from_secs(5);

#[derive(Debug, Clone, PartialEq, Eq)]
enum Entry {
    Netns(String),
    /// Both ends' names; deleting either deletes the pair.
    Veth([String; 2]),
}

static REGISTRY: Mutex<Vec<Entry>> = Mutex::new(Vec::new());

fn registry() -> MutexGuard<'static, Vec<Entry>> {
    // A thread that panicked while holding it left a valid Vec.
    REGISTRY.lock().unwrap_or_else(|e| e.into_inner())
}

/// Create a namespace with `create` while holding the registry, and record
/// it if that succeeded: a signal arriving meanwhile waits, so nothing is
/// created that the cleanup does not see.
pub(crate) fn create_netns<T>(
    name: &str,
    create: impl FnOnce() -> Result<T, Error>,
) -> Result<T, Error> {
    let mut reg = registry();
    let r = create();
    if r.is_ok() {
        reg.push(Entry::Netns(name.to_owned()));
    }
    r
}

/// As [`create_netns`], for a veth pair.
pub(crate) fn create_veth<T>(
    names: &[String; 2],
    create: impl FnOnce() -> Result<T, Error>,
) -> Result<T, Error> {
    let mut reg = registry();
    let r = create();
    if r.is_ok() {
        reg.push(Entry::Veth(names.clone()));
    }
    r
}

/// Forget a namespace once it has been deleted.
pub(crate) fn forget_netns(name: &str) {
    registry().retain(|e| !matches!(e, Entry::Netns(n) if n == name));
}

/// Forget a veth pair once it has been deleted.
pub(crate) fn forget_veth(names: &[String; 2]) {
    registry().retain(|e| !matches!(e, Entry::Veth(n) if n == names));
}

/// The names of what this process created and has not removed yet.
pub fn registered() -> Vec<String> {
    registry()
        .iter()
        .map(|e| match e {
            Entry::Netns(n) => n.clone(),
            Entry::Veth([a, _]) => a.clone(),
        })
        .collect()
}

/// Remove everything in the registry now (veths first, then namespaces)
/// and return what was removed. The registry stays locked until the process
/// exits, so that nothing new is created after.
fn remove_registered(timeout: Duration) -> Vec<String> {
    let mut reg = registry();
    let mut removed = Vec::new();
    // Veths still in the root namespace; an end moved into one of ours goes
    // with that namespace.
    for e in reg.iter() {
        if let Entry::Veth(names) = e {
            for n in names {
                let ok = run(&["ip", "link", "delete", "dev", n], timeout)
                    .is_ok_and(|o| o.status.success());
                if ok {
                    removed.push(format!("veth {n}"));
                    break;
                }
            }
        }
    }
    for e in reg.iter() {
        if let Entry::Netns(n) = e {
            let ok = run(&["ip", "netns", "delete", n], timeout).is_ok_and(|o| o.status.success());
            if ok {
                removed.push(format!("namespace {n}"));
            }
        }
    }
    reg.clear();
    // Keep the lock: the caller exits, and a thread about to create
    // something waits for that.
    std::mem::forget(reg);
    removed
}

/// Start, once per process, a thread that on SIGINT or SIGTERM removes the
/// namespaces and veths this process created (those still registered),
/// says so on stderr as `<tool>: <signal>: removed …` and exits with
/// 128 + the signal number (130, 143). Later calls do nothing.
///
/// Call it before any thread enters a namespace (the removal runs `ip` from
/// that thread, which must be in the root namespace).
pub fn install_signal_cleanup(tool: &str) -> std::io::Result<()> {
    use signal_hook::consts::{SIGINT, SIGTERM};
    static INSTALLED: OnceLock<()> = OnceLock::new();
    if INSTALLED.get().is_some() {
        return Ok(());
    }
    let mut signals = signal_hook::iterator::Signals::new([SIGINT, SIGTERM])?;
    let tool = tool.to_owned();
    std::thread::Builder::new()
        .name("netns-cleanup".into())
        .spawn(move || {
            if let Some(sig) = signals.forever().next() {
                let name = if sig == SIGINT { "SIGINT" } else { "SIGTERM" };
                let removed = remove_registered(SIGNAL_TIMEOUT);
                // Straight to stderr, not `eprintln!`: a test harness
                // captures that in threads its tests spawn, and drops it
                // on exit.
                use std::io::Write as _;
                let _ = if removed.is_empty() {
                    writeln!(std::io::stderr(), "{tool}: {name}")
                } else {
                    writeln!(
                        std::io::stderr(),
                        "{tool}: {name}: removed {}",
                        removed.join(", ")
                    )
                };
                std::process::exit(128 + sig);
            }
        })?;
    let _ = INSTALLED.set(());
    Ok(())
}

/// Before the first namespace or veth of `prefix` in this process: sweep
/// what dead runs of the same prefix left ([`sweep_stale`]: a test binary
/// or tool killed with SIGKILL, or whose parent was killed under it), and
/// install the SIGINT/SIGTERM cleanup ([`install_signal_cleanup`], named
/// after this executable), so that a test binary cleans up on signals as
/// the tools do. Once per prefix per process; failures are left to the
/// creation that follows, which reports its own.
pub(crate) fn prepare(prefix: &str) {
    static SEEN: Mutex<Vec<String>> = Mutex::new(Vec::new());
    // As the names carry it (`unique_base`: five letters and digits).
    let prefix: String = prefix
        .chars()
        .filter(|c| c.is_ascii_alphanumeric())
        .take(5)
        .collect();
    let prefix = prefix.as_str();
    {
        let mut seen = SEEN.lock().unwrap_or_else(|e| e.into_inner());
        if seen.iter().any(|p| p == prefix) {
            return;
        }
        seen.push(prefix.to_owned());
    }
    let exe = std::env::current_exe().ok();
    let tool = exe
        .as_deref()
        .and_then(|p| p.file_stem())
        .and_then(|s| s.to_str())
        .unwrap_or("netns");
    let _ = install_signal_cleanup(tool);
    let _ = sweep_stale(prefix);
}

/// Whether `prefix` is one the tools accept for `--netns-prefix`: 1 to
/// [`MAX_PREFIX`] lower-case ASCII letters and digits. Returns it, or why
/// not.
pub fn check_prefix(prefix: &str) -> Result<String, String> {
    if prefix.is_empty() || prefix.len() > MAX_PREFIX {
        return Err(format!(
            "a namespace prefix is 1 to {MAX_PREFIX} characters (interface names are at most 15: \
             prefix, role, process id, counter), not {}",
            prefix.len()
        ));
    }
    if let Some(c) = prefix
        .chars()
        .find(|c| !(c.is_ascii_lowercase() || c.is_ascii_digit()))
    {
        return Err(format!(
            "a namespace prefix is lower-case letters and digits only, not {c:?}"
        ));
    }
    Ok(prefix.to_owned())
}

/// The creator of `name` if it looks like one of ours under `prefix`:
/// `<prefix>[role]<pid: 5 base-36 digits>-<counter>[a|b]` with a role of at
/// most one character. The pid's fixed width makes the reading unique
/// whatever the role. `None` when it is not ours.
pub fn creator_pid(name: &str, prefix: &str) -> Option<u32> {
    let rest = name.strip_prefix(prefix)?;
    let (head, tail) = rest.split_once('-')?;
    let base36 = |s: &str| {
        !s.is_empty()
            && s.bytes()
                .all(|b| b.is_ascii_digit() || b.is_ascii_lowercase())
    };
    let digits = crate::PID_DIGITS;
    if !(digits..=digits + 1).contains(&head.len()) || !base36(head) || !base36(tail) {
        return None;
    }
    let pid = head.get(head.len() - digits..)?;
    u32::from_str_radix(pid, 36).ok()
}

fn alive(pid: u32) -> bool {
    std::path::Path::new(&format!("/proc/{pid}")).exists()
}

/// Whether `name` is ours under `prefix` and the process that created it
/// is gone.
pub fn is_stale(name: &str, prefix: &str) -> bool {
    creator_pid(name, prefix).is_some_and(|p| !alive(p))
}

/// The interfaces of the current namespace, by name (without `@peer`).
pub fn list_links() -> Result<Vec<String>, Error> {
    let out = run_ok(&["ip", "-o", "link", "show"], IP_TIMEOUT)?;
    Ok(String::from_utf8_lossy(&out.stdout)
        .lines()
        .filter_map(|l| l.split_whitespace().nth(1))
        .map(|n| {
            let n = n.trim_end_matches(':');
            n.split('@').next().unwrap_or(n).to_owned()
        })
        .collect())
}

/// Namespaces and root-namespace interfaces whose names start with
/// `prefix` (a test's check that nothing is left).
pub fn with_prefix(prefix: &str) -> Result<Vec<String>, Error> {
    let mut v: Vec<String> = list_netns()?
        .into_iter()
        .filter(|n| n.starts_with(prefix))
        .collect();
    v.extend(list_links()?.into_iter().filter(|n| n.starts_with(prefix)));
    Ok(v)
}

/// Remove the namespaces and root-namespace veths whose names start with
/// `prefix` and whose creating process is dead ([`is_stale`]); those of
/// running processes are left alone. Returns what was removed, as
/// `namespace NAME` / `veth NAME`.
pub fn sweep_stale(prefix: &str) -> Result<Vec<String>, Error> {
    let mut removed = Vec::new();
    for ns in list_netns()? {
        if is_stale(&ns, prefix) {
            run_ok(&["ip", "netns", "delete", &ns], IP_TIMEOUT)?;
            removed.push(format!("namespace {ns}"));
        }
    }
    // After the namespaces: a pair with an end in one of them is gone now.
    for link in list_links()? {
        if is_stale(&link, prefix) {
            let out = run(&["ip", "link", "delete", "dev", &link], IP_TIMEOUT)?;
            // Its peer, swept a moment ago, took it along: not an error.
            if out.status.success() {
                removed.push(format!("veth {link}"));
            }
        }
    }
    Ok(removed)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn prefixes() {
        assert_eq!(check_prefix("ipf").as_deref(), Ok("ipf"));
        assert_eq!(check_prefix("z9").as_deref(), Ok("z9"));
        assert!(check_prefix("").is_err());
        assert!(check_prefix("abcde").unwrap_err().contains("1 to 4"));
        assert!(check_prefix("a-b").unwrap_err().contains("'-'"));
        assert!(check_prefix("AB").is_err());
    }

    #[test]
    fn creators_from_names() {
        // `ipf` + role `a` + pid 1234 (base 36 "000ya") + counter.
        assert_eq!(creator_pid("ipfa000ya-0", "ipf"), Some(1234));
        assert_eq!(creator_pid("ipfv000ya-1za", "ipf"), Some(1234));
        // No role: the same pid.
        assert_eq!(creator_pid("ipf000ya-0", "ipf"), Some(1234));
        // A role that reads as a digit does not change the pid (the
        // reading that once made "ipfaya-0" also pid 1234 or 13,870).
        assert_eq!(creator_pid("ipf1000ya-0", "ipf"), Some(1234));
        assert_eq!(creator_pid("ipfoo", "ipf"), None);
        assert_eq!(creator_pid("eth0", "ipf"), None);
        assert_eq!(creator_pid("ipfa-", "ipf"), None);
        assert_eq!(creator_pid("ipfaya-0", "ipf"), None, "too few digits");
        assert_eq!(creator_pid("ipfab000ya-0", "ipf"), None, "two roles");
        assert_eq!(creator_pid("ipfa000YA-0", "ipf"), None);
        assert_eq!(creator_pid("ipfa000ya-", "ipf"), None);
        // Our own names: this process is alive, so never stale.
        let (base, _) = crate::unique_base("tsta");
        assert_eq!(creator_pid(&base, "tst"), Some(std::process::id()));
        assert_eq!(creator_pid(&base, "tsta"), Some(std::process::id()));
        assert!(!is_stale(&base, "tst"));
        assert!(!is_stale(&format!("{base}a"), "tst"));
    }

    /// A namespace a dead process of the prefix left is gone once this
    /// process makes its first namespace of that prefix (root only).
    #[test]
    fn the_first_namespace_of_a_prefix_sweeps_what_dead_runs_left() {
        if crate::skip_test_without_root() {
            return;
        }
        let mut c = std::process::Command::new("true")
            .spawn()
            .expect("spawn true");
        let pid = c.id();
        c.wait().expect("wait");
        if alive(pid) {
            return; // reused already: nothing to show
        }
        let left = format!("tswp{}-0", crate::pid_digits(pid));
        run_ok(&["ip", "netns", "add", &left], IP_TIMEOUT).expect("ip netns add");
        let ns = crate::Netns::new("tswp").expect("a namespace");
        let now = list_netns().expect("ip netns list");
        let swept = !now.contains(&left);
        if !swept {
            let _ = run(&["ip", "netns", "delete", &left], IP_TIMEOUT);
        }
        assert!(swept, "{left} still there: {now:?}");
        assert!(now.iter().any(|n| n == ns.name()), "ours stays");
    }

    #[test]
    fn dead_creator_is_stale() {
        // A child that has exited and been reaped: its pid is dead (unless
        // reused within this test, which the assertion would then show).
        let mut c = std::process::Command::new("true")
            .spawn()
            .expect("spawn true");
        let pid = c.id();
        c.wait().expect("wait");
        let name = format!("tsta{}-0", crate::pid_digits(pid));
        if !alive(pid) {
            assert!(is_stale(&name, "tst"));
        }
        assert!(!is_stale("tstfoo", "tst"));
    }
}
