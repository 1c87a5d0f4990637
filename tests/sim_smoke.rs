#![cfg(feature = "sim")]
//! Smoke tests of the simulation: members reach Stable through the simulated coordinator.

use std::time::Duration;

use consumer_membership::config::GroupConfig;
use consumer_membership::sim::world::{SimConfig, World};

fn config(instance: Option<&str>) -> GroupConfig {
    let mut c = GroupConfig::new("g");
    c.instance_id = instance.map(String::from);
    c.session_timeout = Duration::from_secs(10);
    c.heartbeat_interval = Duration::from_secs(1);
    c.max_poll_interval = Duration::from_secs(20);
    c.request_timeout = Duration::from_secs(5);
    c
}

#[test]
fn three_members_reach_stable() {
    let mut w = World::new(SimConfig::new(1).with_topic("t", 6));
    let a = w.add_classic("a", config(Some("ia")), |_| {}).unwrap();
    let b = w.add_classic("b", config(None), |_| {}).unwrap();
    let c = w.add_classic("c", config(Some("ic")), |_| {}).unwrap();
    for h in [a, b, c] {
        w.subscribe(h, &["t"]);
    }
    let ok = w.run_until(|w| w.all_stable(), Duration::from_secs(60));
    w.run_for(Duration::from_secs(10));
    w.check(ok && w.all_stable(), "all stable");
    w.check(w.violations().is_empty(), format!("{:?}", w.violations()));
    let owned: usize = w.ownership().values().map(|v| v.len()).sum();
    w.check(
        owned == 6,
        format!("all partitions owned: {:?}", w.ownership()),
    );
    w.check(w.anomalies().is_empty(), format!("{:?}", w.anomalies()));
}
