//! Replicas of one memory table act as one table: random control
//! operations (applied to every replica in order, as a context with
//! several poll loops applies them) and random data-path operations on a
//! random replica (checks, placements, remote invalidations) give what a
//! single table given the same operations gives.
use iwarp_proto::mem::{Access, MemoryTable, PdId, STag};
use proptest::prelude::*;

const REPLICAS: usize = 3;

/// Reads operation fields from the fuzz input (zeros once it runs out).
struct Input<'a>(&'a [u8]);

impl Input<'_> {
    fn byte(&mut self) -> u8 {
        match self.0.split_first() {
            Some((&b, rest)) => {
                self.0 = rest;
                b
            }
            None => 0,
        }
    }

    fn pick<T: Copy>(&mut self, from: &[T]) -> Option<T> {
        let b = usize::from(self.byte());
        (!from.is_empty()).then(|| from[b % from.len()])
    }

    fn access(&mut self) -> Access {
        let all = [
            Access::LOCAL_WRITE,
            Access::REMOTE_READ,
            Access::REMOTE_WRITE,
            Access::MW_BIND,
        ];
        let bits = self.byte();
        all.iter()
            .enumerate()
            .filter(|(i, _)| bits & (1 << i) != 0)
            .fold(Access(0), |a, (_, &b)| a | b)
    }
}

/// What a run did that took effect.
#[derive(Debug, Default)]
struct Counts {
    binds: usize,
    placements: usize,
    kills: usize,
    /// Deregistrations that succeeded after a kill on some replica.
    deregs_after_kill: usize,
}

/// Run the operations in `data`; `Err` names the first disagreement.
fn run(data: &[u8]) -> Result<Counts, String> {
    let mut counts = Counts::default();
    let mut killed_since = false;
    let seed = 0x5eed;
    let mut one = MemoryTable::with_seed(seed);
    let mut reps = MemoryTable::replicas(seed, REPLICAS);
    let mut pds: Vec<PdId> = Vec::new();
    let mut stags: Vec<STag> = Vec::new();
    let mut input = Input(data);
    let mut steps = 0;
    // Every control operation on the single table, then on each replica
    // in order: all answers alike.
    macro_rules! control {
        ($name:expr, |$m:ident| $op:expr) => {{
            let want = {
                let $m = &mut one;
                $op
            };
            for (i, r) in reps.iter_mut().enumerate() {
                let got = {
                    let $m = r;
                    $op
                };
                if got != want {
                    return Err(format!(
                        "step {steps}: {} on replica {i}: {got:?}, one table: {want:?}",
                        $name
                    ));
                }
            }
            want
        }};
    }
    while !input.0.is_empty() {
        steps += 1;
        match input.byte() % 12 {
            0 => {
                let pd = control!("alloc_pd", |m| m.alloc_pd());
                pds.push(pd);
            }
            1 => {
                let Some(pd) = input.pick(&pds) else { continue };
                let len = usize::from(input.byte() % 64) + 1;
                let access = input.access();
                let base = u64::from(input.byte() % 4) * 100;
                if let Ok(s) = control!("register", |m| m.register(pd, vec![0; len], access, base))
                {
                    stags.push(s);
                }
            }
            2 => {
                let Some(s) = input.pick(&stags) else {
                    continue;
                };
                if control!("deregister", |m| m.deregister(s).map(|b| b.len())).is_ok()
                    && killed_since
                {
                    counts.deregs_after_kill += 1;
                }
            }
            3 => {
                let Some(s) = input.pick(&stags) else {
                    continue;
                };
                let _ = control!("invalidate", |m| m.invalidate(s));
            }
            4 => {
                let Some(s) = input.pick(&stags) else {
                    continue;
                };
                let key = input.byte();
                if let Ok(s) = control!("revalidate", |m| m.revalidate(s, key)) {
                    stags.push(s);
                }
            }
            5 => {
                let Some(pd) = input.pick(&pds) else { continue };
                if let Ok(s) = control!("alloc_mw", |m| m.alloc_mw(pd)) {
                    stags.push(s);
                }
            }
            6 => {
                let (Some(w), Some(r)) = (input.pick(&stags), input.pick(&stags)) else {
                    continue;
                };
                let (off, len) = (u64::from(input.byte() % 32), u64::from(input.byte() % 32));
                let access = input.access();
                if let Ok(s) = control!("bind_mw", |m| m.bind_mw(w, r, off, len, access)) {
                    stags.push(s);
                    counts.binds += 1;
                }
            }
            7 => {
                let Some(s) = input.pick(&stags) else {
                    continue;
                };
                let _ = control!("dealloc_mw", |m| m.dealloc_mw(s));
            }
            8 => {
                let Some(pd) = input.pick(&pds) else { continue };
                let _ = control!("dealloc_pd", |m| m.dealloc_pd(pd));
            }
            // The data path, on one replica; the single table gets the
            // same.
            k => {
                let rep = usize::from(input.byte()) % REPLICAS;
                let (Some(s), Some(pd)) = (input.pick(&stags), input.pick(&pds)) else {
                    continue;
                };
                let to = u64::from(input.byte() % 4) * 100 + u64::from(input.byte() % 64);
                let len = u64::from(input.byte() % 16);
                let need = input.access();
                let r = &mut reps[rep];
                let (got, want) = match k {
                    9 => (
                        format!("{:?}", r.check(s, pd, need, to, len).map(|g| g.len)),
                        format!("{:?}", one.check(s, pd, need, to, len).map(|g| g.len)),
                    ),
                    10 => {
                        let data = vec![7; len as usize];
                        (
                            format!("{:?}", r.place(s, pd, need, to, &data)),
                            format!("{:?}", one.place(s, pd, need, to, &data)),
                        )
                    }
                    _ => (
                        format!("{:?}", r.invalidate_remote(s, pd)),
                        format!("{:?}", one.invalidate_remote(s, pd)),
                    ),
                };
                if got != want {
                    return Err(format!(
                        "step {steps}: data op {k} on replica {rep}: {got}, one table: {want}"
                    ));
                }
                if want == "Ok(())" {
                    if k == 10 {
                        counts.placements += 1;
                    } else {
                        counts.kills += 1;
                        killed_since = true;
                    }
                }
                // What every replica says of every STag, after it.
                for s in &stags {
                    let want = one.is_valid(*s);
                    for (i, r) in reps.iter().enumerate() {
                        if r.is_valid(*s) != want {
                            return Err(format!(
                                "step {steps}: is_valid({s}) on replica {i} is {}, one table: {want}",
                                !want
                            ));
                        }
                    }
                }
            }
        }
    }
    let _ = steps;
    Ok(counts)
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 1024, ..ProptestConfig::default() })]

    #[test]
    fn replicas_act_as_one_table(data in proptest::collection::vec(any::<u8>(), 0..3000)) {
        if let Err(e) = run(&data) {
            prop_assert!(false, "{}", e);
        }
    }
}

/// The input above reaches the operations that matter with effect: over
/// fixed inputs, windows are bound, payload placed, remote invalidations
/// succeed on some replica, and regions are deregistered after one.
#[test]
fn fixed_inputs_agree_and_do_something() {
    let mut total = Counts::default();
    for seed in 0..300u64 {
        let mut s = seed;
        let data: Vec<u8> = (0..2000)
            .map(|_| {
                s = s
                    .wrapping_mul(6364136223846793005)
                    .wrapping_add(1442695040888963407);
                (s >> 33) as u8
            })
            .collect();
        let c = run(&data).unwrap_or_else(|e| panic!("seed {seed}: {e}"));
        total.binds += c.binds;
        total.placements += c.placements;
        total.kills += c.kills;
        total.deregs_after_kill += c.deregs_after_kill;
    }
    assert!(
        total.binds > 0 && total.placements > 0 && total.kills > 0 && total.deregs_after_kill > 0,
        "{total:?}"
    );
}
