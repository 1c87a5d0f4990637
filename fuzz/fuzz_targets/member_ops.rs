//! Operation sequences from fuzzer bytes, through the harness of `tests/op_sequences.rs` (the
//! same `Run`, ops and invariants as the proptest there; a violated invariant panics). Byte 0
//! picks the member (classic/consumer, static/dynamic) and the classic assignor, bytes 1-3 the
//! partition counts, the rest is read op by op. Answers include damaged encodings and raw bytes,
//! decoded by `transport::wire::decode_response` into the member.
//!
//! Every invariant is checked (no open bug is relaxed there any more).

#![no_main]

#[path = "../../tests/op_sequences.rs"]
#[allow(dead_code, unused_imports)]
mod op_sequences;

use std::time::Instant;

use arbitrary::{Result, Unstructured};
use libfuzzer_sys::fuzz_target;
use op_sequences::{Answer, CloseKind, ERROR_CODES, Op, Pick, Run, Setup, Variant};

fn pick(u: &mut Unstructured) -> Result<Pick> {
    Ok(if u.ratio(3, 4)? {
        Pick::Oldest
    } else {
        Pick::Newest
    })
}

fn answer(u: &mut Unstructured) -> Result<Answer> {
    Ok(match u.int_in_range(0u8..=39)? {
        0..=19 => Answer::Ok(u.arbitrary()?),
        20..=27 => Answer::Plausible(u.arbitrary()?),
        28..=29 => Answer::Error(*u.choose(ERROR_CODES)?, u.arbitrary()?),
        30..=32 => Answer::Transport(u.arbitrary()?),
        33 => Answer::WrongApi(u.arbitrary()?),
        34..=36 => {
            let seed = u.arbitrary()?;
            let n = u.int_in_range(1u8..=4)?;
            let edits = (0..n)
                .map(|_| Ok((u.arbitrary()?, u.arbitrary()?)))
                .collect::<Result<_>>()?;
            Answer::Mutated(seed, edits)
        }
        _ => {
            let n = u.int_in_range(0usize..=64)?;
            Answer::Raw(u.bytes(n)?.to_vec())
        }
    })
}

fn op(u: &mut Unstructured) -> Result<Op> {
    Ok(match u.int_in_range(0u8..=84)? {
        0..=3 => Op::Subscribe(u.int_in_range(0u8..=7)?),
        4 => Op::SubscribeRegex,
        5..=6 => Op::Unsubscribe,
        7..=10 => Op::Poll,
        11 => Op::Close(*u.choose(&[CloseKind::Default, CloseKind::Remain, CloseKind::Leave])?),
        12..=14 => Op::Commit(u.arbitrary()?),
        15..=16 => Op::Fetch,
        17..=22 => Op::CompleteRevocation {
            stale: u.ratio(1, 4)?,
        },
        23..=30 => Op::Tick(if u.ratio(6, 7)? {
            u.int_in_range(0u32..=1500)?
        } else {
            u.int_in_range(1500u32..=40_000)?
        }),
        31..=81 => Op::Respond(pick(u)?, answer(u)?),
        _ => Op::Duplicate(pick(u)?),
    })
}

fuzz_target!(|data: &[u8]| {
    let mut u = Unstructured::new(data);
    let Ok(first) = u.arbitrary::<u8>() else {
        return;
    };
    let Ok(partitions) = u.arbitrary::<[u8; 3]>() else {
        return;
    };
    let setup = Setup {
        variant: Variant::ALL[usize::from(first) % Variant::ALL.len()],
        cooperative: first & 0x10 != 0,
        partitions,
    };
    let mut run = Run::new(setup, Instant::now());
    // Most interesting runs start with a subscription.
    run.apply(&Op::Subscribe(1 + (first >> 5) % 7));
    while !u.is_empty() {
        match op(&mut u) {
            Ok(op) => run.apply(&op),
            Err(_) => break,
        }
    }
});
