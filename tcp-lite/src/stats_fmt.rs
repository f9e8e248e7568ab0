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
            rwnd_limited_ns,
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
    use iwarp_net::fixtures::every_field_named;

    #[test]
    fn display_names_every_counter() {
        every_field_named(&Stats::default());
    }
}
