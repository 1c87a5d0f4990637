//! What several group members held over time, merged: the check that no partition (no active
//! task) was held by two of them at once, as their applications saw it.

use std::collections::{BTreeMap, BTreeSet};
use std::fmt::Display;
use std::time::Instant;

/// One change of what a member's application holds: when, held (or released), what.
pub type Change<K> = (Instant, bool, K);

/// Every instant at which one item was held by two members at once, from each member's log of
/// changes (`logs[i]` is member i's). Releases go before acquisitions at one instant.
pub fn double_ownership<K: Ord + Clone + Display>(logs: &[&[Change<K>]]) -> Vec<String> {
    let mut merged: Vec<(Instant, bool, usize, &K)> = logs
        .iter()
        .enumerate()
        .flat_map(|(who, log)| log.iter().map(move |(at, held, k)| (*at, *held, who, k)))
        .collect();
    merged.sort_by_key(|(at, held, who, _)| (*at, *held, *who));
    let mut holders: BTreeMap<&K, BTreeSet<usize>> = BTreeMap::new();
    let mut found = Vec::new();
    for (at, held, who, k) in merged {
        let set = holders.entry(k).or_default();
        if held {
            set.insert(who);
            if set.len() > 1 {
                found.push(format!("{k} held by members {set:?} at {at:?}"));
            }
        } else {
            set.remove(&who);
        }
    }
    found
}
