//! The streaming deframer over arbitrary bytes cut at arbitrary points: never
//! panics, and the sink sees a well-formed call sequence.
#![no_main]
use iwarp_proto::mpa::{Deframer, UlpduSink};
use libfuzzer_sys::fuzz_target;

#[derive(Default)]
struct Check {
    open: bool,
    left: usize,
}

impl UlpduSink for Check {
    fn segment_begin(&mut self, ulpdu_len: u16, header: &[u8]) {
        assert!(!self.open);
        assert!(header.len() <= ulpdu_len as usize);
        self.open = true;
        self.left = ulpdu_len as usize - header.len();
    }
    fn segment_data(&mut self, data: &[u8]) {
        assert!(self.open && data.len() <= self.left);
        self.left -= data.len();
    }
    fn segment_end(&mut self) {
        assert!(self.open && self.left == 0);
        self.open = false;
    }
}

fuzz_target!(|data: &[u8]| {
    let Some((&flags, rest)) = data.split_first() else { return };
    let Some((&cut, rest)) = rest.split_first() else { return };
    let mut d = Deframer::new(flags & 1 != 0, flags & 2 != 0);
    let mut sink = Check::default();
    let step = usize::from(cut).max(1);
    for chunk in rest.chunks(step) {
        if d.feed(chunk, &mut sink).is_err() {
            break;
        }
    }
});
