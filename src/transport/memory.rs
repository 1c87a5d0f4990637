//! An in-process transport for tests and simulations. Each request is built at the version
//! negotiated with the configured broker versions, encoded, decoded as a broker would, handed to a
//! handler, and the handler's answer is encoded and decoded back: the same wire path as TCP,
//! without sockets.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use super::Transport;
use super::wire::{self, BrokerVersions};
use crate::error::TransportError;
use crate::request::{Request, RequestBody, Response, ResponseBody, Target};

/// Answers one decoded request: `(target, body, version)` to a response body or an error.
pub trait Handler: Send + 'static {
    /// Answers `body`, which was sent to `target` at `version`.
    fn handle(
        &mut self,
        target: &Target,
        body: RequestBody,
        version: i16,
    ) -> Result<ResponseBody, TransportError>;
}

/// A closure answering with a [`ResponseBody`] or anything that converts into one (a
/// kafka-protocol `ResponseKind`).
impl<F, R> Handler for F
where
    F: FnMut(&Target, RequestBody, i16) -> Result<R, TransportError> + Send + 'static,
    R: Into<ResponseBody>,
{
    fn handle(
        &mut self,
        target: &Target,
        body: RequestBody,
        version: i16,
    ) -> Result<ResponseBody, TransportError> {
        self(target, body, version).map(Into::into)
    }
}

/// A transport whose "broker" is a [`Handler`] in the same process.
#[derive(Clone)]
pub struct MemoryTransport {
    handler: Arc<Mutex<dyn Handler>>,
    versions: Arc<Mutex<BrokerVersions>>,
    sent: Arc<Mutex<Vec<(Target, RequestBody, i16)>>>,
}

impl std::fmt::Debug for MemoryTransport {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("MemoryTransport").finish_non_exhaustive()
    }
}

impl MemoryTransport {
    /// A transport answering with `handler`, as a broker serving every API and version this
    /// crate encodes ([`BrokerVersions::all`], the streams-group APIs included).
    pub fn new(handler: impl Handler) -> Self {
        Self {
            handler: Arc::new(Mutex::new(handler)),
            versions: Arc::new(Mutex::new(BrokerVersions::all())),
            sent: Arc::default(),
        }
    }

    /// Changes the versions the simulated broker advertises.
    pub fn set_versions(&self, versions: BrokerVersions) {
        *self.versions.lock().expect("lock") = versions;
    }

    /// Every request sent so far, as the broker decoded it, with its target and version.
    pub fn sent(&self) -> Vec<(Target, RequestBody, i16)> {
        self.sent.lock().expect("lock").clone()
    }

    fn exchange(&self, target: Target, request: Request) -> Result<Response, TransportError> {
        let versions = self.versions.lock().expect("lock").clone();
        let (api, version, body) = wire::build(&request, &versions)?;
        let frame = wire::encode_request(&body, api, version, 1, "memory")?;
        let (_, decoded) = wire::decode_request(frame.freeze().slice(4..))?;
        self.sent
            .lock()
            .expect("lock")
            .push((target.clone(), decoded.clone(), version));
        let answer = self
            .handler
            .lock()
            .expect("lock")
            .handle(&target, decoded, version)?;
        let frame = wire::encode_response(&answer, api, version, 1)?;
        wire::decode_response(frame.freeze().slice(4..), api, version)
    }
}

impl Transport for MemoryTransport {
    async fn send(
        &self,
        target: Target,
        request: Request,
        _timeout: Duration,
    ) -> Result<Response, TransportError> {
        self.exchange(target, request)
    }
}
