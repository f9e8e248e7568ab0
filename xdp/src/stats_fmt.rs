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
        every_field_named(&Counters::default());
        every_field_named(&XdpStatistics::default());
    }
}
