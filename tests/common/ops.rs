//! The proptest scaffolding of the op-sequence tests (tests/op_sequences.rs,
//! tests/share_op_sequences.rs): sequences that start with a subscription, the runner's
//! configuration, the check and the coverage report. Each includes it with
//! `#[path = "common/ops.rs"] mod ops;` under `#[cfg(test)]`.

use std::collections::BTreeMap;
use std::fmt::Debug;
use std::sync::Mutex;
use std::time::Instant;

use proptest::prelude::*;
use proptest::test_runner::{Config, TestRunner};

/// A subscription to the topics of a non-empty bit mask over three topics first (most runs are
/// about a member in a group), then fewer than `most` ops of `op`.
pub fn subscribed_first<O: Clone + Debug>(
    subscribe: fn(u8) -> O,
    op: impl Strategy<Value = O>,
    most: usize,
) -> impl Strategy<Value = Vec<O>> {
    (1u8..8, prop::collection::vec(op, 0..most)).prop_map(move |(mask, mut ops)| {
        ops.insert(0, subscribe(mask));
        ops
    })
}

/// How many milliseconds a clock jump moves: mostly under 1.5 s, sometimes up to 40 s.
pub fn tick_ms() -> impl Strategy<Value = u32> {
    prop_oneof![6 => 0u32..1500, 1 => 1500u32..40_000]
}

/// `cases` cases (`PROPTEST_CASES` overrides); no regression files next to the tests (a
/// failure becomes a unit test by hand).
pub fn config(cases: u32) -> Config {
    let mut c = Config::default();
    if std::env::var_os("PROPTEST_CASES").is_none() {
        c.cases = cases;
    }
    c.failure_persistence = None;
    c
}

/// Runs `case` on `cases` values of `strategy` (proptest shrinks a panicking one); panics with
/// `name` and the failure, else says how many cases ran in how long.
pub fn check<S: Strategy>(name: &str, cases: u32, strategy: S, case: impl Fn(S::Value)) {
    let started = Instant::now();
    let mut runner = TestRunner::new(config(cases));
    let result = runner.run(&strategy, |value| {
        case(value);
        Ok(())
    });
    if let Err(e) = result {
        panic!("{name}: {e}");
    }
    eprintln!(
        "{name}: {} cases in {:?}",
        runner.config().cases,
        started.elapsed()
    );
}

/// What `cases` runs of `strategy` reach, summed: `case` runs one and counts what it reached.
pub fn reached<S: Strategy>(
    cases: u32,
    strategy: S,
    case: impl Fn(S::Value) -> BTreeMap<String, u64>,
) -> BTreeMap<String, u64> {
    let mut runner = TestRunner::new(config(cases));
    let reached = Mutex::new(BTreeMap::<String, u64>::new());
    runner
        .run(&strategy, |value| {
            let counts = case(value);
            let mut all = reached.lock().unwrap();
            for (k, n) in counts {
                *all.entry(k).or_default() += n;
            }
            Ok(())
        })
        .unwrap();
    reached.into_inner().unwrap()
}
