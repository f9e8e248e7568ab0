//! A multi-queue frame link in memory: two ends, A and B, each with `n`
//! receive queues, each queue a [`FrameDevice`] of its own, as a
//! multi-queue veth, a NIC with RSS or memif with several queue pairs gives
//! one device per queue to one poll loop per core.
//!
//! A frame sent on any queue of one end is delivered to one queue of the
//! other, the one a steering function names for the frame (for RSS, that
//! is `iwarp_net::rss::Rss::queue_of_frame`; the link depends on no
//! protocol crate, so it takes any function). A frame the function does not
//! steer (`None`: ARP, anything RSS does not hash) goes to queue 0, where
//! RSS NICs put such frames by default, so that what works over this link
//! works over them. A frame steered to a queue that does not exist, or to a
//! full one, is dropped and its `tx` returns false, as a full NIC queue
//! drops it.
//!
//! Each queue is a bounded lock-free queue (`crossbeam_queue::ArrayQueue`)
//! with a doorbell, the synchronisation of `iwarp-datapath`'s `MemDevice`:
//! a device can sleep in [`FrameDevice::wait`] until a frame reaches its
//! queue, and a sender rings the doorbell of the queue it delivers to when
//! that queue's device sleeps. Every device is `Send`, so each can go to a
//! thread of its own; frames of one flow sent from one queue arrive in the
//! order sent.

use std::sync::Arc;
use std::time::Duration;

use crossbeam_queue::ArrayQueue;
use iwarp_frame::{Doorbell, FrameDevice, MemBell};

/// A steering function: the receive queue of a frame, `None` for queue 0.
type Steer = dyn Fn(&[u8]) -> Option<u16> + Send + Sync;

/// One end's receive queues, their doorbells, and the steering function
/// that picks among them.
struct End {
    rx: Vec<ArrayQueue<Vec<u8>>>,
    bells: Vec<Arc<MemBell>>,
    steer: Arc<Steer>,
}

impl std::fmt::Debug for End {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("End")
            .field("queues", &self.rx.len())
            .field(
                "queued",
                &self.rx.iter().map(ArrayQueue::len).collect::<Vec<_>>(),
            )
            .finish_non_exhaustive()
    }
}

impl End {
    fn new(queues: u16, depth: usize, steer: Arc<Steer>) -> End {
        End {
            rx: (0..queues).map(|_| ArrayQueue::new(depth)).collect(),
            bells: (0..queues).map(|_| Arc::new(MemBell::default())).collect(),
            steer,
        }
    }

    /// Deliver `frame` to the queue the steering names (queue 0 for
    /// `None`), waking that queue's device if it sleeps.
    fn deliver(&self, frame: Vec<u8>) -> bool {
        let q = usize::from((self.steer)(&frame).unwrap_or(0));
        let (Some(rx), Some(bell)) = (self.rx.get(q), self.bells.get(q)) else {
            return false;
        };
        if rx.push(frame).is_err() {
            return false;
        }
        bell.ring_if_sleeping();
        true
    }
}

/// The two ends of a multi-queue link: `a[i]` and `b[i]` are queue `i` of
/// end A and end B.
#[derive(Debug)]
pub struct MultiQueuePair {
    /// End A's queues, in queue order.
    pub a: Vec<QueueDevice>,
    /// End B's queues, in queue order.
    pub b: Vec<QueueDevice>,
}

impl MultiQueuePair {
    /// A link with `queues` queues at each end (at least 1), each holding
    /// up to `depth` frames (at least 1), where `steer` picks the receive
    /// queue of every frame, both ways (both ends steer alike, as two
    /// contexts configured with the same RSS key and table do).
    pub fn new(
        queues: u16,
        depth: usize,
        steer: impl Fn(&[u8]) -> Option<u16> + Send + Sync + 'static,
    ) -> MultiQueuePair {
        let steer: Arc<Steer> = Arc::new(steer);
        MultiQueuePair::build(queues, depth, steer.clone(), steer)
    }

    /// As [`new`](Self::new), with a steering function per receiving end:
    /// `into_a` for frames B sends to A, `into_b` for frames A sends to B.
    pub fn with_steering(
        queues: u16,
        depth: usize,
        into_a: impl Fn(&[u8]) -> Option<u16> + Send + Sync + 'static,
        into_b: impl Fn(&[u8]) -> Option<u16> + Send + Sync + 'static,
    ) -> MultiQueuePair {
        MultiQueuePair::build(queues, depth, Arc::new(into_a), Arc::new(into_b))
    }

    fn build(queues: u16, depth: usize, into_a: Arc<Steer>, into_b: Arc<Steer>) -> MultiQueuePair {
        let queues = queues.max(1);
        let depth = depth.max(1);
        let end_a = Arc::new(End::new(queues, depth, into_a));
        let end_b = Arc::new(End::new(queues, depth, into_b));
        let devices = |own: &Arc<End>, peer: &Arc<End>| {
            (0..queues)
                .map(|queue| QueueDevice {
                    queue,
                    own: own.clone(),
                    peer: peer.clone(),
                })
                .collect()
        };
        MultiQueuePair {
            a: devices(&end_a, &end_b),
            b: devices(&end_b, &end_a),
        }
    }
}

/// One queue of one end of a [`MultiQueuePair`]: it receives the frames
/// steered to its queue and sends to the other end (any queue of it, as
/// the steering says).
#[derive(Debug)]
pub struct QueueDevice {
    queue: u16,
    own: Arc<End>,
    peer: Arc<End>,
}

impl QueueDevice {
    /// This device's queue number.
    pub fn queue(&self) -> u16 {
        self.queue
    }

    /// The number of queues at each end.
    pub fn queues(&self) -> u16 {
        // At most u16::MAX queues were made.
        self.own.rx.len() as u16
    }

    /// Frames waiting in this device's receive queue.
    pub fn pending(&self) -> usize {
        self.rx().len()
    }

    fn rx(&self) -> &ArrayQueue<Vec<u8>> {
        &self.own.rx[usize::from(self.queue)]
    }

    fn bell(&self) -> &Arc<MemBell> {
        &self.own.bells[usize::from(self.queue)]
    }
}

impl FrameDevice for QueueDevice {
    fn rx_burst(&mut self, max: usize, sink: &mut dyn FnMut(&[u8])) -> usize {
        let mut n = 0;
        while n < max {
            match self.rx().pop() {
                Some(f) => {
                    sink(&f);
                    n += 1;
                }
                None => break,
            }
        }
        n
    }

    /// Delivers to the other end's queue that the steering names; false
    /// (the frame dropped) when that queue is full or does not exist.
    fn tx(&mut self, frame: &[u8]) -> bool {
        self.peer.deliver(frame.to_vec())
    }

    fn doorbell(&self) -> Option<Arc<dyn Doorbell>> {
        Some(self.bell().clone())
    }

    fn wait(&mut self, timeout: Duration) {
        let rx = self.rx();
        self.bell().wait(timeout, || !rx.is_empty());
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)] // a failed unwrap is a failed test
mod tests {
    use super::*;
    use iwarp_net::rss::{ActiveOpen, Rss};
    use iwarp_net::wire::{IpProtocol, Ipv4Address};
    use std::collections::BTreeMap;
    use std::sync::atomic::{AtomicBool, Ordering};
    use std::time::Instant;

    const A_IP: [u8; 4] = [10, 9, 0, 1];
    const B_IP: [u8; 4] = [10, 9, 0, 2];

    /// An Ethernet/IPv4 frame of `proto` from `src:sport` to `dst:dport`
    /// whose payload after the ports is `seq` (checksums left zero: the
    /// link and RSS read neither).
    fn frame(src: [u8; 4], dst: [u8; 4], proto: u8, sport: u16, dport: u16, seq: u32) -> Vec<u8> {
        let mut f = vec![0x02, 0, 0, 0, 0, 0x02, 0x02, 0, 0, 0, 0, 0x01, 0x08, 0x00];
        f.extend_from_slice(&[0x45, 0, 0, 28, 0, 0, 0x40, 0, 64, proto, 0, 0]);
        f.extend_from_slice(&src);
        f.extend_from_slice(&dst);
        f.extend_from_slice(&sport.to_be_bytes());
        f.extend_from_slice(&dport.to_be_bytes());
        f.extend_from_slice(&seq.to_be_bytes());
        f
    }

    /// (source port, destination port, sequence) of a [`frame`].
    fn parts(f: &[u8]) -> (u16, u16, u32) {
        let u16_at = |i: usize| u16::from_be_bytes([f[i], f[i + 1]]);
        (
            u16_at(34),
            u16_at(36),
            u32::from_be_bytes([f[38], f[39], f[40], f[41]]),
        )
    }

    /// The same flow answered: addresses and ports swapped.
    fn reversed(f: &[u8]) -> Vec<u8> {
        let (sport, dport, seq) = parts(f);
        let (src, dst) = (f[26..30].try_into().unwrap(), f[30..34].try_into().unwrap());
        frame(dst, src, f[23], dport, sport, seq)
    }

    fn drain(dev: &mut QueueDevice) -> Vec<Vec<u8>> {
        let mut got = Vec::new();
        while dev.rx_burst(7, &mut |f| got.push(f.to_vec())) > 0 {}
        got
    }

    const ARP: [u8; 42] = [
        0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x02, 0, 0, 0, 0, 0x01, 0x08, 0x06, 0x00, 0x01, 0x08,
        0x00, 6, 4, 0x00, 0x01, 0x02, 0, 0, 0, 0, 0x01, 10, 9, 0, 1, 0, 0, 0, 0, 0, 0, 10, 9, 0, 2,
    ];

    #[test]
    fn flows_spread_over_the_queues_the_steering_names() {
        let rss = Rss::microsoft(4).unwrap();
        let steer = rss.clone();
        let mut link = MultiQueuePair::new(4, 1024, move |f: &[u8]| steer.queue_of_frame(f));
        assert_eq!((link.a.len(), link.b.len()), (4, 4));
        assert_eq!((link.b[3].queue(), link.b[3].queues()), (3, 4));
        // 200 TCP, UDP and SCTP flows, all sent from A's queue 0.
        let mut sent = Vec::new();
        for i in 0..200u16 {
            let proto = [6, 17, 132][usize::from(i % 3)];
            let f = frame(A_IP, B_IP, proto, 40000 + i, 4791, u32::from(i));
            assert!(link.a[0].tx(&f));
            sent.push(f);
        }
        assert!(link.a[0].tx(&ARP));
        let mut per_queue = [0usize; 4];
        let mut arrived = Vec::new();
        let mut arps = 0;
        for (q, dev) in link.b.iter_mut().enumerate() {
            for f in drain(dev) {
                if f[..] == ARP[..] {
                    assert_eq!(q, 0, "an unsteered frame goes to queue 0");
                    arps += 1;
                    continue;
                }
                assert_eq!(rss.queue_of_frame(&f), Some(q as u16));
                per_queue[q] += 1;
                arrived.push(f);
            }
        }
        assert_eq!(arps, 1);
        assert!(per_queue.iter().all(|&n| n >= 20), "{per_queue:?}");
        // What arrived is what was sent, and nothing came back to A.
        arrived.sort();
        sent.sort();
        assert_eq!(arrived, sent);
        assert!(link.a.iter().all(|d| d.pending() == 0));
    }

    #[test]
    fn both_directions_of_a_flow_meet_the_same_queue_with_the_symmetric_key() {
        let same_queue = |rss: Rss| {
            let steer = rss.clone();
            let mut link = MultiQueuePair::new(8, 64, move |f: &[u8]| steer.queue_of_frame(f));
            let mut same = 0;
            for i in 0..64u16 {
                let f = frame(A_IP, B_IP, 6, 50000 + 7 * i, 4791 + i, 1);
                assert!(link.a[usize::from(i % 8)].tx(&f));
                let at_b = (0..8).find(|&q| link.b[q].pending() == 1).unwrap();
                let got = drain(&mut link.b[at_b]).pop().unwrap();
                // B answers from the queue it received on.
                assert!(link.b[at_b].tx(&reversed(&got)));
                let at_a = (0..8).find(|&q| link.a[q].pending() == 1).unwrap();
                assert_eq!(
                    parts(&drain(&mut link.a[at_a])[0]),
                    (4791 + i, 50000 + 7 * i, 1)
                );
                if at_a == at_b {
                    same += 1;
                }
            }
            same
        };
        assert_eq!(same_queue(Rss::symmetric(8).unwrap()), 64);
        // The Microsoft key gives no such guarantee: most flows split.
        assert!(same_queue(Rss::microsoft(8).unwrap()) < 32);
    }

    #[test]
    fn order_within_a_flow_is_kept() {
        let steer = Rss::symmetric(4).unwrap();
        let mut link = MultiQueuePair::new(4, 4096, move |f: &[u8]| steer.queue_of_frame(f));
        // Six flows interleaved, sent from two queues of A.
        for seq in 0..300u32 {
            for flow in 0..6u16 {
                let f = frame(A_IP, B_IP, 132, 6000 + flow, 5000, seq);
                assert!(link.a[usize::from(flow % 2)].tx(&f));
            }
        }
        let mut next: BTreeMap<u16, u32> = BTreeMap::new();
        let mut queue_of: BTreeMap<u16, usize> = BTreeMap::new();
        for (q, dev) in link.b.iter_mut().enumerate() {
            for f in drain(dev) {
                let (sport, _, seq) = parts(&f);
                assert_eq!(
                    *queue_of.entry(sport).or_insert(q),
                    q,
                    "one flow, one queue"
                );
                let want = next.entry(sport).or_insert(0);
                assert_eq!(seq, *want, "flow {sport} in order");
                *want += 1;
            }
        }
        assert_eq!(next.len(), 6);
        assert!(next.values().all(|&n| n == 300));
    }

    #[test]
    fn unknown_queue_or_full_queue_drops() {
        let mut link = MultiQueuePair::new(2, 2, |f: &[u8]| f.first().map(|&q| u16::from(q)));
        assert!(link.a[0].tx(&[1]));
        assert!(link.a[1].tx(&[1, 2]));
        assert!(!link.a[0].tx(&[1, 3]), "queue 1 holds 2 frames");
        assert!(!link.a[0].tx(&[2]), "no queue 2");
        assert!(link.a[0].tx(&[]), "unsteered: queue 0");
        assert_eq!(drain(&mut link.b[1]), [vec![1], vec![1, 2]]);
        assert_eq!(drain(&mut link.b[0]), [Vec::<u8>::new()]);
        // Zero queues and depth count as one.
        let mut one = MultiQueuePair::new(0, 0, |_: &[u8]| None);
        assert_eq!((one.a.len(), one.b[0].queues()), (1, 1));
        assert!(one.b[0].tx(b"x"));
        assert!(!one.b[0].tx(b"y"));
        assert_eq!(drain(&mut one.a[0]), [b"x".to_vec()]);
    }

    /// A burst takes at most `max` frames, in order, and says how many
    /// it took; what is left waits for the next.
    #[test]
    fn a_burst_takes_at_most_max_and_counts_them() {
        let mut link = MultiQueuePair::new(1, 16, |_: &[u8]| Some(0));
        for i in 0..5u8 {
            assert!(link.a[0].tx(&[i]));
        }
        let mut got = Vec::new();
        assert_eq!(link.b[0].rx_burst(2, &mut |f| got.push(f.to_vec())), 2);
        assert_eq!(got, [vec![0], vec![1]]);
        assert_eq!(link.b[0].rx_burst(0, &mut |f| got.push(f.to_vec())), 0);
        assert_eq!(link.b[0].rx_burst(10, &mut |f| got.push(f.to_vec())), 3);
        assert_eq!(got, [vec![0], vec![1], vec![2], vec![3], vec![4]]);
        assert_eq!(link.b[0].rx_burst(10, &mut |_| panic!("empty")), 0);
    }

    #[test]
    fn each_steering_function_serves_its_own_end() {
        let mut link = MultiQueuePair::with_steering(3, 8, |_: &[u8]| Some(2), |_: &[u8]| Some(1));
        assert!(link.a[0].tx(b"to b"));
        assert!(link.b[0].tx(b"to a"));
        assert_eq!(drain(&mut link.b[1]), [b"to b".to_vec()]);
        assert_eq!(drain(&mut link.a[2]), [b"to a".to_vec()]);
    }

    #[test]
    fn a_sleeping_queue_wakes_for_its_frame_only() {
        let mut link = MultiQueuePair::new(2, 8, |f: &[u8]| f.first().map(|&q| u16::from(q)));
        let mut b1 = link.b.pop().unwrap();
        let t = std::thread::spawn(move || {
            let start = Instant::now();
            b1.wait(Duration::from_secs(30));
            (start.elapsed(), drain(&mut b1))
        });
        std::thread::sleep(Duration::from_millis(50));
        // A frame for queue 0 leaves queue 1 asleep ...
        assert!(link.a[0].tx(&[0]));
        std::thread::sleep(Duration::from_millis(50));
        assert!(!t.is_finished());
        // ... one for queue 1 wakes it.
        assert!(link.a[0].tx(&[1, 9]));
        let (slept, got) = t.join().unwrap();
        assert!(slept < Duration::from_secs(20), "{slept:?}");
        assert_eq!(got, [vec![1, 9]]);
        assert_eq!(link.b[0].pending(), 1);
        // A ring with nobody waiting is kept for the next wait.
        let mut b0 = link.b.pop().unwrap();
        drain(&mut b0);
        b0.doorbell().unwrap().ring();
        let start = Instant::now();
        b0.wait(Duration::from_secs(30));
        assert!(start.elapsed() < Duration::from_secs(20));
    }

    /// A thread per queue at each end. A's thread `q` opens flows whose
    /// answers come back to queue `q` (ports from `port_for_queue`, under
    /// the Microsoft key, which does not map the two directions alike);
    /// B's thread per queue checks each frame reached the queue RSS names
    /// and answers it from its own queue. Every answer must reach the A
    /// thread that sent the question, in order.
    #[test]
    fn a_thread_per_queue() {
        const QUEUES: u16 = 4;
        const FLOWS: u16 = 3;
        const PER_FLOW: u32 = 500;
        let rss = Rss::microsoft(QUEUES).unwrap();
        let steer = rss.clone();
        let link = MultiQueuePair::new(QUEUES, 256, move |f: &[u8]| steer.queue_of_frame(f));
        let done = Arc::new(AtomicBool::new(false));
        let deadline = Instant::now() + Duration::from_secs(60);
        let b_threads: Vec<_> = link
            .b
            .into_iter()
            .map(|mut dev| {
                let (rss, done) = (rss.clone(), done.clone());
                std::thread::spawn(move || {
                    let q = dev.queue();
                    let mut answered = 0u32;
                    let mut pending = std::collections::VecDeque::new();
                    while !done.load(Ordering::Relaxed) && Instant::now() < deadline {
                        dev.rx_burst(32, &mut |f| {
                            assert_eq!(rss.queue_of_frame(f), Some(q));
                            assert_eq!(dev_queue(f, &rss), q);
                            pending.push_back(reversed(f));
                        });
                        while let Some(f) = pending.front() {
                            if !dev.tx(f) {
                                break; // A's queue full: retry next round
                            }
                            pending.pop_front();
                            answered += 1;
                        }
                        if pending.is_empty() {
                            dev.wait(Duration::from_millis(5));
                        }
                    }
                    (q, answered)
                })
            })
            .collect();
        let a_threads: Vec<_> = link
            .a
            .into_iter()
            .map(|mut dev| {
                let rss = rss.clone();
                std::thread::spawn(move || {
                    let q = dev.queue();
                    let mut taken = Vec::new();
                    for _ in 0..FLOWS {
                        let open = ActiveOpen {
                            local: Ipv4Address(A_IP),
                            remote: Ipv4Address(B_IP),
                            remote_port: 4791,
                            proto: IpProtocol::TCP,
                        };
                        let p = rss
                            .port_for_queue(q, &open, 49152..=65535, 49152, |p| taken.contains(&p))
                            .unwrap();
                        taken.push(p);
                    }
                    let mut next_send = vec![0u32; taken.len()];
                    let mut next_recv = vec![0u32; taken.len()];
                    while next_recv.iter().any(|&n| n < PER_FLOW) {
                        assert!(Instant::now() < deadline, "queue {q}: {next_recv:?}");
                        let mut sent = 0;
                        for (i, &port) in taken.iter().enumerate() {
                            // At most 16 questions outstanding per flow.
                            if next_send[i] < PER_FLOW && next_send[i] < next_recv[i] + 16 {
                                let f = frame(A_IP, B_IP, 6, port, 4791, next_send[i]);
                                if dev.tx(&f) {
                                    next_send[i] += 1;
                                    sent += 1;
                                }
                            }
                        }
                        let got = dev.rx_burst(64, &mut |f| {
                            let (sport, dport, seq) = parts(f);
                            assert_eq!(sport, 4791);
                            let i = taken.iter().position(|&p| p == dport).unwrap();
                            assert_eq!(seq, next_recv[i], "flow {dport} in order on queue {q}");
                            next_recv[i] += 1;
                        });
                        if sent == 0 && got == 0 {
                            dev.wait(Duration::from_millis(5));
                        }
                    }
                    taken
                })
            })
            .collect();
        let mut ports = Vec::new();
        for t in a_threads {
            ports.extend(t.join().unwrap());
        }
        done.store(true, Ordering::Relaxed);
        let answered: u32 = b_threads.into_iter().map(|t| t.join().unwrap().1).sum();
        assert_eq!(answered, u32::from(QUEUES * FLOWS) * PER_FLOW);
        ports.sort_unstable();
        ports.dedup();
        assert_eq!(ports.len(), usize::from(QUEUES * FLOWS));
    }

    /// The queue RSS gives a frame's flow, from its parts (a second,
    /// independent way to the answer `queue_of_frame` gives).
    fn dev_queue(f: &[u8], rss: &Rss) -> u16 {
        let (sport, dport, _) = parts(f);
        let src = Ipv4Address(f[26..30].try_into().unwrap());
        let dst = Ipv4Address(f[30..34].try_into().unwrap());
        rss.queue_of(src, dst, sport, dport, IpProtocol(f[23]))
    }
}
