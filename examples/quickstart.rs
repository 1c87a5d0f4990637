//! The join loop of the crate's front page as a program, without a record client: joins a
//! group, reads the committed offsets of what it is assigned, commits before handing a
//! revocation back (and hands it back when that commit failed), and closes.
//!
//! ```text
//! cargo run --example quickstart -- 127.0.0.1:9092 my-group my-topic [classic|consumer] [seconds]
//! ```
//!
//! It uses only the crate's root API; tests/quickstart.rs runs two of them against a real broker.

use std::collections::BTreeMap;
use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use consumer_membership::{
    ClientConfig, CloseOptions, CloseOutcome, CommitOffset, Error, Event, GroupConfig, GroupMember,
    GroupProtocol, TcpTransport, TopicPartition,
};

/// The next offset to read of each owned partition that has one: its committed offset (this
/// program reads no records, so it never moves).
type Positions = BTreeMap<TopicPartition, i64>;

/// What a run did.
#[derive(Debug, Default)]
#[allow(dead_code)] // read by tests/quickstart.rs
pub struct Report {
    /// Partitions ever assigned.
    pub assigned: Vec<TopicPartition>,
    /// Commits that succeeded.
    pub commits: usize,
    /// Revocations handed back after their commit.
    pub revocations: usize,
    /// What `close` said.
    pub close: Option<CloseOutcome>,
    /// The last event drained after `close`.
    pub last_event: Option<Event>,
}

fn offsets(positions: &Positions, partitions: &[TopicPartition]) -> Vec<CommitOffset> {
    let at = |tp: &TopicPartition| positions.get(tp).map(|&offset| (tp.clone(), offset));
    let commit = |(partition, offset)| CommitOffset {
        partition,
        offset,
        metadata: None,
    };
    partitions.iter().filter_map(at).map(commit).collect()
}

/// Runs one member until `stop` completes; `seen` sees every event first.
pub async fn run(
    bootstrap: &str,
    group: &str,
    topic: &str,
    protocol: GroupProtocol,
    stop: impl Future<Output = ()>,
    mut seen: impl FnMut(&Event),
) -> Result<Report, Error> {
    let client = ClientConfig::new(bootstrap)?;
    let config = GroupConfig::new(group).with_protocol(protocol);
    let mut member = GroupMember::start(Arc::new(TcpTransport::new(client)), config)?;
    member.subscribe([topic.to_string()]).await?;
    let mut report = Report::default();
    let mut positions = Positions::new();
    tokio::pin!(stop);
    loop {
        tokio::select! {
            event = member.next_event() => {
                let Some(event) = event else { return Ok(report) };
                seen(&event);
                match event {
                    Event::Assigned { added, .. } => {
                        report.assigned.extend(added.iter().cloned());
                        // A partition with no commit comes back with `offset: None`. A program
                        // that reads records starts it where auto.offset.reset says (the front
                        // page's `Records::log_offset`); this one reads none, so it has no
                        // position there, and nothing to commit for it.
                        for (tp, c) in member.committed(added).await? {
                            if let Some(offset) = c.offset {
                                positions.insert(tp, offset);
                            }
                        }
                    }
                    Event::Revoking { partitions, ticket } => {
                        // Nothing to stop here (no records are processed): commit, then hand
                        // the ticket back even if the commit failed (see `Event::Revoking`).
                        match member.commit(offsets(&positions, &partitions)).await {
                            Ok(()) => report.commits += 1,
                            Err(error) => eprintln!("revocation commit: {error}"),
                        }
                        positions.retain(|tp, _| !partitions.contains(tp));
                        member.complete_revocation(ticket).await?;
                        report.revocations += 1;
                    }
                    Event::Lost { partitions, .. } => {
                        positions.retain(|tp, _| !partitions.contains(tp));
                    }
                    Event::Fatal(error) => return Err(error.into()),
                    _ => {}
                }
            }
            _ = &mut stop => break,
        }
    }
    let owned: Vec<TopicPartition> = positions.keys().cloned().collect();
    // A commit can be refused while a rebalance is under way (CommitError::RebalanceInProgress):
    // closing anyway is right, the next owner starts from the last commit that went through.
    match member.commit(offsets(&positions, &owned)).await {
        Ok(()) => report.commits += 1,
        Err(error) => eprintln!("final commit: {error}"),
    }
    report.close = Some(member.close(CloseOptions::Default).await);
    while let Some(event) = member.next_event().await {
        seen(&event);
        report.last_event = Some(event);
    }
    Ok(report)
}

#[allow(dead_code)] // tests/quickstart.rs includes this file for `run`
#[tokio::main]
async fn main() -> Result<(), Error> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let arg = |i: usize, default: &str| args.get(i).cloned().unwrap_or_else(|| default.into());
    let protocol = match arg(3, "consumer").as_str() {
        "classic" => GroupProtocol::Classic,
        _ => GroupProtocol::Consumer,
    };
    let seconds: u64 = arg(4, "30").parse().unwrap_or(30);
    let stop = tokio::time::sleep(Duration::from_secs(seconds));
    let report = run(
        &arg(0, "127.0.0.1:9092"),
        &arg(1, "quickstart"),
        &arg(2, "quickstart"),
        protocol,
        stop,
        |event| println!("{event:?}"),
    )
    .await?;
    println!("{report:?}");
    Ok(())
}
