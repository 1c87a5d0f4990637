//! Kafka's exponential backoff with jitter (KIP-580), computed from a seeded RNG so that a
//! simulation replays exactly.
//!
//! Formula of apache/kafka `common/utils/ExponentialBackoff.java` (moved to
//! `common/utils/internals/` in 4.4):
//! `exp_max = ln(max / max(initial, 1)) / ln(base)` when `max > initial`, else 0 (constant backoff);
//! `backoff(n) = min(max, floor(U(1 - jitter, 1 + jitter) * initial * base^min(n, exp_max)))`,
//! where `n` counts the failures so far, starting at 0.
//!
//! Every retry of the crate draws its delay here (coordinator lookups, heartbeats, rejoins,
//! commits and offset fetches, reconnects), with Kafka's ±20% jitter.

use std::time::Duration;

use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;

/// The parameters of one exponential backoff.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct ExponentialBackoff {
    initial_ms: u64,
    max_ms: u64,
    base: f64,
    jitter: f64,
    exp_max: f64,
}

impl ExponentialBackoff {
    /// `retry.backoff.ms` / `retry.backoff.max.ms`: base 2, jitter 0.2 (Kafka's retry backoff).
    pub fn retry(retry_backoff: Duration, retry_backoff_max: Duration) -> Self {
        Self::new(retry_backoff, 2.0, retry_backoff_max, 0.2)
    }

    /// A backoff with explicit parameters. `initial` is clamped to `max` as Kafka does
    /// (`initial = min(retry.backoff.ms, retry.backoff.max.ms)`); `base` below 1 is taken as 1
    /// and `jitter` is clamped to `0..=1`.
    pub fn new(initial: Duration, base: f64, max: Duration, jitter: f64) -> Self {
        let max_ms = u64::try_from(max.as_millis()).unwrap_or(u64::MAX);
        let initial_ms = u64::try_from(initial.as_millis())
            .unwrap_or(u64::MAX)
            .min(max_ms);
        let base = if base.is_finite() && base > 1.0 {
            base
        } else {
            1.0
        };
        let jitter = if jitter.is_finite() {
            jitter.clamp(0.0, 1.0)
        } else {
            0.0
        };
        let exp_max = if max_ms > initial_ms && base > 1.0 {
            (max_ms as f64 / initial_ms.max(1) as f64).ln() / base.ln()
        } else {
            0.0
        };
        Self {
            initial_ms,
            max_ms,
            base,
            jitter,
            exp_max,
        }
    }

    /// The delay after `failures` failures (0 = the first retry), with jitter drawn from `rng`.
    pub fn delay(&self, failures: u32, rng: &mut JitterRng) -> Duration {
        if self.exp_max == 0.0 {
            return Duration::from_millis(self.initial_ms);
        }
        let exp = f64::from(failures).min(self.exp_max);
        let term = self.initial_ms as f64 * self.base.powf(exp);
        let factor = if self.jitter < f64::MIN_POSITIVE {
            1.0
        } else {
            rng.0.random_range((1.0 - self.jitter)..(1.0 + self.jitter))
        };
        // `as u64` saturates on overflow, like Java's (long) cast of a double.
        let ms = ((factor * term) as u64).min(self.max_ms);
        Duration::from_millis(ms)
    }

    /// The smallest and largest delay [`delay`](Self::delay) can return for `failures`.
    pub fn bounds(&self, failures: u32) -> (Duration, Duration) {
        if self.exp_max == 0.0 {
            let d = Duration::from_millis(self.initial_ms);
            return (d, d);
        }
        let term = self.initial_ms as f64 * self.base.powf(f64::from(failures).min(self.exp_max));
        let lo = (((1.0 - self.jitter) * term) as u64).min(self.max_ms);
        let hi = (((1.0 + self.jitter) * term) as u64).min(self.max_ms);
        (Duration::from_millis(lo), Duration::from_millis(hi))
    }
}

/// The seeded random source for backoff jitter. The core never reads a global RNG: whoever builds
/// a state machine passes a seed (random in production, fixed in simulations).
#[derive(Debug, Clone)]
pub struct JitterRng(ChaCha8Rng);

impl JitterRng {
    /// A generator that yields the same jitter sequence for the same seed on every platform.
    pub fn from_seed(seed: u64) -> Self {
        Self(ChaCha8Rng::seed_from_u64(seed))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ms(d: Duration) -> u64 {
        d.as_millis() as u64
    }

    #[test]
    fn default_retry_backoff_stays_within_kip580_bounds() {
        let b = ExponentialBackoff::retry(Duration::from_millis(100), Duration::from_millis(1000));
        let mut rng = JitterRng::from_seed(7);
        // (failures, nominal): 100, 200, 400, 800, then capped at 1000.
        for (n, nominal) in [
            (0u32, 100f64),
            (1, 200.),
            (2, 400.),
            (3, 800.),
            (4, 1000.),
            (9, 1000.),
        ] {
            let (lo, hi) = (0.8 * nominal, (1.2 * nominal).min(1000.0));
            let samples: Vec<u64> = (0..20_000).map(|_| ms(b.delay(n, &mut rng))).collect();
            let min = *samples.iter().min().unwrap() as f64;
            let max = *samples.iter().max().unwrap() as f64;
            let mean = samples.iter().sum::<u64>() as f64 / samples.len() as f64;
            assert!(
                min >= lo.floor() && max <= hi,
                "n={n}: [{min}, {max}] outside [{lo}, {hi}]"
            );
            // The jitter really spreads the values over the band (not a constant).
            assert!(
                min <= lo + 0.05 * nominal,
                "n={n}: min {min} never near {lo}"
            );
            if nominal < 1000.0 {
                assert!(
                    max >= hi - 0.05 * nominal,
                    "n={n}: max {max} never near {hi}"
                );
                // U(0.8, 1.2) has mean 1.0.
                assert!((mean / nominal - 1.0).abs() < 0.01, "n={n}: mean {mean}");
            } else {
                // From exp_max on, 1000 ± 20% is clipped at 1000: about half the draws hit the cap.
                let capped = samples.iter().filter(|&&s| s == 1000).count();
                assert!((8_000..12_000).contains(&capped), "n={n}: {capped} capped");
            }
            let (blo, bhi) = b.bounds(n);
            assert!(ms(blo) as f64 <= min && max <= ms(bhi) as f64);
        }
    }

    #[test]
    fn same_seed_same_delays_other_seed_other_delays() {
        let b = ExponentialBackoff::retry(Duration::from_millis(100), Duration::from_millis(1000));
        let run = |seed| {
            let mut rng = JitterRng::from_seed(seed);
            (0..50)
                .map(|n| b.delay(n % 6, &mut rng))
                .collect::<Vec<_>>()
        };
        assert_eq!(run(1), run(1));
        assert_ne!(run(1), run(2));
    }

    #[test]
    fn constant_when_initial_reaches_max_and_no_overflow() {
        let mut rng = JitterRng::from_seed(0);
        let b = ExponentialBackoff::retry(Duration::from_millis(5000), Duration::from_millis(1000));
        // initial is clamped to max; exp_max = 0 -> constant, no jitter (Kafka's rule).
        assert_eq!(b.delay(0, &mut rng), Duration::from_millis(1000));
        assert_eq!(b.delay(30, &mut rng), Duration::from_millis(1000));
        let b = ExponentialBackoff::retry(Duration::ZERO, Duration::from_secs(3600));
        for n in [0, 1, 10, 63, u32::MAX] {
            assert!(b.delay(n, &mut rng) <= Duration::from_secs(3600));
        }
        let huge = ExponentialBackoff::new(Duration::MAX, 2.0, Duration::MAX, 0.2);
        let _ = huge.delay(u32::MAX, &mut rng);
        let weird = ExponentialBackoff::new(
            Duration::from_millis(10),
            f64::NAN,
            Duration::from_secs(1),
            f64::INFINITY,
        );
        assert_eq!(weird.delay(5, &mut rng), Duration::from_millis(10));
    }

    #[test]
    fn reconnect_backoff_defaults() {
        // reconnect.backoff.ms 50 -> reconnect.backoff.max.ms 1000, same formula.
        let b = ExponentialBackoff::retry(Duration::from_millis(50), Duration::from_millis(1000));
        assert_eq!(
            b.bounds(0),
            (Duration::from_millis(40), Duration::from_millis(60))
        );
        assert_eq!(
            b.bounds(4),
            (Duration::from_millis(640), Duration::from_millis(960))
        );
        assert_eq!(b.bounds(5).1, Duration::from_millis(1000));
    }
}
