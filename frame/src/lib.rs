//! The frame-device interface: what a poll loop needs from a backend.
//!
//! A backend (AF_XDP in `iwarp-xdp`, DPDK in `iwarp-dpdk`, the in-memory
//! links in `iwarp-datapath`) implements [`FrameDevice`]; this crate is all
//! a backend depends on to plug into the poll loops, so backends and the
//! protocol stack build independently. The interface is batch-first:
//!
//! - **receive**: [`FrameDevice::rx_burst`] hands up to `max` frames to a
//!   sink as slices of the device's own buffers (UMEM chunks, mbufs); the
//!   buffers go back to the device once the sink returns, so the caller
//!   copies out only what it keeps.
//! - **transmit**: [`FrameDevice::tx`] queues a frame (copied into a device
//!   buffer), [`FrameDevice::tx_parts`] one given as consecutive parts
//!   (headers built on the stack's side, payload where it lies), copied in
//!   one pass; [`FrameDevice::flush`] publishes the batch with one kick.
//!
//! This crate holds no `unsafe`; lending device memory safely is each
//! backend's job.
#![forbid(unsafe_code)]
#![warn(missing_docs)]

/// A frame device (AF_XDP rings, DPDK, or an in-memory link), batch-first.
pub trait FrameDevice: Send {
    /// Hand up to `max` received frames to `sink`; returns how many.
    fn rx_burst(&mut self, max: usize, sink: &mut dyn FnMut(&[u8])) -> usize;
    /// Queue one frame for transmission (Ethernet header on, no FCS); false
    /// if the device is full or the frame too long (dropped, as a full NIC
    /// queue drops it; TCP retransmits).
    fn tx(&mut self, frame: &[u8]) -> bool;
    /// Queue one frame given as consecutive parts (for example Ethernet,
    /// IPv4 and TCP headers, then the payload from the TCP send buffer),
    /// copied straight into a device buffer. The default joins the parts
    /// first and calls [`tx`](Self::tx); backends with their own buffers
    /// copy each part in place and save that copy.
    fn tx_parts(&mut self, parts: &[&[u8]]) -> bool {
        match parts {
            [frame] => self.tx(frame),
            _ => self.tx(&parts.concat()),
        }
    }
    /// Publish the frames queued since the last flush, with one kick where
    /// the device needs one, and reclaim completed transmit buffers.
    fn flush(&mut self) {}
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The smallest device: a loopback that hands back what it sent.
    #[derive(Default)]
    struct Loopback {
        queued: Vec<Vec<u8>>,
        wire: Vec<Vec<u8>>,
    }

    impl FrameDevice for Loopback {
        fn rx_burst(&mut self, max: usize, sink: &mut dyn FnMut(&[u8])) -> usize {
            let n = self.wire.len().min(max);
            for f in self.wire.drain(..n) {
                sink(&f);
            }
            n
        }
        fn tx(&mut self, frame: &[u8]) -> bool {
            self.queued.push(frame.to_vec());
            true
        }
        fn flush(&mut self) {
            self.wire.append(&mut self.queued);
        }
    }

    #[test]
    fn frames_leave_on_flush_and_bursts_respect_max() {
        let mut d = Loopback::default();
        let dev: &mut dyn FrameDevice = &mut d;
        assert!(dev.tx(b"one") && dev.tx(b"two") && dev.tx(b"three"));
        assert_eq!(dev.rx_burst(8, &mut |_| panic!("nothing flushed yet")), 0);
        dev.flush();
        let mut got = Vec::new();
        assert_eq!(dev.rx_burst(2, &mut |f| got.push(f.to_vec())), 2);
        assert_eq!(dev.rx_burst(8, &mut |f| got.push(f.to_vec())), 1);
        assert_eq!(got, [&b"one"[..], b"two", b"three"]);
    }

    #[test]
    fn parts_are_one_frame_in_order() {
        let mut d = Loopback::default();
        assert!(d.tx_parts(&[b"head", b"", b"er", b"payload"]));
        assert!(d.tx_parts(&[b"whole"]));
        d.flush();
        let mut got = Vec::new();
        d.rx_burst(8, &mut |f| got.push(f.to_vec()));
        assert_eq!(got, [&b"headerpayload"[..], b"whole"]);
    }
}
