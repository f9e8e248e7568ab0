//! Human spelling of the stack's counters: one `name value` line per
//! counter, the values aligned.

use core::fmt;

use crate::stack::StackStats;

/// `name value` lines, the values in one column.
macro_rules! name_value_lines {
    ($f:expr, $s:expr, $($field:ident),+ $(,)?) => {{
        let w = [$(stringify!($field).len()),+].into_iter().max().unwrap_or(0);
        $( writeln!($f, "{:<w$} {}", stringify!($field), $s.$field)?; )+
        Ok(())
    }};
}

/// The stack's own counters, `name value` per line; `tcp_closed` is a
/// `tcp::Stats` of its own (print it with its Display).
impl fmt::Display for StackStats {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        name_value_lines!(
            f,
            self,
            rx_no_socket,
            rx_backpressure_drops,
            tx_errors,
            listen_overflows
        )
    }
}

/// The SCTP engine's own counters, `name value` per line.
impl fmt::Display for crate::over_sctp::SctpHostStats {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        name_value_lines!(
            f,
            self,
            rx_packets,
            tx_packets,
            rx_dropped,
            udp_bad_checksum,
            rx_udp,
            tx_udp,
            ootb_replies,
            ootb_limited,
            arp_drops,
            closed_retransmits,
            closed_discarded
        )
    }
}

/// SCTP's counters: the connections and the queue pairs' out-of-order
/// hold, then the engine's and the live associations' counters (summed),
/// each under its heading, indented.
impl fmt::Display for crate::over_sctp::conn::SctpCounters {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        name_value_lines!(
            f,
            self,
            connections,
            qp_held_octets,
            qp_held_max,
            segments_by_reference,
            early_segments
        )?;
        writeln!(f, "engine:")?;
        for line in self.host.to_string().lines() {
            writeln!(f, "  {line}")?;
        }
        writeln!(f, "associations (live, summed):")?;
        for line in self.assoc.to_string().lines() {
            writeln!(f, "  {line}")?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn display_names_every_counter_but_the_nested_tcp() {
        let s = StackStats {
            rx_no_socket: 7,
            ..StackStats::default()
        };
        let shown = s.to_string();
        for n in [
            "rx_no_socket",
            "rx_backpressure_drops",
            "tx_errors",
            "listen_overflows",
        ] {
            assert!(shown.lines().any(|l| l.starts_with(n)), "{n}: {shown}");
        }
        assert_eq!(shown.lines().count(), 4, "{shown}");
        assert!(shown.contains("rx_no_socket          7\n"), "{shown}");
        // Debug's spelling of the struct's own fields is all here.
        let debug = format!("{s:?}");
        let own = debug.split("tcp_closed").next().unwrap_or("");
        for part in own.split(['{', ',']) {
            if let Some((n, _)) = part.split_once(':') {
                assert!(shown.contains(n.trim()), "{n} missing: {shown}");
            }
        }
    }

    #[test]
    fn sctp_counters_read_as_name_value_lines_under_headings() {
        let c = crate::over_sctp::conn::SctpCounters {
            connections: 3,
            host: crate::over_sctp::SctpHostStats {
                ootb_limited: 5,
                ..Default::default()
            },
            assoc: sctp_lite::assoc::Stats {
                retransmits: 9,
                ..Default::default()
            },
            ..Default::default()
        };
        let text = c.to_string();
        for want in [
            "connections",
            "ootb_limited",
            "engine:",
            "associations (live, summed):",
            "retransmits",
        ] {
            assert!(text.contains(want), "{want} missing in\n{text}");
        }
        assert!(!text.contains('{'), "Debug spelling in\n{text}");
        assert!(text.lines().any(|l| l.trim_start().starts_with("ootb_limited") && l.trim_end().ends_with(" 5")), "{text}");
    }
}
