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
}
