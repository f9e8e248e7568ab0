//! Human spelling of the AF_XDP counters: one `name value` line per counter,
//! the values aligned.

use core::fmt;

use crate::socket::Counters;
use crate::sys::XdpStatistics;

/// `name value` lines, the values in one column.
macro_rules! name_value_lines {
    ($f:expr, $s:expr, $($field:ident),+ $(,)?) => {{
        let w = [$(stringify!($field).len()),+].into_iter().max().unwrap_or(0);
        $( writeln!($f, "{:<w$} {}", stringify!($field), $s.$field)?; )+
        Ok(())
    }};
}

/// The socket's own counters, `name value` per line.
impl fmt::Display for Counters {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        name_value_lines!(
            f,
            self,
            rx_frames,
            rx_bad_descs,
            tx_frames,
            tx_completed,
            tx_full,
            tx_too_big,
            tx_kicks,
            tx_kick_again,
            tx_kick_errors,
            rx_wakeups,
            rx_multi_buffer,
            tx_built,
            tx_build_cancelled
        )
    }
}

/// The kernel's `XDP_STATISTICS`, `name value` per line.
impl fmt::Display for XdpStatistics {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        name_value_lines!(
            f,
            self,
            rx_dropped,
            rx_invalid_descs,
            tx_invalid_descs,
            rx_ring_full,
            rx_fill_ring_empty_descs,
            tx_ring_empty_descs
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use iwarp_net::fixtures::every_field_named;

    #[test]
    fn display_names_every_counter() {
        every_field_named(&Counters::default());
        every_field_named(&XdpStatistics::default());
    }
}
