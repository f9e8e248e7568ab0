//! `--netns-prefix` and `--cleanup`, shared by the tools that create
//! namespaces and veths (`iwarp-perf`, `tcp-vs-linux`, `xdp-floor`).
//!
//! [`NetnsArgs::start`], called first in `main`, installs the SIGINT/SIGTERM
//! cleanup of `netns_harness::guard` (what the run created is removed, exit
//! 130/143), records the prefix for [`prefix`], and runs `--cleanup`.

use std::sync::OnceLock;

/// The namespace options of a tool (flatten into its clap `Parser`).
#[derive(Debug, Clone, Default, clap::Args)]
pub struct NetnsArgs {
    /// Start the names of the namespaces and veths this run creates with
    /// PREFIX (1 to 4 of a-z, 0-9; then a role letter, the process id as
    /// 5 base-36 digits and a counter). Default: the tool's own.
    #[arg(long, value_name = "PREFIX", value_parser = netns_harness::guard::check_prefix)]
    pub netns_prefix: Option<String>,
    /// Remove the namespaces and veths that runs now dead left behind
    /// (names starting with the prefix, whose creating process is gone),
    /// print what went, and exit.
    #[arg(long)]
    pub cleanup: bool,
}

static PREFIX: OnceLock<String> = OnceLock::new();

/// The prefix of this run's namespace and veth names: `--netns-prefix`, or
/// the tool's default given to [`NetnsArgs::start`]; `default` where that
/// was not called.
pub fn prefix(default: &str) -> String {
    PREFIX.get().cloned().unwrap_or_else(|| default.to_owned())
}

impl NetnsArgs {
    /// The prefix of this run (`default` unless `--netns-prefix`).
    pub fn prefix_or<'a>(&'a self, default: &'a str) -> &'a str {
        self.netns_prefix.as_deref().unwrap_or(default)
    }

    /// Install the signal cleanup, record the prefix and remove what dead
    /// runs of the prefix left (stale names, [`netns_harness::guard::is_stale`]);
    /// with `--cleanup`, sweep and return the exit status (0: swept, 1: an `ip` command
    /// failed, 2: the cleanup handler could not be installed). `None`: go
    /// on with the run.
    pub fn start(&self, tool: &str, default: &str) -> Option<u8> {
        let prefix = self.prefix_or(default).to_owned();
        let _ = PREFIX.set(prefix.clone());
        if let Err(e) = netns_harness::guard::install_signal_cleanup(tool) {
            eprintln!("{tool}: cannot install the SIGINT/SIGTERM cleanup: {e}");
            return Some(2);
        }
        if !self.cleanup {
            // What runs of this prefix left when they could not clean up
            // (SIGKILL, an abort inside a C library) goes before this run
            // makes its own; a live run's names are never stale.
            if netns_harness::skip_reason().is_none() {
                if let Ok(removed) = netns_harness::guard::sweep_stale(&prefix) {
                    for r in removed {
                        eprintln!("{tool}: removed {r}, left by a run that could not clean up");
                    }
                }
            }
            return None;
        }
        if let Some(why) = netns_harness::skip_reason() {
            eprintln!("{tool}: --cleanup: {why}");
            return Some(2);
        }
        match netns_harness::guard::sweep_stale(&prefix) {
            Ok(removed) if removed.is_empty() => {
                println!("{tool}: nothing stale with prefix {prefix:?}");
                Some(0)
            }
            Ok(removed) => {
                for r in removed {
                    println!("{tool}: removed {r}");
                }
                Some(0)
            }
            Err(e) => {
                eprintln!("{tool}: --cleanup: {e}");
                Some(1)
            }
        }
    }
}

/// The command line holding only these options.
#[derive(Debug, clap::Parser)]
struct Only {
    #[command(flatten)]
    args: NetnsArgs,
}

/// `TOOL --cleanup [--netns-prefix P]` alone, for a tool whose own parser
/// requires more (`iwarp-perf TEST`): run it as [`NetnsArgs::start`] does
/// and return the exit status. `None` when the command line is anything
/// else (the tool's own parser then takes it, `--cleanup` included).
pub fn cleanup_only(tool: &str, default: &str) -> Option<u8> {
    let argv: Vec<std::ffi::OsString> = std::env::args_os().collect();
    if !argv.iter().any(|a| a == "--cleanup") {
        return None;
    }
    let only = <Only as clap::Parser>::try_parse_from(&argv).ok()?;
    only.args.start(tool, default)
}
