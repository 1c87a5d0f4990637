//! Against the real broker: the rebalance metrics of a classic group reach an installed `metrics`
//! recorder, and each state change of a member is logged exactly once as `from -> to (reason)`.
//!
//! The test binary installs, once, a `DebuggingRecorder` as the global `metrics` recorder and a
//! global `tracing` subscriber whose layer writes into a buffer (plus stderr when `RUST_LOG` is
//! set); the tests tell their data apart by group id.

mod common;

use std::collections::BTreeMap;
use std::io;
use std::sync::{Arc, Mutex, OnceLock};
use std::time::Duration;

use common::{TestMember, group_config, unique, wait_balanced};
use consumer_membership::driver::GroupMember;
use consumer_membership::machine::events::{CloseOptions, Event, MemberState};
use consumer_membership::metrics::{
    HEARTBEAT_RESPONSE_TIME_MS, REBALANCE_LATENCY_MS, REBALANCE_TOTAL, TIME_TO_FIRST_ASSIGNMENT_MS,
};
use metrics_util::debugging::{DebugValue, DebuggingRecorder, Snapshotter};
use tracing_subscriber::fmt::MakeWriter;
use tracing_subscriber::layer::SubscriberExt;
use tracing_subscriber::util::SubscriberInitExt;
use tracing_subscriber::{EnvFilter, Layer};

const T: Duration = Duration::from_secs(30);

// ------------------------------------------------------------------------ process-wide capture

/// Metric name and its labels, sorted.
type MetricKey = (String, Vec<(String, String)>);

/// Everything recorded so far (a snapshot of the `DebuggingRecorder` drains it, so each snapshot
/// is added here).
#[derive(Default)]
struct Recorded {
    counters: BTreeMap<MetricKey, u64>,
    histograms: BTreeMap<MetricKey, Vec<f64>>,
}

struct Globals {
    snapshotter: Snapshotter,
    recorded: Mutex<Recorded>,
    logs: Arc<Mutex<Vec<u8>>>,
}

/// Installs the recorder and the subscriber, before any member of this binary starts.
fn globals() -> &'static Globals {
    static GLOBALS: OnceLock<Globals> = OnceLock::new();
    GLOBALS.get_or_init(|| {
        let recorder = DebuggingRecorder::new();
        let snapshotter = recorder.snapshotter();
        recorder
            .install()
            .expect("no other metrics recorder in this test binary");
        consumer_membership::metrics::describe();

        let logs = Arc::new(Mutex::new(Vec::new()));
        let capture = tracing_subscriber::fmt::layer()
            .with_ansi(false)
            .with_writer(Capture(logs.clone()))
            .with_filter(EnvFilter::new("consumer_membership=info"));
        let stderr = std::env::var_os("RUST_LOG").map(|_| {
            tracing_subscriber::fmt::layer()
                .with_test_writer()
                .with_filter(EnvFilter::from_default_env())
        });
        tracing_subscriber::registry()
            .with(capture)
            .with(stderr)
            .try_init()
            .expect("no other tracing subscriber in this test binary");
        Globals {
            snapshotter,
            recorded: Mutex::new(Recorded::default()),
            logs,
        }
    })
}

/// A `MakeWriter` appending to a shared buffer (the fmt layer writes each event in one call).
#[derive(Clone)]
struct Capture(Arc<Mutex<Vec<u8>>>);

impl io::Write for Capture {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        self.0.lock().unwrap().extend_from_slice(buf);
        Ok(buf.len())
    }
    fn flush(&mut self) -> io::Result<()> {
        Ok(())
    }
}

impl<'a> MakeWriter<'a> for Capture {
    type Writer = Capture;
    fn make_writer(&'a self) -> Capture {
        self.clone()
    }
}

impl Globals {
    /// Takes a snapshot, adds it to what was recorded before, and returns the counters and
    /// histograms of `group` (labels other than `group` kept in the key).
    fn metrics_of(&self, group: &str) -> Recorded {
        let mut recorded = self.recorded.lock().unwrap();
        for (key, _, _, value) in self.snapshotter.snapshot().into_vec() {
            let mut labels: Vec<(String, String)> = key
                .key()
                .labels()
                .map(|l| (l.key().to_owned(), l.value().to_owned()))
                .collect();
            labels.sort();
            let k = (key.key().name().to_owned(), labels);
            match value {
                DebugValue::Counter(n) => *recorded.counters.entry(k).or_default() += n,
                DebugValue::Histogram(v) => recorded
                    .histograms
                    .entry(k)
                    .or_default()
                    .extend(v.iter().map(|f| f.into_inner())),
                DebugValue::Gauge(_) => {}
            }
        }
        let ours = |(name, labels): &MetricKey| {
            labels
                .iter()
                .any(|(k, v)| k == "group" && v == group)
                .then(|| {
                    let rest = labels.iter().filter(|(k, _)| k != "group").cloned();
                    (name.clone(), rest.collect())
                })
        };
        Recorded {
            counters: recorded
                .counters
                .iter()
                .filter_map(|(k, v)| Some((ours(k)?, *v)))
                .collect(),
            histograms: recorded
                .histograms
                .iter()
                .filter_map(|(k, v)| Some((ours(k)?, v.clone())))
                .collect(),
        }
    }

    fn log_lines(&self) -> Vec<String> {
        String::from_utf8_lossy(&self.logs.lock().unwrap())
            .lines()
            .map(String::from)
            .collect()
    }
}

impl Recorded {
    fn counter(&self, name: &str) -> u64 {
        let all = self.counters.iter().filter(|((n, _), _)| n == name);
        all.map(|(_, v)| v).sum()
    }

    fn samples(&self, name: &str) -> Vec<f64> {
        let all = self.histograms.iter().filter(|((n, _), _)| n == name);
        all.flat_map(|(_, v)| v.iter().copied()).collect()
    }
}

// ------------------------------------------------------------------------ tests

#[cfg_attr(
    not(kafka_broker),
    ignore = "needs a Kafka broker: run it through tests/kafka/with-broker.sh"
)]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rebalance_metrics_of_two_classic_members() {
    let globals = globals();
    let Some(b) = common::bootstrap() else { return };
    let (t, _) = common::transport(&b);
    let topic = unique("metrics");
    common::create_topic(&*t, &topic, 4).await;
    let group = unique("metrics");
    let a = TestMember::start(
        common::transport(&b).0,
        group_config(&group, None),
        &[&topic],
    )
    .await;
    let a2 = TestMember::start(
        common::transport(&b).0,
        group_config(&group, None),
        &[&topic],
    )
    .await;
    wait_balanced(&[&a, &a2], 4, T).await;

    // The member tasks record as they handle events and answers; heartbeats (every 500 ms)
    // follow the balance.
    let deadline = tokio::time::Instant::now() + T;
    let m = loop {
        let m = globals.metrics_of(&group);
        if m.counter(REBALANCE_TOTAL) >= 2
            && m.samples(TIME_TO_FIRST_ASSIGNMENT_MS).len() == 2
            && !m.samples(HEARTBEAT_RESPONSE_TIME_MS).is_empty()
        {
            break m;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "metrics of group {group} not recorded within {T:?}: counters {:?}, histograms {:?}",
            m.counters,
            m.histograms
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    };
    println!(
        "group {group}: counters {:?}, histograms {:?}",
        m.counters, m.histograms
    );
    // Each member's first join at least, the protocol label says classic.
    assert!(m.counter(REBALANCE_TOTAL) >= 2);
    assert!(
        m.counters
            .keys()
            .any(|(n, l)| n == REBALANCE_TOTAL && l == &[("protocol".into(), "classic".into())]),
        "{:?}",
        m.counters
    );
    // Every successful rebalance is timed.
    let latencies = m.samples(REBALANCE_LATENCY_MS);
    assert_eq!(latencies.len() as u64, m.counter(REBALANCE_TOTAL));
    assert!(
        latencies
            .iter()
            .all(|ms| (0.0..T.as_millis() as f64).contains(ms)),
        "{latencies:?}"
    );
    assert!(
        m.samples(TIME_TO_FIRST_ASSIGNMENT_MS)
            .iter()
            .all(|ms| *ms > 0.0)
    );
    assert!(
        m.samples(HEARTBEAT_RESPONSE_TIME_MS)
            .iter()
            .all(|ms| *ms >= 0.0)
    );

    a.handle.close(CloseOptions::Default).await;
    a2.handle.close(CloseOptions::Default).await;
}

#[cfg_attr(
    not(kafka_broker),
    ignore = "needs a Kafka broker: run it through tests/kafka/with-broker.sh"
)]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn each_state_change_is_logged_exactly_once() {
    let globals = globals();
    let Some(b) = common::bootstrap() else { return };
    let (t, _) = common::transport(&b);
    let topic = unique("logs");
    common::create_topic(&*t, &topic, 2).await;
    let group = unique("logs");

    let mut member =
        GroupMember::start(common::transport(&b).0, group_config(&group, None)).expect("valid");
    member.subscribe([topic.clone()]).await.expect("subscribe");
    let mut reported: Vec<String> = Vec::new();
    let mut closing = false;
    let deadline = tokio::time::Instant::now() + T;
    // Join until stable, then close (leave) and read every event until the member's task ends.
    while let Some(event) = tokio::time::timeout_at(deadline, member.next_event())
        .await
        .unwrap_or_else(|_| panic!("not stable and closed within {T:?}: saw {reported:#?}"))
    {
        match event {
            Event::StateChanged {
                from, to, reason, ..
            } => {
                reported.push(format!("{from} -> {to} ({reason})"));
                if to == MemberState::Stable && !closing {
                    closing = true;
                    member.close(CloseOptions::LeaveGroup).await;
                }
            }
            Event::Revoking { ticket, .. } => {
                member.complete_revocation(ticket).await.expect("ticket");
            }
            Event::Fatal(e) => panic!("member stopped: {e}"),
            _ => {}
        }
    }
    assert!(closing, "never stable: {reported:#?}");
    assert!(
        reported.iter().any(|t| t.contains(" -> Stable (")),
        "{reported:#?}"
    );

    // The member's task has ended: everything it logged is in the buffer.
    let ours: Vec<String> = globals
        .log_lines()
        .into_iter()
        .filter(|l| l.contains(&format!("group={group}")) && l.contains(" -> "))
        .collect();
    let mut want: BTreeMap<&str, usize> = BTreeMap::new();
    for t in &reported {
        *want.entry(t.as_str()).or_default() += 1;
    }
    for (transition, times) in &want {
        let logged = ours.iter().filter(|l| l.contains(transition)).count();
        assert_eq!(
            logged,
            *times,
            "{transition:?} reported {times} time(s) but logged {logged} time(s):\n{}",
            ours.join("\n")
        );
    }
    assert_eq!(
        ours.len(),
        reported.len(),
        "transition lines logged vs reported:\n{}\n---\n{reported:#?}",
        ours.join("\n")
    );
    println!(
        "{} transitions, each logged once:\n{}",
        reported.len(),
        ours.join("\n")
    );
}
