//! A static consumer-protocol member killed with SIGKILL and started again at once, on a real
//! broker with Kafka's default timings for the group (`consumer.session.timeout.ms` 45 s,
//! `consumer.heartbeat.interval.ms` 5 s, set on the group), beside a second static member of
//! ours:
//! - with its member id kept in a file (`--member-id-file`, [`MemberIdFile`]), the restarted
//!   process releases its crashed incarnation's registration itself (a -2 leave under the kept
//!   id) and owns its partitions again within a second, and the other member's assignment never
//!   moves;
//! - without it, the broker answers UNRELEASED_INSTANCE_ID until the crashed incarnation's
//!   session expires: the restarted process says so (`InstanceHeld`), does not stop, and owns
//!   partitions again within the session timeout plus a heartbeat interval and the retry
//!   backoff.
//!
//! The processes are the README's example consumer (examples/consumer.rs); the times are printed.
//!
//! [`MemberIdFile`]: consumer_membership::MemberIdFile

mod common;

use std::collections::BTreeSet;
use std::io::{BufRead, BufReader};
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use common::{TestMember, bootstrap, create_topic, transport, unique};
use consumer_membership::config::{GroupConfig, GroupProtocol};

/// Kafka's defaults for consumer groups (GroupCoordinatorConfig).
const SESSION: Duration = Duration::from_secs(45);
const HEARTBEAT: Duration = Duration::from_secs(5);

/// One process of the example, its stdout lines with the instant each arrived.
struct Proc {
    child: Child,
    started: Instant,
    lines: Arc<Mutex<Vec<(Instant, String)>>>,
}

impl Proc {
    fn spawn(bootstrap: &str, group: &str, topic: &str, member_id_file: Option<&Path>) -> Proc {
        let mut cmd = Command::new(common::example_binary("consumer"));
        cmd.args(["--bootstrap", bootstrap, "--group", group, "--topic", topic])
            .args(["--protocol", "consumer", "--instance-id", "a", "--quiet"])
            .stdout(Stdio::piped())
            .stdin(Stdio::null());
        if let Some(f) = member_id_file {
            cmd.arg("--member-id-file").arg(f);
        }
        let started = Instant::now();
        let mut child = cmd.spawn().expect("start the example consumer");
        let stdout = child.stdout.take().unwrap();
        let lines = Arc::new(Mutex::new(Vec::new()));
        let sink = lines.clone();
        std::thread::spawn(move || {
            for line in BufReader::new(stdout).lines() {
                let Ok(line) = line else { break };
                sink.lock().unwrap().push((Instant::now(), line));
            }
        });
        Proc {
            child,
            started,
            lines,
        }
    }

    /// When a line containing `needle` first arrived.
    fn seen(&self, needle: &str) -> Option<Instant> {
        let lines = self.lines.lock().unwrap();
        lines
            .iter()
            .find(|(_, l)| l.contains(needle))
            .map(|(t, _)| *t)
    }

    /// Waits up to `timeout` for a line containing `needle`; its arrival.
    async fn wait(&mut self, needle: &str, timeout: Duration) -> Instant {
        let deadline = Instant::now() + timeout;
        loop {
            if let Some(t) = self.seen(needle) {
                return t;
            }
            if let Ok(Some(status)) = self.child.try_wait() {
                panic!(
                    "the example exited ({status}) before {needle:?}:\n{}",
                    self.log()
                );
            }
            assert!(
                Instant::now() < deadline,
                "no {needle:?} within {timeout:?}:\n{}",
                self.log()
            );
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    }

    fn log(&self) -> String {
        let lines = self.lines.lock().unwrap();
        lines
            .iter()
            .map(|(t, l)| format!("  +{:?} {l}", t.duration_since(self.started)))
            .collect::<Vec<_>>()
            .join("\n")
    }

    /// SIGKILL, and wait until the process is gone.
    fn kill(&mut self) {
        self.child.kill().unwrap();
        self.child.wait().unwrap();
    }
}

impl Drop for Proc {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// The group with Kafka's default session and heartbeat (the test broker's are shorter).
fn default_timings(bootstrap: &str, group: &str) {
    common::streams_peer::set_group_config(
        bootstrap,
        group,
        &[
            (
                "consumer.session.timeout.ms",
                &SESSION.as_millis().to_string(),
            ),
            (
                "consumer.heartbeat.interval.ms",
                &HEARTBEAT.as_millis().to_string(),
            ),
        ],
    )
    .expect("set the group's session and heartbeat");
}

/// A's process on 2 of 4 partitions, B (in this process) on the other 2, both stable; then A is
/// killed and started again. Returns the restarted process, how long after its start it owned
/// 2 partitions again, B, and what B had seen before the kill.
async fn kill_and_restart(kept: bool) -> (Proc, Duration, TestMember, common::Seen) {
    let bootstrap = bootstrap().unwrap();
    let group = unique("crash-restart");
    let topic = unique("crash-restart");
    let (t, _) = transport(&bootstrap);
    create_topic(&*t, &topic, 4).await;
    default_timings(&bootstrap, &group);
    let dir = std::env::temp_dir().join(unique("crash-restart"));
    std::fs::create_dir_all(&dir).unwrap();
    let id_file = dir.join("a.id");
    let id_file = kept.then_some(id_file.as_path());

    let mut a = Proc::spawn(&bootstrap, &group, &topic, id_file);
    a.wait("owns 4 partitions", Duration::from_secs(60)).await;
    let config = GroupConfig::new(&group)
        .with_protocol(GroupProtocol::Consumer)
        .with_instance_id("b");
    let (tb, _) = transport(&bootstrap);
    let b = TestMember::start(tb, config, &[&topic]).await;
    b.wait_seen(Duration::from_secs(60), |s| s.owned.len() == 2)
        .await;
    // A gave 2 partitions to B: it owns 2, the group is settled.
    a.wait("revoked", Duration::from_secs(60)).await;
    tokio::time::sleep(HEARTBEAT + Duration::from_secs(1)).await;
    let before = b.seen();

    a.kill();
    let mut a = Proc::spawn(&bootstrap, &group, &topic, id_file);
    let back = a
        .wait(
            "owns 2 partitions",
            SESSION + HEARTBEAT + Duration::from_secs(15),
        )
        .await;
    let took = back.duration_since(a.started);
    println!(
        "kept id {kept}: the restarted process owned its 2 partitions {took:?} after its start\n{}",
        a.log()
    );
    if kept {
        assert!(
            a.seen("(kept from an earlier run)").is_some(),
            "{}",
            a.log()
        );
    }
    let after = b.seen();
    assert_eq!(after.fatal, None);
    println!(
        "B meanwhile: revoked {:?}, lost {}, ownership changes {}",
        &after.revoked[before.revoked.len()..],
        after.lost - before.lost,
        after.ownership_log.len() - before.ownership_log.len()
    );
    let _ = std::fs::remove_dir_all(&dir);
    (a, took, b, before)
}

#[cfg_attr(
    not(kafka_broker),
    ignore = "needs a Kafka broker: run it through tests/kafka/with-broker.sh"
)]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_killed_static_member_with_a_kept_id_is_back_within_a_second() {
    let (a, took, b, before) = kill_and_restart(true).await;
    assert!(
        a.seen("held by an earlier incarnation").is_none(),
        "no wait: {}",
        a.log()
    );
    // The restart costs two heartbeat round trips (the -2 leave, the join) and the process's
    // start; the broker keeps the static member's assignment across the -2 leave.
    assert!(
        took < Duration::from_secs(1),
        "back after {took:?}:\n{}",
        a.log()
    );
    // No rebalance at all: B's assignment never moved.
    let s = b.seen();
    assert_eq!(s.owned, before.owned, "B kept its partitions: {s:?}");
    assert_eq!(s.revoked, before.revoked, "B revoked nothing: {s:?}");
    assert_eq!(s.lost, 0, "{s:?}");
    assert_eq!(
        s.ownership_log
            .iter()
            .map(|(_, _, p)| p.clone())
            .collect::<BTreeSet<_>>()
            .len(),
        2,
        "B never held A's partitions: {s:?}"
    );
}

#[cfg_attr(
    not(kafka_broker),
    ignore = "needs a Kafka broker: run it through tests/kafka/with-broker.sh"
)]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_killed_static_member_without_a_kept_id_waits_for_the_old_session_and_is_back() {
    let (a, took, b, _) = kill_and_restart(false).await;
    assert!(
        a.seen("held by an earlier incarnation").is_some(),
        "the wait is reported: {}",
        a.log()
    );
    // The broker expires the crashed incarnation after the session timeout (from its last
    // heartbeat, up to one interval before the kill); the restarted member's retries are at most
    // retry.backoff.max.ms (1 s) apart.
    assert!(
        took <= SESSION + HEARTBEAT + Duration::from_secs(3),
        "back after {took:?}:\n{}",
        a.log()
    );
    assert!(
        took >= SESSION - HEARTBEAT - Duration::from_secs(1),
        "back after {took:?}, before the old session could expire:\n{}",
        a.log()
    );
    assert_eq!(b.seen().fatal, None);
}
