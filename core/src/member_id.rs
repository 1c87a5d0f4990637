//! Client-generated member ids for the KIP-848 consumer protocol (KIP-1082).
//!
//! Since ConsumerGroupHeartbeat v1 the client names itself: it draws a random UUID once per member
//! instance and sends it on its first heartbeat and on every retry, so a lost response can never
//! make the coordinator create a second ("ghost") member. The wire form is Kafka's `Uuid` string:
//! the 16 bytes in URL-safe base64 without padding, 22 characters.
//!
//! Generation rules (apache/kafka `common/Uuid.java`, KIP-1082, KAFKA-20072):
//! - 16 bytes from the operating system's CSPRNG ([`MemberId::generate`], what the driver uses),
//!   or from a seeded ChaCha stream ([`MemberId::from_seed`], for the sans-IO core, which reads no
//!   random source of its own), stamped as a version-4 UUID;
//! - never one of Kafka's reserved ids, `ZERO_UUID` (all zero) and `METADATA_TOPIC_ID` (0…01);
//! - never an id whose string form contains `-`: Kafka's own clients stopped producing those in 4.4
//!   because an id starting with `-` reads like a command-line flag in the tools. Such draws are
//!   drawn again, so generated ids use only `[A-Za-z0-9_]`.

use std::fmt;
use std::str::FromStr;

use base64::Engine as _;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use rand::{RngCore, SeedableRng};
use rand_chacha::ChaCha8Rng;

/// Length of a member id's string form: 16 bytes in unpadded base64.
pub const MEMBER_ID_LEN: usize = 22;

/// The ChaCha stream [`MemberId::from_seed`] draws from ("KIP1082"): apart from stream 0, which
/// the backoff jitter of a member with the same seed uses.
const SEEDED_ID_STREAM: u64 = 0x004b_4950_3130_3832;

/// A KIP-1082 member id: a random UUID in Kafka's 22-character URL-safe base64 form.
///
/// Generate one with [`MemberId::generate`] once per member instance and keep it for the life of
/// that member (or, where a run must replay, derive it from a seed with
/// [`MemberId::from_seed`]); parse ids that come from configuration or from a broker with
/// [`MemberId::parse`] (or [`str::parse`]).
#[derive(Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct MemberId {
    bytes: [u8; 16],
    text: [u8; MEMBER_ID_LEN],
}

/// Why a string is not a valid member id.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum MemberIdError {
    /// The string is not 22 characters long.
    #[error("member id {id:?} has {len} characters, a Kafka Uuid string has exactly 22")]
    Length {
        /// The rejected string (truncated to 64 characters).
        id: String,
        /// Its length in bytes.
        len: usize,
    },
    /// The string is not URL-safe base64 of 16 bytes.
    #[error("member id {id:?} is not URL-safe base64 of 16 bytes")]
    Encoding {
        /// The rejected string.
        id: String,
    },
    /// The id is one of Kafka's reserved UUIDs (all zero, or 0…01).
    #[error("member id {id:?} is a reserved Kafka Uuid")]
    Reserved {
        /// The rejected string.
        id: String,
    },
}

impl MemberId {
    /// Draws a new member id from the operating system's CSPRNG.
    ///
    /// # Panics
    /// Only if the operating system has no random source at all (the same condition under which
    /// `uuid::Uuid::new_v4` panics); a client cannot make safe ids without one.
    // The one OS random draw in this crate: the driver's (or the application's), never a
    // machine's, which derive ids from their seed.
    #[allow(clippy::disallowed_methods)]
    pub fn generate() -> Self {
        loop {
            let bytes = *uuid::Uuid::new_v4().as_bytes();
            if let Some(id) = Self::from_generated_bytes(bytes) {
                return id;
            }
        }
    }

    /// Derives a member id from `seed`, deterministically: the same seed gives the same id on
    /// every platform. The id follows the same rules as [`generate`](Self::generate) (UUIDv4
    /// bits, 22 characters of `[A-Za-z0-9_]`, never a reserved id, draws with `-` repeated), but
    /// is only as unique as the seeds are: give every member instance its own seed.
    ///
    /// For the sans-IO core, which takes randomness only from its inputs
    /// ([`GroupConfig::seed`](crate::config::GroupConfig::seed)); the driver draws ids with
    /// [`generate`](Self::generate).
    pub fn from_seed(seed: u64) -> Self {
        let mut rng = ChaCha8Rng::seed_from_u64(seed);
        rng.set_stream(SEEDED_ID_STREAM);
        loop {
            let mut random = [0u8; 16];
            rng.fill_bytes(&mut random);
            let bytes = *uuid::Builder::from_random_bytes(random)
                .into_uuid()
                .as_bytes();
            if let Some(id) = Self::from_generated_bytes(bytes) {
                return id;
            }
        }
    }

    /// A 64-bit value folded from the id's 16 bytes (the two halves XORed): the seed of the
    /// backoff jitter of a core member configured without one, so that members with different
    /// ids do not retry in lockstep.
    pub(crate) fn jitter_seed(&self) -> u64 {
        let (hi, lo) = self.bytes.split_at(8);
        u64::from_be_bytes(hi.try_into().expect("8 bytes"))
            ^ u64::from_be_bytes(lo.try_into().expect("8 bytes"))
    }

    /// Builds an id from 16 freshly drawn bytes, or `None` when the draw must be repeated:
    /// reserved ids, and ids whose text contains `-` (KAFKA-20072).
    fn from_generated_bytes(bytes: [u8; 16]) -> Option<Self> {
        let id = Self::from_bytes(bytes).ok()?;
        (!id.as_str().contains('-')).then_some(id)
    }

    /// Wraps 16 bytes, rejecting Kafka's reserved UUIDs.
    pub fn from_bytes(bytes: [u8; 16]) -> Result<Self, MemberIdError> {
        let mut text = [0u8; MEMBER_ID_LEN];
        let written = URL_SAFE_NO_PAD
            .encode_slice(bytes, &mut text)
            .expect("16 bytes always encode to exactly 22 base64 characters");
        debug_assert_eq!(written, MEMBER_ID_LEN);
        let id = Self { bytes, text };
        if u128::from_be_bytes(bytes) <= 1 {
            return Err(MemberIdError::Reserved {
                id: id.as_str().to_owned(),
            });
        }
        Ok(id)
    }

    /// Parses and validates a member id string (22 chars of URL-safe base64, not reserved).
    ///
    /// Ids with `-` are accepted here because other clients and older brokers produce them; only
    /// [`MemberId::generate`] avoids them.
    pub fn parse(s: &str) -> Result<Self, MemberIdError> {
        if s.len() != MEMBER_ID_LEN {
            return Err(MemberIdError::Length {
                id: s.chars().take(64).collect(),
                len: s.len(),
            });
        }
        let mut bytes = [0u8; 16];
        // 22 base64 chars carry 132 bits: the decoder rejects non-zero trailing bits, so each
        // 16-byte id has exactly one accepted spelling.
        match URL_SAFE_NO_PAD.decode_slice(s, &mut bytes) {
            Ok(16) => Self::from_bytes(bytes).map_err(|_| MemberIdError::Reserved { id: s.into() }),
            _ => Err(MemberIdError::Encoding { id: s.into() }),
        }
    }

    /// The id as sent on the wire.
    pub fn as_str(&self) -> &str {
        std::str::from_utf8(&self.text).expect("base64 output is ASCII")
    }

    /// The 16 raw bytes.
    pub fn as_bytes(&self) -> &[u8; 16] {
        &self.bytes
    }
}

impl FromStr for MemberId {
    type Err = MemberIdError;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        Self::parse(s)
    }
}

impl fmt::Display for MemberId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl fmt::Debug for MemberId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "MemberId({})", self.as_str())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashSet;

    fn assert_generated_form(id: &MemberId) {
        let s = id.as_str();
        assert_eq!(s.len(), 22, "{s}");
        assert!(
            s.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'_'),
            "{s} has a character outside [A-Za-z0-9_]"
        );
        let u = uuid::Uuid::from_bytes(*id.as_bytes());
        assert_eq!(u.get_version_num(), 4, "{s} is not a version-4 UUID");
        assert_eq!(u.get_variant(), uuid::Variant::RFC4122, "{s}");
        assert_eq!(
            MemberId::parse(s).as_ref(),
            Ok(id),
            "{s} does not parse back"
        );
    }

    #[test]
    #[allow(clippy::disallowed_methods)] // the OS draw itself is what is tested
    fn one_million_generated_ids_are_well_formed_and_unique() {
        const N: usize = 1_000_000;
        let mut seen = HashSet::with_capacity(N);
        for _ in 0..N {
            let id = MemberId::generate();
            assert_generated_form(&id);
            assert!(seen.insert(id.bytes), "duplicate member id {id}");
        }
        assert_eq!(seen.len(), N);
    }

    #[test]
    fn ids_derived_from_seeds_are_well_formed_unique_and_replay() {
        const N: u64 = 200_000;
        let mut seen = HashSet::with_capacity(N as usize);
        for seed in 0..N {
            let id = MemberId::from_seed(seed);
            assert_generated_form(&id);
            assert!(
                seen.insert(id.bytes),
                "seed {seed}: duplicate member id {id}"
            );
        }
        // Large and adjacent seeds too; and the same seed always gives the same id.
        for seed in [u64::MAX, u64::MAX - 1, 1 << 63, 1 << 32] {
            let id = MemberId::from_seed(seed);
            assert_generated_form(&id);
            assert!(
                seen.insert(id.bytes),
                "seed {seed}: duplicate member id {id}"
            );
            assert_eq!(MemberId::from_seed(seed), id);
        }
        assert_eq!(
            MemberId::from_seed(0).as_str(),
            MemberId::from_seed(0).to_string()
        );
    }

    #[test]
    fn derived_ids_redraw_instead_of_keeping_a_dash() {
        // About 30 % of first draws would contain '-': find seeds whose first draw does, and
        // check that the id derived from them is the (dash-free) second draw.
        let first_draw = |seed: u64| {
            let mut rng = ChaCha8Rng::seed_from_u64(seed);
            rng.set_stream(SEEDED_ID_STREAM);
            let mut random = [0u8; 16];
            rng.fill_bytes(&mut random);
            MemberId::from_bytes(
                *uuid::Builder::from_random_bytes(random)
                    .into_uuid()
                    .as_bytes(),
            )
            .unwrap()
        };
        let dashed: Vec<u64> = (0..100)
            .filter(|s| first_draw(*s).as_str().contains('-'))
            .collect();
        assert!(dashed.len() > 10, "{dashed:?}");
        for seed in dashed {
            let id = MemberId::from_seed(seed);
            assert!(!id.as_str().contains('-'), "seed {seed}: {id}");
            assert_ne!(id, first_draw(seed));
        }
    }

    #[test]
    fn jitter_seeds_of_different_ids_differ() {
        let seeds: HashSet<u64> = (0..10_000)
            .map(|s| MemberId::from_seed(s).jitter_seed())
            .collect();
        assert_eq!(seeds.len(), 10_000);
    }

    #[test]
    fn generation_redraws_ids_that_would_contain_a_dash() {
        // 0xfb as the first byte encodes to a leading '-' in URL-safe base64.
        let mut bytes = [0x11u8; 16];
        bytes[0] = 0xfb;
        assert!(
            MemberId::from_bytes(bytes)
                .unwrap()
                .as_str()
                .starts_with('-')
        );
        assert_eq!(MemberId::from_generated_bytes(bytes), None);
        bytes[0] = 0x10;
        assert!(MemberId::from_generated_bytes(bytes).is_some());
    }

    #[test]
    fn reserved_uuids_are_rejected() {
        assert!(matches!(
            MemberId::from_bytes([0; 16]),
            Err(MemberIdError::Reserved { .. })
        ));
        let mut one = [0u8; 16];
        one[15] = 1;
        assert!(matches!(
            MemberId::from_bytes(one),
            Err(MemberIdError::Reserved { .. })
        ));
        assert!(matches!(
            MemberId::parse("AAAAAAAAAAAAAAAAAAAAAA"),
            Err(MemberIdError::Reserved { .. })
        ));
        assert!(matches!(
            MemberId::parse("AAAAAAAAAAAAAAAAAAAAAQ"),
            Err(MemberIdError::Reserved { .. })
        ));
        one[15] = 2;
        assert!(MemberId::from_bytes(one).is_ok());
    }

    #[test]
    fn parse_rejects_bad_strings_with_typed_errors() {
        for (s, want_len) in [("", true), ("abc", true), ("AAAAAAAAAAAAAAAAAAAAAAA", true)] {
            assert_eq!(
                matches!(MemberId::parse(s), Err(MemberIdError::Length { .. })),
                want_len,
                "{s:?}"
            );
        }
        // Standard-alphabet characters, padding, and non-ASCII are not URL-safe base64.
        for s in [
            "AAAAAAAAAAAAAAAAAAAA+A",
            "AAAAAAAAAAAAAAAAAAAA/A",
            "AAAAAAAAAAAAAAAAAAAA==",
            "AAAAAAAAAAAAAAAAAAAA A",
        ] {
            assert!(
                matches!(MemberId::parse(s), Err(MemberIdError::Encoding { .. })),
                "{s:?}"
            );
        }
        // Non-canonical: the last char carries bits beyond the 128 (Kafka's decoder rejects too).
        assert!(matches!(
            MemberId::parse("AAAAAAAAAAAAAAAAAAAAAB"),
            Err(MemberIdError::Encoding { .. })
        ));
        // Multi-byte UTF-8 of 22 bytes must not panic.
        let s = "ééééééééééé";
        assert_eq!(s.len(), 22);
        assert!(MemberId::parse(s).is_err());
    }

    #[test]
    fn ids_with_dash_from_other_clients_parse() {
        let id = MemberId::parse("-AAAAAAAAAAAAAAAAAAAAg").unwrap();
        assert_eq!(id.to_string(), "-AAAAAAAAAAAAAAAAAAAAg");
        assert_eq!("-AAAAAAAAAAAAAAAAAAAAg".parse::<MemberId>(), Ok(id));
    }
}
