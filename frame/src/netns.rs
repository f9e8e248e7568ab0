//! Opening a device inside another network namespace.

use std::os::fd::AsFd;
use std::path::Path;

use rustix::thread::{move_into_link_name_space, LinkNameSpaceType};

/// Run `f` on a new thread that has entered the network namespace at
/// `path` (e.g. `/var/run/netns/NAME`) and return its result. Sockets, BPF
/// links, DPDK ports and interface lookups made by `f` belong to that
/// namespace; the objects keep working from any thread afterwards. A panic
/// in `f` is re-raised. Entering the namespace (`setns(2)`, CAP_SYS_ADMIN)
/// fails with its `io::Error`; `f` does not run then.
pub fn in_netns<T, F>(path: &Path, f: F) -> std::io::Result<T>
where
    F: FnOnce() -> T + Send,
    T: Send,
{
    let file = std::fs::File::open(path)?;
    std::thread::scope(|s| {
        let h = s.spawn(|| {
            // Only this thread's network namespace changes, and the thread
            // ends when `f` returns, so no other code runs in it by surprise.
            move_into_link_name_space(file.as_fd(), Some(LinkNameSpaceType::Network))?;
            Ok(f())
        });
        match h.join() {
            Ok(r) => r,
            Err(panic) => std::panic::resume_unwind(panic),
        }
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_missing_namespace_is_an_error_and_f_does_not_run() {
        let ran = std::sync::atomic::AtomicBool::new(false);
        let r = in_netns(Path::new("/var/run/netns/no-such-namespace-here"), || {
            ran.store(true, std::sync::atomic::Ordering::Relaxed)
        });
        assert_eq!(
            r.err().map(|e| e.kind()),
            Some(std::io::ErrorKind::NotFound)
        );
        assert!(!ran.load(std::sync::atomic::Ordering::Relaxed));
    }

    #[test]
    fn the_own_namespace_runs_f_and_returns_its_value() {
        // Entering the namespace one is in already needs CAP_SYS_ADMIN.
        match in_netns(Path::new("/proc/self/ns/net"), || 7) {
            Ok(v) => assert_eq!(v, 7),
            Err(e) => assert_eq!(e.kind(), std::io::ErrorKind::PermissionDenied),
        }
    }
}
