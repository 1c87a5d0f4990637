//! Runs a sans-IO [`Machine`] over a [`Transport`] on tokio: sends what the machine asks for,
//! feeds answers back with the current time, and sleeps until its next deadline.

use std::sync::Arc;
use std::time::Instant;

use tokio::sync::mpsc;

use crate::config::ClientConfig;
use crate::core::Machine;
use crate::core::backoff::ExponentialBackoff;
use crate::core::coordinator::{CoordinatorLookup, KeyState, LookupConfig};
use crate::core::io::{Broker, RequestId, Response};
use crate::error::{Error, TransportError};
use crate::transport::Transport;

/// Drives `machine` until `done` returns `Some`, and returns that value. Requests run
/// concurrently; answers are handed back in the order they arrive.
pub async fn run_until<M, T, R>(
    machine: &mut M,
    transport: &Arc<T>,
    mut done: impl FnMut(&mut M) -> Option<R>,
) -> R
where
    M: Machine,
    T: Transport,
{
    let (tx, mut rx) = mpsc::unbounded_channel::<(RequestId, Result<Response, TransportError>)>();
    loop {
        while let Some(out) = machine.poll_request() {
            let (transport, tx) = (transport.clone(), tx.clone());
            tracing::trace!(id = %out.id, target = %out.target, api = ?out.request.api_key(), "sending");
            tokio::spawn(async move {
                let result = transport.send(out.target, out.request, out.timeout).await;
                let _ = tx.send((out.id, result));
            });
        }
        if let Some(r) = done(machine) {
            return r;
        }
        let deadline = machine.poll_timeout();
        tokio::select! {
            Some((id, result)) = rx.recv() => machine.handle_response(id, result, Instant::now()),
            _ = sleep_until(deadline) => machine.handle_timeout(Instant::now()),
        }
    }
}

async fn sleep_until(deadline: Option<Instant>) {
    match deadline {
        Some(at) => tokio::time::sleep_until(at.into()).await,
        None => std::future::pending().await,
    }
}

/// Finds the coordinator of `group`, retrying retriable errors with the KIP-580 backoff until it
/// succeeds or fails for good.
pub async fn find_coordinator<T: Transport>(
    transport: &Arc<T>,
    config: &ClientConfig,
    group: &str,
) -> Result<Broker, Error> {
    let mut lookup = CoordinatorLookup::new(
        [group.to_owned()],
        LookupConfig {
            backoff: ExponentialBackoff::retry(config.retry_backoff, config.retry_backoff_max),
            request_timeout: config.request_timeout,
            seed: rand::random(),
        },
    );
    run_until(&mut lookup, transport, |l| match l.state(group) {
        Some(KeyState::Known(b)) => Some(Ok(b.clone())),
        Some(KeyState::Failed(e)) => Some(Err(Error::Group(e.clone()))),
        _ => None,
    })
    .await
}
