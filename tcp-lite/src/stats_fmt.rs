//! Human spelling of the counters: one `name value` line per counter, the
//! values aligned (for `--stats` output and logs; Debug stays for tests).

use core::fmt;

use crate::tcp::Stats;

/// `name value` lines, the values in one column.
macro_rules! name_value_lines {
    ($f:expr, $s:expr, $($field:ident),+ $(,)?) => {{
        let w = [$(stringify!($field).len()),+].into_iter().max().unwrap_or(0);
        $( writeln!($f, "{:<w$} {}", stringify!($field), $s.$field)?; )+
        Ok(())
    }};
}

/// TCP counters, `name value` per line (the `_ns` ones in nanoseconds).
impl fmt::Display for Stats {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        name_value_lines!(
            f,
            self,
            rto_retransmits,
            rescue_retransmits,
            fast_retransmits,
            ooo_segments,
            ooo_dropped,
            challenge_acks,
            challenge_acks_suppressed,
            delivered,
            sack_skipped,
            spurious_rto_undone,
            no_timestamp_drops,
            persist_aborts,
            sack_recoveries,
            reasm_steps,
            rack_losses,
            lost_retransmits,
            tlp_probes,
            recovery_probes,
            dsacks_received,
            dsack_undos,
            cwnd_limited_ns,
            app_limited_ns,
            cwv_nvp_reductions,
            cwv_loss_reductions,
            rto_sacked_above,
            rto_hole_resent,
            rto_after_probe,
            rto_repeated
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every field the Debug spelling has is a line of the Display one,
    /// `name value`, the values aligned.
    fn every_field_named<T: fmt::Debug + fmt::Display>(v: &T) {
        let debug = format!("{v:?}");
        let shown = v.to_string();
        let names: Vec<&str> = debug
            .split(['{', ','])
            .filter_map(|p| p.split_once(':').map(|(n, _)| n.trim()))
            .collect();
        assert!(!names.is_empty(), "{debug}");
        for n in &names {
            assert!(
                shown
                    .lines()
                    .any(|l| l.split_whitespace().next() == Some(*n)),
                "{n} missing:\n{shown}"
            );
        }
        let col: Vec<usize> = shown
            .lines()
            .map(|l| l.rfind(' ').expect("name value") + 1)
            .collect();
        assert!(
            col.windows(2).all(|w| w[0] == w[1]),
            "not aligned:\n{shown}"
        );
    }

    #[test]
    fn display_names_every_counter() {
        every_field_named(&Stats::default());
    }
}
