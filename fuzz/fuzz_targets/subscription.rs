//! Arbitrary bytes as classic consumer-protocol `Subscription` and `Assignment` bytes (what
//! JoinGroup members and SyncGroup answers carry): decoding never panics nor allocates beyond
//! `-malloc_limit_mb`, and what decodes re-encodes to bytes that decode to the same content,
//! normalised (topics sorted and deduplicated, partitions grouped by topic), and normalising is
//! idempotent.

#![no_main]

use std::collections::BTreeSet;

use consumer_membership::machine::classic::subscription::{Assignment, Subscription};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    if let Ok(s) = Subscription::decode(data) {
        let again = Subscription::decode(&s.encode()).expect("a re-encoded subscription decodes");
        let topics: BTreeSet<&String> = s.topics.iter().collect();
        assert_eq!(
            again.topics.iter().collect::<Vec<_>>(),
            topics.into_iter().collect::<Vec<_>>()
        );
        let owned: BTreeSet<_> = s.owned_partitions.iter().collect();
        assert_eq!(
            again.owned_partitions.iter().collect::<Vec<_>>(),
            owned.into_iter().collect::<Vec<_>>()
        );
        assert_eq!(again.user_data, s.user_data);
        assert_eq!(again.generation_id, s.generation_id);
        assert_eq!(again.rack_id, s.rack_id);
        assert_eq!(Subscription::decode(&again.encode()).as_ref(), Ok(&again));
    }
    if let Ok(a) = Assignment::decode(data) {
        let again = Assignment::decode(&a.encode()).expect("a re-encoded assignment decodes");
        let partitions: BTreeSet<_> = a.partitions.iter().collect();
        assert_eq!(
            again.partitions.iter().collect::<Vec<_>>(),
            partitions.into_iter().collect::<Vec<_>>()
        );
        assert_eq!(again.user_data, a.user_data);
        assert_eq!(Assignment::decode(&again.encode()).as_ref(), Ok(&again));
    }
});
