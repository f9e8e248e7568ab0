//! Human spelling of the counters: one `name value` line per counter, the
//! values aligned (for `--stats` output and logs; Debug stays for tests).

use core::fmt;

use crate::iface::IfaceStats;

/// `name value` lines, the values in one column.
macro_rules! name_value_lines {
    ($f:expr, $s:expr, $($field:ident),+ $(,)?) => {{
        let w = [$(stringify!($field).len()),+].into_iter().max().unwrap_or(0);
        $( writeln!($f, "{:<w$} {}", stringify!($field), $s.$field)?; )+
        Ok(())
    }};
}

/// Interface counters, `name value` per line.
impl fmt::Display for IfaceStats {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        name_value_lines!(
            f,
            self,
            rx_frames,
            rx_malformed,
            rx_not_for_us_mac,
            rx_not_for_us_ip,
            rx_fragments,
            rx_options,
            rx_other_protocol,
            rx_other_ethertype,
            rx_tcp,
            rx_sctp,
            rx_udp_bad_checksum,
            rx_bad_checksum,
            rx_partial_checksum,
            icmp_echo_replies,
            tx_frames,
            tx_queued,
            tx_dropped,
            tx_too_big,
            tx_fill_failed
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::fixtures::every_field_named;

    #[test]
    fn display_names_every_counter() {
        every_field_named(&IfaceStats::default());
    }
}
