//! The size pre-check of every response body this crate decodes: a walk over the body that reads
//! each array count and each string and bytes length exactly where kafka-protocol 0.18.0's
//! decoder reads it, and fails when one claims more than the bytes left.
//!
//! kafka-protocol 0.18.0 reserves `count` elements before decoding an array, so a forged count
//! (2^32 elements in a 12-byte answer) aborts the process on the failed allocation. The walk runs
//! first and allocates nothing; when it passes, every count the decoder will read fits in the
//! frame (each element of these messages takes at least one byte).
//!
//! The layouts follow the Apache Kafka message schemas (`clients/src/main/resources/common/
//! message/*Response.json`) at the versions kafka-protocol 0.18.0 generates, with flexible
//! versions (compact lengths, tagged fields) as listed:
//!
//! | response | versions | flexible |
//! |---|---|---|
//! | ApiVersions | 0-4 | 3+ |
//! | SaslHandshake | 0-1 | none |
//! | SaslAuthenticate | 0-2 | 2+ |
//! | FindCoordinator | 0-6 | 3+ |
//! | Metadata | 0-13 | 9+ |
//! | JoinGroup | 0-9 | 6+ |
//! | SyncGroup | 0-5 | 4+ |
//! | Heartbeat | 0-4 | 4+ |
//! | LeaveGroup | 0-5 | 4+ |
//! | OffsetCommit | 2-10 | 8+ |
//! | OffsetFetch | 1-10 | 6+ |
//! | ConsumerGroupHeartbeat | 0-1 | 0+ |
//!
//! None of these carries record batches, so no record count is decoded.

use kafka_protocol::messages::ApiKey;

/// Why a body fails the walk.
type Walk = Result<(), String>;

/// The versions of `api` this module has a layout for; `None` for an API it does not know.
pub(super) fn known_versions(api: ApiKey) -> Option<(i16, i16)> {
    Some(match api {
        ApiKey::ApiVersions => (0, 4),
        ApiKey::SaslHandshake => (0, 1),
        ApiKey::SaslAuthenticate => (0, 2),
        ApiKey::FindCoordinator => (0, 6),
        ApiKey::Metadata => (0, 13),
        ApiKey::JoinGroup => (0, 9),
        ApiKey::SyncGroup => (0, 5),
        ApiKey::Heartbeat => (0, 4),
        ApiKey::LeaveGroup => (0, 5),
        ApiKey::OffsetCommit => (2, 10),
        ApiKey::OffsetFetch => (1, 10),
        ApiKey::ConsumerGroupHeartbeat => (0, 1),
        _ => return None,
    })
}

/// Walks the response body `body` (after the response header) of `api` at `version`. APIs
/// without a layout here pass unchecked; versions outside a known layout fail.
pub(super) fn check_sizes(api: ApiKey, version: i16, body: &[u8]) -> Walk {
    let Some((lo, hi)) = known_versions(api) else {
        return Ok(());
    };
    if !(lo..=hi).contains(&version) {
        return Err(format!("no size layout for {api:?} v{version}"));
    }
    let c = &mut Cursor { rest: body };
    let v = version;
    match api {
        ApiKey::ApiVersions => api_versions(c, v),
        ApiKey::SaslHandshake => {
            c.skip(2)?;
            c.array(false, |c| c.string(false))
        }
        ApiKey::SaslAuthenticate => {
            let flex = v >= 2;
            c.skip(2)?;
            c.string(flex)?;
            c.bytes(flex)?;
            c.skip_if(v >= 1, 8)?;
            c.tags(flex)
        }
        ApiKey::FindCoordinator => find_coordinator(c, v),
        ApiKey::Metadata => metadata(c, v),
        ApiKey::JoinGroup => join_group(c, v),
        ApiKey::SyncGroup => {
            let flex = v >= 4;
            c.skip_if(v >= 1, 4)?;
            c.skip(2)?;
            if v >= 5 {
                c.string(true)?;
                c.string(true)?;
            }
            c.bytes(flex)?;
            c.tags(flex)
        }
        ApiKey::Heartbeat => {
            c.skip_if(v >= 1, 4)?;
            c.skip(2)?;
            c.tags(v >= 4)
        }
        ApiKey::LeaveGroup => {
            let flex = v >= 4;
            c.skip_if(v >= 1, 4)?;
            c.skip(2)?;
            if v >= 3 {
                c.array(flex, |c| {
                    c.string(flex)?;
                    c.string(flex)?;
                    c.skip(2)?;
                    c.tags(flex)
                })?;
            }
            c.tags(flex)
        }
        ApiKey::OffsetCommit => offset_commit(c, v),
        ApiKey::OffsetFetch => offset_fetch(c, v),
        ApiKey::ConsumerGroupHeartbeat => consumer_group_heartbeat(c),
        _ => Ok(()),
    }
}

/// ApiVersionsResponse.json: ErrorCode, ApiKeys, ThrottleTimeMs (v1+), and in v3+ the tagged
/// SupportedFeatures (0), FinalizedFeaturesEpoch (1), FinalizedFeatures (2), ZkMigrationReady (3),
/// which kafka-protocol decodes in place, ignoring the tagged size.
fn api_versions(c: &mut Cursor, v: i16) -> Walk {
    let flex = v >= 3;
    c.skip(2)?;
    c.array(flex, |c| {
        c.skip(6)?;
        c.tags(flex)
    })?;
    c.skip_if(v >= 1, 4)?;
    if !flex {
        return Ok(());
    }
    let feature = |c: &mut Cursor| {
        c.string(true)?;
        c.skip(4)?;
        c.tags(true)
    };
    c.tags_with(|c, tag| match tag {
        0 | 2 => Some(c.array(true, feature)),
        1 => Some(c.skip(8)),
        3 => Some(c.skip(1)),
        _ => None,
    })
}

/// FindCoordinatorResponse.json: one coordinator in v0-3, `Coordinators` in v4+.
fn find_coordinator(c: &mut Cursor, v: i16) -> Walk {
    let flex = v >= 3;
    c.skip_if(v >= 1, 4)?;
    if v <= 3 {
        c.skip(2)?;
        if v >= 1 {
            c.string(flex)?;
        }
        c.skip(4)?;
        c.string(flex)?;
        c.skip(4)?;
    } else {
        c.array(true, |c| {
            c.string(true)?;
            c.skip(4)?;
            c.string(true)?;
            c.skip(6)?;
            c.string(true)?;
            c.tags(true)
        })?;
    }
    c.tags(flex)
}

/// MetadataResponse.json: Brokers, ClusterId, ControllerId, Topics (with Partitions and their
/// replica, ISR and offline replica id arrays), cluster operations (v8-10), ErrorCode (v13).
fn metadata(c: &mut Cursor, v: i16) -> Walk {
    let flex = v >= 9;
    c.skip_if(v >= 3, 4)?;
    c.array(flex, |c| {
        c.skip(4)?;
        c.string(flex)?;
        c.skip(4)?;
        if v >= 1 {
            c.string(flex)?;
        }
        c.tags(flex)
    })?;
    if v >= 2 {
        c.string(flex)?;
    }
    c.skip_if(v >= 1, 4)?;
    let ids = |c: &mut Cursor| c.array(flex, |c| c.skip(4));
    let partition = |c: &mut Cursor| {
        c.skip(10)?;
        c.skip_if(v >= 7, 4)?;
        ids(c)?;
        ids(c)?;
        if v >= 5 {
            ids(c)?;
        }
        c.tags(flex)
    };
    c.array(flex, |c| {
        c.skip(2)?;
        c.string(flex)?;
        c.skip_if(v >= 10, 16)?;
        c.skip_if(v >= 1, 1)?;
        c.array(flex, partition)?;
        c.skip_if(v >= 8, 4)?;
        c.tags(flex)
    })?;
    c.skip_if((8..=10).contains(&v), 4)?;
    c.skip_if(v >= 13, 2)?;
    c.tags(flex)
}

/// JoinGroupResponse.json: ProtocolType (v7+), ProtocolName, Leader, SkipAssignment (v9+),
/// MemberId, Members (with GroupInstanceId in v5+ and Metadata bytes).
fn join_group(c: &mut Cursor, v: i16) -> Walk {
    let flex = v >= 6;
    c.skip_if(v >= 2, 4)?;
    c.skip(6)?;
    if v >= 7 {
        c.string(true)?;
    }
    c.string(flex)?;
    c.string(flex)?;
    c.skip_if(v >= 9, 1)?;
    c.string(flex)?;
    c.array(flex, |c| {
        c.string(flex)?;
        if v >= 5 {
            c.string(flex)?;
        }
        c.bytes(flex)?;
        c.tags(flex)
    })?;
    c.tags(flex)
}

/// OffsetCommitResponse.json: Topics by name (v2-9) or topic id (v10), with Partitions.
fn offset_commit(c: &mut Cursor, v: i16) -> Walk {
    let flex = v >= 8;
    c.skip_if(v >= 3, 4)?;
    c.array(flex, |c| {
        topic_name_or_id(c, v, flex)?;
        c.array(flex, |c| {
            c.skip(6)?;
            c.tags(flex)
        })?;
        c.tags(flex)
    })?;
    c.tags(flex)
}

/// OffsetFetchResponse.json: Topics (v1-7) and ErrorCode (v2-7), or Groups (v8+) whose topics
/// are named (v8-9) or carry topic ids (v10).
fn offset_fetch(c: &mut Cursor, v: i16) -> Walk {
    let flex = v >= 6;
    c.skip_if(v >= 3, 4)?;
    if v <= 7 {
        c.array(flex, |c| {
            c.string(flex)?;
            c.array(flex, |c| {
                c.skip(12)?;
                c.skip_if(v >= 5, 4)?;
                c.string(flex)?;
                c.skip(2)?;
                c.tags(flex)
            })?;
            c.tags(flex)
        })?;
        c.skip_if(v >= 2, 2)?;
    } else {
        c.array(true, |c| {
            c.string(true)?;
            c.array(true, |c| {
                topic_name_or_id(c, v, true)?;
                c.array(true, |c| {
                    c.skip(16)?;
                    c.string(true)?;
                    c.skip(2)?;
                    c.tags(true)
                })?;
                c.tags(true)
            })?;
            c.skip(2)?;
            c.tags(true)
        })?;
    }
    c.tags(flex)
}

/// The topic name (up to v9) or topic id (v10) of OffsetCommit and OffsetFetch topics.
fn topic_name_or_id(c: &mut Cursor, v: i16, flex: bool) -> Walk {
    if v <= 9 { c.string(flex) } else { c.skip(16) }
}

/// ConsumerGroupHeartbeatResponse.json: ErrorMessage, MemberId, and a nullable Assignment of
/// topic ids with partition arrays.
fn consumer_group_heartbeat(c: &mut Cursor) -> Walk {
    c.skip(6)?;
    c.string(true)?;
    c.string(true)?;
    c.skip(8)?;
    // A nullable struct: an INT8 that is 1 when present (kafka-protocol's `OptionStruct`).
    if c.int(1)? == 1 {
        c.array(true, |c| {
            c.skip(16)?;
            c.array(true, |c| c.skip(4))?;
            c.tags(true)
        })?;
        c.tags(true)?;
    }
    c.tags(true)
}

/// The unread part of a body.
struct Cursor<'a> {
    rest: &'a [u8],
}

impl Cursor<'_> {
    fn skip(&mut self, n: usize) -> Walk {
        match self.rest.get(n..) {
            Some(rest) => {
                self.rest = rest;
                Ok(())
            }
            None => Err(format!("{n} bytes claimed, {} bytes left", self.rest.len())),
        }
    }

    fn skip_if(&mut self, present: bool, n: usize) -> Walk {
        if present { self.skip(n) } else { Ok(()) }
    }

    /// A big-endian signed integer of `n` (1, 2 or 4) bytes.
    fn int(&mut self, n: usize) -> Result<i64, String> {
        let bytes = self.rest.get(..n).ok_or("body cut short")?;
        self.rest = &self.rest[n..];
        let sign = if bytes[0] & 0x80 != 0 { -1i64 } else { 0 };
        Ok(bytes.iter().fold(sign, |acc, &b| (acc << 8) | i64::from(b)))
    }

    /// An unsigned varint as kafka-protocol reads it: at most five bytes, high bits dropped.
    fn uvarint(&mut self) -> Result<u32, String> {
        let mut value = 0u32;
        for i in 0..5 {
            let b = u32::from(*self.rest.first().ok_or("body cut short")?);
            self.rest = &self.rest[1..];
            value |= (b & 0x7f) << (i * 7);
            if b < 0x80 {
                break;
            }
        }
        Ok(value)
    }

    /// A length or count: an unsigned varint holding length + 1 when `flex` (0 for null), else
    /// a signed integer of `width` bytes (-1 for null). `None` for null.
    fn length(&mut self, flex: bool, width: usize, what: &str) -> Result<Option<u64>, String> {
        if flex {
            return Ok(self.uvarint()?.checked_sub(1).map(u64::from));
        }
        match self.int(width)? {
            -1 => Ok(None),
            n if n < 0 => Err(format!("{what} length is negative ({n})")),
            n => Ok(Some(n as u64)),
        }
    }

    fn fits(&self, n: u64, what: &str) -> Result<usize, String> {
        match usize::try_from(n) {
            Ok(n) if n <= self.rest.len() => Ok(n),
            _ => Err(format!(
                "forged size: {what} of {n} claimed with {} bytes left",
                self.rest.len()
            )),
        }
    }

    /// A STRING (INT16 length) or COMPACT_STRING, nullable or not.
    fn string(&mut self, flex: bool) -> Walk {
        self.sized(flex, 2, "string")
    }

    /// A BYTES (INT32 length) or COMPACT_BYTES, nullable or not.
    fn bytes(&mut self, flex: bool) -> Walk {
        self.sized(flex, 4, "bytes")
    }

    fn sized(&mut self, flex: bool, width: usize, what: &str) -> Walk {
        if let Some(n) = self.length(flex, width, what)? {
            let n = self.fits(n, what)?;
            self.skip(n)?;
        }
        Ok(())
    }

    /// An ARRAY (INT32 count) or COMPACT_ARRAY whose elements `element` walks.
    fn array(&mut self, flex: bool, mut element: impl FnMut(&mut Self) -> Walk) -> Walk {
        if let Some(n) = self.length(flex, 4, "array")? {
            for _ in 0..self.fits(n, "array")? {
                element(self)?;
            }
        }
        Ok(())
    }

    /// The tagged fields of a flexible version (none otherwise), all skipped by their size.
    fn tags(&mut self, flex: bool) -> Walk {
        if flex {
            self.tags_with(|_, _| None)
        } else {
            Ok(())
        }
    }

    /// Tagged fields: `known` walks the tags the decoder reads in place (ignoring their size)
    /// and returns `None` for the ones it skips by size.
    fn tags_with(&mut self, mut known: impl FnMut(&mut Self, u32) -> Option<Walk>) -> Walk {
        let count = self.uvarint()?;
        for _ in 0..count {
            let tag = self.uvarint()?;
            let size = self.uvarint()?;
            match known(self, tag) {
                Some(walk) => walk?,
                None => {
                    let size = self.fits(u64::from(size), "tagged field")?;
                    self.skip(size)?;
                }
            }
        }
        Ok(())
    }
}
