//! Configuration from the Java client's property names: a `BTreeMap` of `key -> value`, or a Java
//! `.properties` file.
//!
//! ```
//! use std::collections::BTreeMap;
//! use consumer_membership_core::properties::from_properties;
//!
//! let props: BTreeMap<String, String> = [
//!     ("bootstrap.servers", "kafka-1:9092,kafka-2:9092"),
//!     ("group.id", "orders"),
//!     ("group.instance.id", "orders-worker-1"),
//!     ("partition.assignment.strategy", "org.apache.kafka.clients.consumer.CooperativeStickyAssignor"),
//! ]
//! .into_iter()
//! .map(|(k, v)| (k.to_string(), v.to_string()))
//! .collect();
//! let (client, group) = from_properties(&props)?;
//! assert_eq!(client.bootstrap_servers.len(), 2);
//! assert_eq!(group.assignor_names(), ["cooperative-sticky"]);
//! # Ok::<(), consumer_membership_core::ConfigError>(())
//! ```
//!
//! The keys are those of [`KEYS`]; any other key is an error naming it (this crate covers group
//! membership only, so fetch or deserializer settings of a full consumer config are refused rather
//! than silently ignored; [`split_properties`] separates them first when one file configures
//! both halves of a consumer). Values are trimmed, as Java's `ConfigDef` does.
//!
//! Checks follow the Java client (`ConsumerConfig`, `CommonClientConfigs`):
//! - `group.id` and `bootstrap.servers` are required;
//! - with `group.protocol=consumer`, setting `session.timeout.ms`, `heartbeat.interval.ms` or
//!   `partition.assignment.strategy` is an error (`CONSUMER_PROTOCOL_UNSUPPORTED_CONFIGS`); with
//!   `classic`, setting `group.remote.assignor` is; `auto` (this crate's extension, which may fall
//!   back to classic) accepts both;
//! - `heartbeat.interval.ms` must be below `session.timeout.ms`;
//! - the SASL protocols need `sasl.mechanism`, `sasl.username` and `sasl.password`;
//!   `ssl.certificate.location` and `ssl.key.location` come together;
//! - `reconnect.backoff.ms` set without `reconnect.backoff.max.ms` turns the exponential backoff
//!   off (the max becomes the base), as Java's `postProcessReconnectBackoffConfigs` does.
//!
//! Where this is stricter than Java, on purpose:
//! - every `*.ms` value must be between 1 and `i32::MAX` (Java allows 0 for the backoffs, which
//!   would make a busy retry loop);
//! - `retry.backoff.ms` above `retry.backoff.max.ms` is an error (Java warns and uses the max);
//! - `sasl.*` settings with a protocol that does not use SASL, and `ssl.*.location` settings with
//!   one that does not use TLS, are errors: a forgotten `security.protocol` would otherwise connect
//!   without the authentication or encryption the file asks for (the same rule as the builder's,
//!   [`SecurityConfig::validate`](crate::config::SecurityConfig::validate)).
//!
//! Last, the configs' own [`ClientConfig::validate`] and [`GroupConfig::validate`] run.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use crate::assignor::{self, Assignor};
use crate::config::{
    ClientConfig, GroupConfig, GroupProtocol, OffsetReset, SaslMechanism, Secret, SecurityProtocol,
};
use crate::error::ConfigError;
use crate::machine::share::{AckMode, ShareFetchSettings};

/// Every key [`from_properties`] understands.
pub const KEYS: &[&str] = &[
    "bootstrap.servers",
    "client.id",
    "client.rack",
    "connections.max.idle.ms",
    "default.api.timeout.ms",
    "group.id",
    "group.instance.id",
    "group.protocol",
    "group.remote.assignor",
    "heartbeat.interval.ms",
    "max.poll.interval.ms",
    "metadata.max.age.ms",
    "partition.assignment.strategy",
    "reconnect.backoff.max.ms",
    "reconnect.backoff.ms",
    "request.timeout.ms",
    "retry.backoff.max.ms",
    "retry.backoff.ms",
    "sasl.mechanism",
    "sasl.password",
    "sasl.username",
    "security.protocol",
    "session.timeout.ms",
    "socket.connection.setup.timeout.ms",
    "ssl.ca.location",
    "ssl.certificate.location",
    "ssl.endpoint.identification.algorithm",
    "ssl.key.location",
];

/// [`ConfigError::key`] of a key that is not in [`KEYS`] (the key itself is named in the rule,
/// because `ConfigError::key` only holds static names).
pub const UNKNOWN_KEY: &str = "(unknown key)";

/// [`ConfigError::key`] of an error reading or parsing a `.properties` file.
pub const PROPERTIES_FILE: &str = "(properties file)";

/// The configs Java's `ConsumerConfig` refuses with `group.protocol=consumer`
/// (`CONSUMER_PROTOCOL_UNSUPPORTED_CONFIGS`).
const CONSUMER_PROTOCOL_UNSUPPORTED: &[&str] = &[
    "partition.assignment.strategy",
    "heartbeat.interval.ms",
    "session.timeout.ms",
];

/// Java's assignor class names and the protocol names this crate knows them by.
const JAVA_ASSIGNORS: &[(&str, &str)] = &[
    ("org.apache.kafka.clients.consumer.RangeAssignor", "range"),
    (
        "org.apache.kafka.clients.consumer.RoundRobinAssignor",
        "roundrobin",
    ),
    (
        "org.apache.kafka.clients.consumer.CooperativeStickyAssignor",
        "cooperative-sticky",
    ),
];

/// Splits a whole consumer's properties into the keys [`from_properties`] reads ([`KEYS`]) and
/// the rest, which belong to the client that fetches the records (`auto.offset.reset`,
/// `fetch.max.bytes`, ...), so one file can configure both halves of a consumer without
/// [`from_properties`] refusing the data plane's keys.
///
/// ```
/// use std::collections::BTreeMap;
/// use consumer_membership_core::properties::{from_properties, split_properties};
///
/// let props: BTreeMap<String, String> = [
///     ("bootstrap.servers", "kafka-1:9092"),
///     ("group.id", "orders"),
///     ("auto.offset.reset", "earliest"),
/// ]
/// .into_iter()
/// .map(|(k, v)| (k.to_string(), v.to_string()))
/// .collect();
/// let (membership, data_plane) = split_properties(props);
/// let (client, group) = from_properties(&membership)?;
/// assert_eq!(data_plane["auto.offset.reset"], "earliest");
/// # Ok::<(), consumer_membership_core::ConfigError>(())
/// ```
pub fn split_properties(
    mut props: BTreeMap<String, String>,
) -> (BTreeMap<String, String>, BTreeMap<String, String>) {
    let ours = KEYS
        .iter()
        .filter_map(|key| props.remove_entry(*key))
        .collect();
    (ours, props)
}

/// `auto.offset.reset` of the data-plane half of [`split_properties`] (Kafka's default,
/// [`OffsetReset::Latest`], when absent): where a partition without a committed offset starts.
///
/// ```
/// use std::collections::BTreeMap;
/// use consumer_membership_core::config::OffsetReset;
/// use consumer_membership_core::properties::offset_reset;
///
/// let data_plane = BTreeMap::from([("auto.offset.reset".to_string(), "earliest".to_string())]);
/// assert_eq!(offset_reset(&data_plane)?, OffsetReset::Earliest);
/// assert_eq!(offset_reset(&BTreeMap::new())?, OffsetReset::Latest);
/// # Ok::<(), consumer_membership_core::ConfigError>(())
/// ```
pub fn offset_reset(props: &BTreeMap<String, String>) -> Result<OffsetReset, ConfigError> {
    props
        .get("auto.offset.reset")
        .map_or(Ok(OffsetReset::default()), |value| value.parse())
}

/// The share consumer's settings (KIP-932) from the data-plane half of [`split_properties`]:
/// `share.acknowledgement.mode` (`explicit`, the default, or `implicit`), `fetch.max.wait.ms`,
/// `fetch.min.bytes`, `fetch.max.bytes`, `max.poll.records` (also the acquisition batch size,
/// as the Java share consumer sends it), `retry.backoff.ms` and `retry.backoff.max.ms` taken
/// from `group` (the membership half). Other keys are left to the caller; a bad value is an
/// error naming its key.
///
/// ```
/// use std::collections::BTreeMap;
/// use consumer_membership_core::config::GroupConfig;
/// use consumer_membership_core::machine::share::AckMode;
/// use consumer_membership_core::properties::share_settings;
///
/// let data_plane = BTreeMap::from([
///     ("share.acknowledgement.mode".to_string(), "implicit".to_string()),
///     ("max.poll.records".to_string(), "100".to_string()),
/// ]);
/// let (fetch, mode) = share_settings(&data_plane, &GroupConfig::new("jobs"))?;
/// assert_eq!((fetch.max_records, fetch.batch_size, mode), (100, 100, AckMode::Implicit));
/// # Ok::<(), consumer_membership_core::ConfigError>(())
/// ```
pub fn share_settings(
    props: &BTreeMap<String, String>,
    group: &GroupConfig,
) -> Result<(ShareFetchSettings, AckMode), ConfigError> {
    let p = Props(props);
    let mode = match p.get("share.acknowledgement.mode") {
        None | Some("explicit") => AckMode::Explicit,
        Some("implicit") => AckMode::Implicit,
        Some(other) => {
            return Err(err(
                "share.acknowledgement.mode",
                format!("{other:?} is neither \"explicit\" nor \"implicit\""),
            ));
        }
    };
    let mut fetch = ShareFetchSettings {
        retry_backoff: group.retry_backoff,
        retry_backoff_max: group.retry_backoff_max,
        ..ShareFetchSettings::default()
    };
    if let Some(wait) = p.ms("fetch.max.wait.ms")? {
        fetch.max_wait = wait;
    }
    if let Some(n) = p.count("fetch.min.bytes", 1)? {
        fetch.min_bytes = n;
    }
    if let Some(n) = p.count("fetch.max.bytes", 1)? {
        fetch.max_bytes = n;
    }
    if let Some(n) = p.count("max.poll.records", 1)? {
        fetch.max_records = n;
        fetch.batch_size = n;
    }
    Ok((fetch, mode))
}

/// Builds the transport's and the member's configs from Kafka's property names (see the module
/// docs for the keys and the checks).
pub fn from_properties(
    props: &BTreeMap<String, String>,
) -> Result<(ClientConfig, GroupConfig), ConfigError> {
    for key in props.keys() {
        if !KEYS.contains(&key.as_str()) {
            return Err(unknown_key(key));
        }
    }
    let p = Props(props);

    let Some(bootstrap) = p.get("bootstrap.servers") else {
        return Err(err("bootstrap.servers", "is required"));
    };
    let Some(group_id) = p.get("group.id") else {
        return Err(err("group.id", "is required"));
    };
    let mut client = ClientConfig {
        bootstrap_servers: list(bootstrap),
        ..ClientConfig::default()
    };
    let mut group = GroupConfig::new(group_id);

    // Group membership.
    if let Some(v) = p.get("group.instance.id") {
        group.instance_id = Some(v.to_owned());
    }
    if let Some(v) = p.get("group.protocol") {
        group.protocol = match v.to_ascii_lowercase().as_str() {
            "classic" => GroupProtocol::Classic,
            "consumer" => GroupProtocol::Consumer,
            "auto" => GroupProtocol::Auto,
            _ => {
                return Err(err(
                    "group.protocol",
                    format!("{v:?} is not one of classic, consumer, auto"),
                ));
            }
        };
    }
    if let Some(v) = p.get("group.remote.assignor") {
        group.remote_assignor = Some(v.to_owned());
    }
    if let Some(v) = p.get("partition.assignment.strategy") {
        group.assignors = assignors(v)?;
    }
    if let Some(d) = p.ms("session.timeout.ms")? {
        group.session_timeout = d;
    }
    if let Some(d) = p.ms("heartbeat.interval.ms")? {
        group.heartbeat_interval = d;
    }
    if let Some(d) = p.ms("max.poll.interval.ms")? {
        group.max_poll_interval = d;
    }
    if let Some(d) = p.ms("metadata.max.age.ms")? {
        group.metadata_max_age = d;
    }
    if let Some(d) = p.ms("default.api.timeout.ms")? {
        client.default_api_timeout = d;
        group.default_api_timeout = d;
    }

    // Shared by the transport and the member.
    if let Some(d) = p.ms("request.timeout.ms")? {
        client.request_timeout = d;
        group.request_timeout = d;
    }
    let retry_backoff = p.ms("retry.backoff.ms")?;
    let retry_backoff_max = p.ms("retry.backoff.max.ms")?;
    if let Some(d) = retry_backoff {
        client.retry_backoff = d;
        group.retry_backoff = d;
    }
    if let Some(d) = retry_backoff_max {
        client.retry_backoff_max = d;
        group.retry_backoff_max = d;
    }
    let reconnect_backoff = p.ms("reconnect.backoff.ms")?;
    let reconnect_backoff_max = p.ms("reconnect.backoff.max.ms")?;
    if let Some(d) = reconnect_backoff {
        client.reconnect_backoff = d;
        // Java's postProcessReconnectBackoffConfigs: no exponential backoff then.
        if reconnect_backoff_max.is_none() {
            client.reconnect_backoff_max = d;
        }
    }
    if let Some(d) = reconnect_backoff_max {
        client.reconnect_backoff_max = d;
    }
    if let Some(d) = p.ms("socket.connection.setup.timeout.ms")? {
        client.socket_connection_setup_timeout = d;
    }
    if let Some(d) = p.ms("connections.max.idle.ms")? {
        client.connections_max_idle = d;
    }
    if let Some(v) = p.get("client.id") {
        client.client_id = v.to_owned();
    }
    if let Some(v) = p.get("client.rack") {
        // Java's default is "", meaning no rack.
        let rack = (!v.is_empty()).then(|| v.to_owned());
        client.client_rack = rack.clone();
        group.rack_id = rack;
    }

    // Security.
    let security = &mut client.security;
    if let Some(v) = p.get("security.protocol") {
        security.protocol = match v.to_ascii_uppercase().as_str() {
            "PLAINTEXT" => SecurityProtocol::Plaintext,
            "SSL" => SecurityProtocol::Ssl,
            "SASL_PLAINTEXT" => SecurityProtocol::SaslPlaintext,
            "SASL_SSL" => SecurityProtocol::SaslSsl,
            _ => {
                return Err(err(
                    "security.protocol",
                    format!("{v:?} is not one of PLAINTEXT, SSL, SASL_PLAINTEXT, SASL_SSL"),
                ));
            }
        };
    }
    if let Some(v) = p.get("sasl.mechanism") {
        security.sasl_mechanism = Some(match v.to_ascii_uppercase().as_str() {
            "PLAIN" => SaslMechanism::Plain,
            "SCRAM-SHA-256" => SaslMechanism::ScramSha256,
            "SCRAM-SHA-512" => SaslMechanism::ScramSha512,
            _ => {
                return Err(err(
                    "sasl.mechanism",
                    format!("{v:?} is not one of PLAIN, SCRAM-SHA-256, SCRAM-SHA-512"),
                ));
            }
        });
    }
    if let Some(v) = p.get("sasl.username") {
        if v.is_empty() {
            return Err(err("sasl.username", "must not be empty"));
        }
        security.sasl_username = Some(v.to_owned());
    }
    if let Some(v) = p.get("sasl.password") {
        // Never echo the value.
        if v.is_empty() {
            return Err(err("sasl.password", "must not be empty"));
        }
        security.sasl_password = Some(Secret::new(v));
    }
    security.ssl_ca_location = p.path("ssl.ca.location")?;
    security.ssl_certificate_location = p.path("ssl.certificate.location")?;
    security.ssl_key_location = p.path("ssl.key.location")?;
    if let Some(v) = p.get("ssl.endpoint.identification.algorithm") {
        security.ssl_verify_hostname = match v.to_ascii_lowercase().as_str() {
            "https" => true,
            "" => false,
            _ => {
                return Err(err(
                    "ssl.endpoint.identification.algorithm",
                    format!("{v:?} is not \"https\" or empty"),
                ));
            }
        };
    }

    cross_check(&p, &client, &group, retry_backoff_max.is_some())?;
    client.validate()?;
    group.validate()?;
    Ok((client, group))
}

/// Reads a Java `.properties` file (see [`parse_properties`]) and builds the configs with
/// [`from_properties`].
pub fn from_properties_file(path: &Path) -> Result<(ClientConfig, GroupConfig), ConfigError> {
    let bytes = std::fs::read(path).map_err(|e| {
        err(
            PROPERTIES_FILE,
            format!("cannot read {}: {e}", path.display()),
        )
    })?;
    // Java's Properties.load(InputStream), which Kafka's tools use, reads ISO-8859-1; UTF-8 is
    // read as UTF-8, anything else byte by byte as Latin-1.
    let text = String::from_utf8(bytes)
        .unwrap_or_else(|e| e.into_bytes().into_iter().map(char::from).collect());
    let props = parse_properties(&text).map_err(|mut e| {
        e.rule = format!("{}: {}", path.display(), e.rule);
        e
    })?;
    from_properties(&props)
}

/// Parses Java `.properties` text as `java.util.Properties.load` does (through the
/// `java-properties` crate): `key=value`, `key: value` or `key value` lines, `#` and `!` comment
/// lines, a trailing `\` continuing a line (at `\n`, `\r\n` or `\r`), and the escapes `\t`, `\n`,
/// `\r`, `\f`, `\uXXXX` and `\x` (for `x` itself, so `\=` or `\ ` keep a separator or a space).
/// Blanks before a key and around the separator are skipped; blanks at the end of a value are
/// kept, as in Java ([`from_properties`] trims values). A key given twice keeps its last value.
/// A UTF-8 byte order mark at the start is skipped.
pub fn parse_properties(text: &str) -> Result<BTreeMap<String, String>, ConfigError> {
    let text = java_compatible(text);
    let mut props = BTreeMap::new();
    java_properties::PropertiesIter::new_with_encoding(text.as_bytes(), encoding_rs::UTF_8)
        .read_into(|key, value| {
            props.insert(key, value);
        })
        .map_err(|e| {
            // Display appends " (line_number = N)"; after "line N:" the description is enough.
            #[allow(deprecated)]
            let what = std::error::Error::description(&e).to_owned();
            match e.line_number() {
                Some(line) => err(PROPERTIES_FILE, format!("line {line}: {what}")),
                None => err(PROPERTIES_FILE, what),
            }
        })?;
    Ok(props)
}

// ------------------------------------------------------------ where java-properties differs

/// `text` with what `java-properties` 2.0 reads differently from Java's `Properties.load` put
/// right before it parses (the tests check each):
/// - comment lines are emptied: the crate unescapes comments, so `# C:\users` would fail on `\us`,
///   while Java never reads them;
/// - a `\uXXXX` surrogate pair becomes the character it encodes (Java's escapes are UTF-16 code
///   units; the crate refuses each half) and a lone surrogate U+FFFD (no Rust string holds one);
/// - a continuation line keeps a leading whitespace character that is not one of Java's blanks
///   (space, tab, form feed), such as a no-break space, which the crate would skip;
/// - the text ends with a line terminator: the crate drops a last line continued by a `\` at the
///   very end of the text, which Java keeps.
///
/// Line terminators stay, so the line numbers of errors are those of the text.
fn java_compatible(text: &str) -> String {
    let mut out = String::with_capacity(text.len().saturating_add(1));
    let mut continued = false;
    for line in physical_lines(text) {
        let content = line.trim_end_matches(['\n', '\r']);
        let comment = !continued && content.trim_start_matches(is_blank).starts_with(['#', '!']);
        if !comment {
            let mut rest = content;
            if continued {
                // Java skips only its blanks at the start of a continuation line, the crate
                // any whitespace: an escape keeps a no-break space or a vertical tab.
                let skipped = content.trim_start_matches(is_blank);
                out.push_str(&content[..content.len() - skipped.len()]);
                rest = skipped;
                if let Some(c) = rest.chars().next().filter(|c| c.is_whitespace()) {
                    out.push_str(&format!("\\u{:04X}", u32::from(c)));
                    rest = &rest[c.len_utf8()..];
                }
            }
            continued = ends_with_odd_backslashes(content);
            decode_surrogates(rest, &mut out);
        }
        out.push_str(&line[content.len()..]);
    }
    if !out.ends_with(['\n', '\r']) {
        out.push('\n');
    }
    out
}

/// The lines of `text`, each with its terminator: `\n`, `\r\n` or `\r`, as Java's `LineReader`
/// (and the crate) end them.
fn physical_lines(text: &str) -> impl Iterator<Item = &str> {
    let mut rest = text;
    std::iter::from_fn(move || {
        if rest.is_empty() {
            return None;
        }
        let end = rest.find(['\n', '\r']).map_or(rest.len(), |i| {
            let terminator = if rest[i..].starts_with("\r\n") { 2 } else { 1 };
            i.saturating_add(terminator)
        });
        let (line, tail) = rest.split_at(end);
        rest = tail;
        Some(line)
    })
}

/// Java's whitespace in `.properties` files: space, tab, form feed.
fn is_blank(c: char) -> bool {
    matches!(c, ' ' | '\t' | '\x0c')
}

fn ends_with_odd_backslashes(s: &str) -> bool {
    s.bytes().rev().take_while(|b| *b == b'\\').count() % 2 == 1
}

/// Appends `line` to `out` with each `\uXXXX` escape of a UTF-16 surrogate decoded: a pair into
/// its character, a lone one into U+FFFD. An escaped backslash (`\\uD83D`) starts no escape.
fn decode_surrogates(line: &str, out: &mut String) {
    let surrogate = |at: &str| {
        let hex = at.strip_prefix("\\u")?.get(..4)?;
        if !hex.bytes().all(|b| b.is_ascii_hexdigit()) {
            return None;
        }
        let unit = u16::from_str_radix(hex, 16).ok()?;
        (0xD800..=0xDFFF).contains(&unit).then_some(unit)
    };
    let (mut copied, mut i) = (0, 0);
    while i < line.len() {
        if line.as_bytes()[i] != b'\\' {
            i += 1;
            continue;
        }
        let Some(first) = surrogate(&line[i..]) else {
            // The backslash and the byte it escapes (a `\` escaped here starts nothing).
            i += 2;
            continue;
        };
        out.push_str(&line[copied..i]);
        // `surrogate` matched six ASCII bytes at `i`.
        let pair = surrogate(&line[i + 6..])
            .and_then(|second| char::decode_utf16([first, second]).next()?.ok());
        match pair {
            Some(c) => {
                out.push(c);
                i += 12;
            }
            None => {
                out.push(char::REPLACEMENT_CHARACTER);
                i += 6;
            }
        }
        copied = i;
    }
    out.push_str(&line[copied..]);
}

// -------------------------------------------------------------------------------- values

fn err(key: &'static str, rule: impl Into<String>) -> ConfigError {
    ConfigError {
        key,
        rule: rule.into(),
    }
}

fn unknown_key(key: &str) -> ConfigError {
    let nearest = KEYS
        .iter()
        .map(|k| (strsim::levenshtein(key, k), *k))
        .min()
        .filter(|(d, _)| *d <= 3);
    let hint = match nearest {
        Some((_, k)) => format!("; did you mean {k:?}?"),
        None => String::new(),
    };
    err(
        UNKNOWN_KEY,
        format!("{key:?} is not a config this client knows{hint}"),
    )
}

/// A comma-separated list, trimmed, without empty entries.
fn list(v: &str) -> Vec<String> {
    v.split(',')
        .map(str::trim)
        .filter(|s| !s.is_empty())
        .map(String::from)
        .collect()
}

/// The built-in assignors named by `v`, by protocol name or Java class name.
fn assignors(v: &str) -> Result<Vec<Arc<dyn Assignor>>, ConfigError> {
    list(v)
        .into_iter()
        .map(|name| {
            let ours = JAVA_ASSIGNORS
                .iter()
                .find(|(class, _)| *class == name)
                .map_or(name.as_str(), |(_, ours)| ours);
            assignor::by_name(ours).ok_or_else(|| {
                err(
                    "partition.assignment.strategy",
                    format!(
                        "unknown assignor {name:?}; known: range, roundrobin, \
                         cooperative-sticky (or Java's RangeAssignor, RoundRobinAssignor, \
                         CooperativeStickyAssignor class names); an application's own \
                         assignor goes in GroupConfig::assignors"
                    ),
                )
            })
        })
        .collect()
}

struct Props<'a>(&'a BTreeMap<String, String>);

impl<'a> Props<'a> {
    /// The trimmed value of `key`, if set.
    fn get(&self, key: &str) -> Option<&'a str> {
        self.0.get(key).map(|v| v.trim())
    }

    fn is_set(&self, key: &str) -> bool {
        self.0.contains_key(key)
    }

    /// A number of milliseconds in `1..=i32::MAX`.
    fn ms(&self, key: &'static str) -> Result<Option<Duration>, ConfigError> {
        let Some(v) = self.get(key) else {
            return Ok(None);
        };
        let n: i64 = v
            .parse()
            .map_err(|_| err(key, format!("{v:?} is not a whole number of milliseconds")))?;
        match u64::try_from(n) {
            Ok(ms) if (1..=i32::MAX as u64).contains(&ms) => Ok(Some(Duration::from_millis(ms))),
            _ => Err(err(
                key,
                format!("{n} ms is out of range: must be between 1 and {}", i32::MAX),
            )),
        }
    }

    /// A whole number in `min..=i32::MAX`.
    fn count(&self, key: &'static str, min: i32) -> Result<Option<i32>, ConfigError> {
        let Some(v) = self.get(key) else {
            return Ok(None);
        };
        match v.parse::<i32>() {
            Ok(n) if n >= min => Ok(Some(n)),
            _ => Err(err(
                key,
                format!("{v:?} is not a whole number between {min} and {}", i32::MAX),
            )),
        }
    }

    fn path(&self, key: &'static str) -> Result<Option<PathBuf>, ConfigError> {
        match self.get(key) {
            None => Ok(None),
            Some("") => Err(err(key, "must not be empty")),
            Some(v) => Ok(Some(PathBuf::from(v))),
        }
    }
}

/// The checks that involve more than one key.
fn cross_check(
    p: &Props<'_>,
    client: &ClientConfig,
    group: &GroupConfig,
    retry_backoff_max_set: bool,
) -> Result<(), ConfigError> {
    match group.protocol {
        GroupProtocol::Consumer => {
            if let Some(key) = CONSUMER_PROTOCOL_UNSUPPORTED.iter().find(|k| p.is_set(k)) {
                return Err(err(
                    key,
                    "cannot be set when group.protocol=consumer (the broker assigns partitions \
                     and owns the session)",
                ));
            }
        }
        GroupProtocol::Classic if p.is_set("group.remote.assignor") => {
            return Err(err(
                "group.remote.assignor",
                "cannot be set when group.protocol=classic",
            ));
        }
        _ => {}
    }
    if group.heartbeat_interval >= group.session_timeout {
        return Err(err(
            "heartbeat.interval.ms",
            format!(
                "{} ms must be lower than session.timeout.ms ({} ms)",
                group.heartbeat_interval.as_millis(),
                group.session_timeout.as_millis()
            ),
        ));
    }
    if client.retry_backoff > client.retry_backoff_max {
        let max = if retry_backoff_max_set {
            "retry.backoff.max.ms"
        } else {
            "retry.backoff.max.ms (1000 ms by default; set it too)"
        };
        return Err(err(
            "retry.backoff.ms",
            format!(
                "{} ms must not exceed {max}, which is {} ms",
                client.retry_backoff.as_millis(),
                client.retry_backoff_max.as_millis()
            ),
        ));
    }
    if client.reconnect_backoff > client.reconnect_backoff_max {
        return Err(err(
            "reconnect.backoff.ms",
            format!(
                "{} ms must not exceed reconnect.backoff.max.ms, which is {} ms",
                client.reconnect_backoff.as_millis(),
                client.reconnect_backoff_max.as_millis()
            ),
        ));
    }

    // The same rules as the builder's (`ClientConfig::validate`), before the other checks of
    // the client config.
    client.security.validate()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn props(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
        pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()
    }

    /// The two required keys plus `extra`.
    fn with(extra: &[(&str, &str)]) -> BTreeMap<String, String> {
        let mut p = props(&[("bootstrap.servers", "k:9092"), ("group.id", "g")]);
        p.extend(props(extra));
        p
    }

    fn parse(extra: &[(&str, &str)]) -> (ClientConfig, GroupConfig) {
        from_properties(&with(extra)).unwrap_or_else(|e| panic!("{extra:?}: {e}"))
    }

    fn fails(extra: &[(&str, &str)]) -> ConfigError {
        match from_properties(&with(extra)) {
            Ok(_) => panic!("{extra:?} accepted"),
            Err(e) => e,
        }
    }

    #[test]
    fn every_key_is_parsed() {
        let (c, g) = parse(&[
            ("bootstrap.servers", " a:1 , b:2 ,"),
            ("group.id", " orders "),
            ("group.instance.id", "worker-1"),
            ("group.protocol", "CLASSIC"),
            (
                "partition.assignment.strategy",
                "cooperative-sticky, org.apache.kafka.clients.consumer.RangeAssignor",
            ),
            ("session.timeout.ms", "10000"),
            ("heartbeat.interval.ms", "1000"),
            ("max.poll.interval.ms", "60000"),
            ("metadata.max.age.ms", "30000"),
            ("retry.backoff.ms", "200"),
            ("retry.backoff.max.ms", "2000"),
            ("reconnect.backoff.ms", "20"),
            ("reconnect.backoff.max.ms", "500"),
            ("request.timeout.ms", "+15000"),
            ("default.api.timeout.ms", "20000"),
            ("socket.connection.setup.timeout.ms", "3000"),
            ("connections.max.idle.ms", "60000"),
            ("client.id", "my-app"),
            ("client.rack", "eu-west-1a"),
            ("security.protocol", "sasl_ssl"),
            ("sasl.mechanism", "SCRAM-SHA-512"),
            ("sasl.username", "alice"),
            ("sasl.password", "s3cret"),
            ("ssl.ca.location", "/etc/ca.pem"),
            ("ssl.certificate.location", "/etc/client.pem"),
            ("ssl.key.location", "/etc/client.key"),
            ("ssl.endpoint.identification.algorithm", ""),
        ]);
        assert_eq!(c.bootstrap_servers, ["a:1", "b:2"]);
        assert_eq!(g.group_id, "orders");
        assert_eq!(g.instance_id.as_deref(), Some("worker-1"));
        assert_eq!(g.protocol, GroupProtocol::Classic);
        assert_eq!(g.assignor_names(), ["cooperative-sticky", "range"]);
        assert_eq!(g.session_timeout, Duration::from_secs(10));
        assert_eq!(g.heartbeat_interval, Duration::from_secs(1));
        assert_eq!(g.max_poll_interval, Duration::from_secs(60));
        assert_eq!(g.metadata_max_age, Duration::from_secs(30));
        for (retry, max) in [
            (c.retry_backoff, c.retry_backoff_max),
            (g.retry_backoff, g.retry_backoff_max),
        ] {
            assert_eq!(retry, Duration::from_millis(200));
            assert_eq!(max, Duration::from_secs(2));
        }
        assert_eq!(c.reconnect_backoff, Duration::from_millis(20));
        assert_eq!(c.reconnect_backoff_max, Duration::from_millis(500));
        assert_eq!(c.request_timeout, Duration::from_secs(15));
        assert_eq!(g.request_timeout, Duration::from_secs(15));
        assert_eq!(c.socket_connection_setup_timeout, Duration::from_secs(3));
        assert_eq!(c.connections_max_idle, Duration::from_secs(60));
        assert_eq!(g.default_api_timeout, Duration::from_secs(20));
        assert_eq!(c.client_id, "my-app");
        assert_eq!(c.client_rack.as_deref(), Some("eu-west-1a"));
        assert_eq!(g.rack_id.as_deref(), Some("eu-west-1a"));
        let s = &c.security;
        assert_eq!(s.protocol, SecurityProtocol::SaslSsl);
        assert_eq!(s.sasl_mechanism, Some(SaslMechanism::ScramSha512));
        assert_eq!(s.sasl_username.as_deref(), Some("alice"));
        assert_eq!(s.sasl_password.as_ref().map(Secret::expose), Some("s3cret"));
        assert_eq!(s.ssl_ca_location.as_deref(), Some(Path::new("/etc/ca.pem")));
        assert_eq!(
            s.ssl_certificate_location.as_deref(),
            Some(Path::new("/etc/client.pem"))
        );
        assert_eq!(
            s.ssl_key_location.as_deref(),
            Some(Path::new("/etc/client.key"))
        );
        assert!(!s.ssl_verify_hostname);
        // The test names each key of KEYS once (bootstrap.servers and group.id overridden).
        assert_eq!(KEYS.len(), 28);
    }

    #[test]
    fn defaults_match_the_configs_defaults() {
        let (c, g) = parse(&[]);
        let (dc, dg) = (ClientConfig::default(), GroupConfig::new("g"));
        assert_eq!(c.bootstrap_servers, ["k:9092"]);
        assert_eq!(c.client_id, dc.client_id);
        assert_eq!(c.security, dc.security);
        assert!(c.security.ssl_verify_hostname);
        assert_eq!(c.reconnect_backoff_max, dc.reconnect_backoff_max);
        assert_eq!(c.connections_max_idle, dc.connections_max_idle);
        assert_eq!(g.protocol, GroupProtocol::Classic);
        assert_eq!(g.assignor_names(), dg.assignor_names());
        assert_eq!(g.session_timeout, dg.session_timeout);
        assert_eq!(g.heartbeat_interval, dg.heartbeat_interval);
        assert_eq!(g.instance_id, None);
        assert_eq!(g.rack_id, None);
    }

    #[test]
    fn group_protocol_is_case_insensitive_and_auto_is_accepted() {
        for (v, want) in [
            ("classic", GroupProtocol::Classic),
            ("Consumer", GroupProtocol::Consumer),
            ("CONSUMER", GroupProtocol::Consumer),
            ("auto", GroupProtocol::Auto),
            (" AUTO ", GroupProtocol::Auto),
        ] {
            assert_eq!(parse(&[("group.protocol", v)]).1.protocol, want, "{v}");
        }
        let e = fails(&[("group.protocol", "streams")]);
        assert_eq!(e.key, "group.protocol");
        assert!(e.rule.contains("streams"), "{e}");
    }

    #[test]
    fn assignors_by_name_and_by_java_class() {
        let a = |v| {
            let (_, g) = parse(&[("partition.assignment.strategy", v)]);
            g.assignor_names()
                .into_iter()
                .map(String::from)
                .collect::<Vec<_>>()
        };
        assert_eq!(a("range,roundrobin"), ["range", "roundrobin"]);
        assert_eq!(
            a("org.apache.kafka.clients.consumer.RoundRobinAssignor , \
               org.apache.kafka.clients.consumer.CooperativeStickyAssignor"),
            ["roundrobin", "cooperative-sticky"]
        );
        for bad in [
            "org.apache.kafka.clients.consumer.StickyAssignor",
            "Range",
            "sticky",
        ] {
            let e = fails(&[("partition.assignment.strategy", bad)]);
            assert_eq!(e.key, "partition.assignment.strategy");
            assert!(e.rule.contains(bad), "{e}");
        }
        // An empty list: the config's own validate() refuses it.
        let e = fails(&[("partition.assignment.strategy", " , ")]);
        assert_eq!(e.key, "partition.assignment.strategy");
    }

    #[test]
    fn consumer_protocol_refuses_classic_only_configs_when_set() {
        for key in CONSUMER_PROTOCOL_UNSUPPORTED {
            // Set at all, even to the default, is refused (Java checks the originals).
            let value = if *key == "partition.assignment.strategy" {
                "range"
            } else if *key == "heartbeat.interval.ms" {
                "3000"
            } else {
                "45000"
            };
            let e = fails(&[("group.protocol", "consumer"), (key, value)]);
            assert_eq!(e.key, *key);
            assert!(e.rule.contains("group.protocol=consumer"), "{e}");
            // auto may fall back to classic, which uses them.
            parse(&[("group.protocol", "auto"), (key, value)]);
        }
        let (_, g) = parse(&[
            ("group.protocol", "consumer"),
            ("group.remote.assignor", "uniform"),
        ]);
        assert_eq!(g.remote_assignor.as_deref(), Some("uniform"));
        parse(&[
            ("group.protocol", "auto"),
            ("group.remote.assignor", "range"),
        ]);
    }

    #[test]
    fn classic_refuses_a_remote_assignor() {
        for protocol in [None, Some("classic")] {
            let mut extra = vec![("group.remote.assignor", "uniform")];
            extra.extend(protocol.map(|p| ("group.protocol", p)));
            let e = fails(&extra);
            assert_eq!(e.key, "group.remote.assignor");
            assert!(e.rule.contains("classic"), "{e}");
        }
    }

    #[test]
    fn heartbeat_must_be_below_session() {
        for (hb, session) in [("10000", "10000"), ("20000", "10000")] {
            let e = fails(&[
                ("heartbeat.interval.ms", hb),
                ("session.timeout.ms", session),
            ]);
            assert_eq!(e.key, "heartbeat.interval.ms");
            assert!(e.rule.contains("session.timeout.ms"), "{e}");
        }
        // Against the default session timeout (45 s) too.
        assert_eq!(
            fails(&[("heartbeat.interval.ms", "45000")]).key,
            "heartbeat.interval.ms"
        );
    }

    #[test]
    fn required_keys() {
        let e = from_properties(&props(&[("bootstrap.servers", "k:1")])).unwrap_err();
        assert_eq!((e.key, e.rule.as_str()), ("group.id", "is required"));
        let e = from_properties(&props(&[("group.id", "g")])).unwrap_err();
        assert_eq!(e.key, "bootstrap.servers");
        // Present but empty: the configs' own validate() names the key.
        assert_eq!(fails(&[("group.id", " ")]).key, "group.id");
        assert_eq!(
            fails(&[("bootstrap.servers", ",")]).key,
            "bootstrap.servers"
        );
        assert_eq!(
            fails(&[("bootstrap.servers", "host-without-port")]).key,
            "bootstrap.servers"
        );
    }

    #[test]
    fn the_configs_own_validate_runs() {
        let e = fails(&[("group.instance.id", "bad id!")]);
        assert_eq!(e.key, "group.instance.id");
        assert_eq!(fails(&[("group.instance.id", "")]).key, "group.instance.id");
        let e = fails(&[
            ("group.protocol", "consumer"),
            ("group.remote.assignor", " "),
        ]);
        assert_eq!(e.key, "group.remote.assignor");
    }

    #[test]
    fn numbers_must_parse_and_be_in_range() {
        for key in [
            "session.timeout.ms",
            "heartbeat.interval.ms",
            "max.poll.interval.ms",
            "metadata.max.age.ms",
            "retry.backoff.ms",
            "retry.backoff.max.ms",
            "reconnect.backoff.ms",
            "reconnect.backoff.max.ms",
            "request.timeout.ms",
            "default.api.timeout.ms",
        ] {
            for bad in [
                "",
                "abc",
                "1.5",
                "10s",
                "0",
                "-1",
                "2147483648",
                "99999999999999999999999",
            ] {
                let e = fails(&[(key, bad)]);
                assert_eq!(e.key, key, "{key}={bad}: {e}");
            }
        }
        let (_, g) = parse(&[
            ("max.poll.interval.ms", "2147483647"),
            ("session.timeout.ms", "2147483647"),
        ]);
        assert_eq!(g.max_poll_interval, Duration::from_millis(i32::MAX as u64));
    }

    #[test]
    fn backoff_bases_must_not_exceed_their_max() {
        let e = fails(&[("retry.backoff.ms", "500"), ("retry.backoff.max.ms", "400")]);
        assert_eq!(e.key, "retry.backoff.ms");
        // Only the base, above the default max: the message says to set the max.
        let e = fails(&[("retry.backoff.ms", "2000")]);
        assert_eq!(e.key, "retry.backoff.ms");
        assert!(e.rule.contains("by default"), "{e}");
        // Only the max, below the default base.
        assert_eq!(
            fails(&[("retry.backoff.max.ms", "50")]).key,
            "retry.backoff.ms"
        );
        let e = fails(&[
            ("reconnect.backoff.ms", "500"),
            ("reconnect.backoff.max.ms", "400"),
        ]);
        assert_eq!(e.key, "reconnect.backoff.ms");
        // Java: the reconnect base alone disables the exponential backoff.
        let (c, _) = parse(&[("reconnect.backoff.ms", "5000")]);
        assert_eq!(c.reconnect_backoff, Duration::from_secs(5));
        assert_eq!(c.reconnect_backoff_max, Duration::from_secs(5));
    }

    #[test]
    fn client_rack_sets_both_and_empty_means_none() {
        let (c, g) = parse(&[("client.rack", " r1 ")]);
        assert_eq!(
            (c.client_rack.as_deref(), g.rack_id.as_deref()),
            (Some("r1"), Some("r1"))
        );
        let (c, g) = parse(&[("client.rack", "")]);
        assert_eq!((c.client_rack, g.rack_id), (None, None));
    }

    #[test]
    fn security_protocol_and_sasl() {
        for (v, want) in [
            ("PLAINTEXT", SecurityProtocol::Plaintext),
            ("ssl", SecurityProtocol::Ssl),
        ] {
            assert_eq!(parse(&[("security.protocol", v)]).0.security.protocol, want);
        }
        assert_eq!(
            fails(&[("security.protocol", "TLS")]).key,
            "security.protocol"
        );
        let sasl = [
            ("security.protocol", "SASL_PLAINTEXT"),
            ("sasl.mechanism", "plain"),
            ("sasl.username", "u"),
            ("sasl.password", "p"),
        ];
        let (c, _) = parse(&sasl);
        assert_eq!(c.security.protocol, SecurityProtocol::SaslPlaintext);
        assert_eq!(c.security.sasl_mechanism, Some(SaslMechanism::Plain));
        assert_eq!(
            parse(&[
                sasl[0],
                ("sasl.mechanism", "SCRAM-SHA-256"),
                sasl[2],
                sasl[3]
            ])
            .0
            .security
            .sasl_mechanism,
            Some(SaslMechanism::ScramSha256)
        );
        // Each of mechanism, username, password is required.
        for missing in 1..sasl.len() {
            let extra: Vec<_> = (0..sasl.len())
                .filter(|i| *i != missing)
                .map(|i| sasl[i])
                .collect();
            let e = fails(&extra);
            assert_eq!(e.key, sasl[missing].0);
            assert!(e.rule.contains("SASL_PLAINTEXT"), "{e}");
        }
        let e = fails(&[sasl[0], ("sasl.mechanism", "GSSAPI"), sasl[2], sasl[3]]);
        assert_eq!(e.key, "sasl.mechanism");
        assert_eq!(
            fails(&[sasl[0], sasl[1], ("sasl.username", ""), sasl[3]]).key,
            "sasl.username"
        );
        assert_eq!(
            fails(&[sasl[0], sasl[1], sasl[2], ("sasl.password", " ")]).key,
            "sasl.password"
        );
        // SASL settings without a SASL protocol.
        for (key, value) in &sasl[1..] {
            for protocol in ["PLAINTEXT", "SSL"] {
                let e = fails(&[("security.protocol", protocol), (key, value)]);
                assert_eq!(e.key, *key);
                assert!(e.rule.contains("does not use SASL"), "{e}");
            }
        }
    }

    #[test]
    fn ssl_files_and_host_name_verification() {
        let ssl = ("security.protocol", "SSL");
        let cert = ("ssl.certificate.location", "c.pem");
        let key = ("ssl.key.location", "k.pem");
        assert_eq!(fails(&[ssl, cert]).key, "ssl.key.location");
        assert_eq!(fails(&[ssl, key]).key, "ssl.certificate.location");
        let (c, _) = parse(&[ssl, cert, key]);
        assert!(c.security.ssl_certificate_location.is_some());
        assert_eq!(
            fails(&[ssl, ("ssl.ca.location", "")]).key,
            "ssl.ca.location"
        );
        for (k, v) in [cert, key, ("ssl.ca.location", "ca.pem")] {
            for protocol in ["PLAINTEXT", "SASL_PLAINTEXT"] {
                let mut extra = vec![("security.protocol", protocol), (k, v)];
                if protocol == "SASL_PLAINTEXT" {
                    extra.extend([
                        ("sasl.mechanism", "PLAIN"),
                        ("sasl.username", "u"),
                        ("sasl.password", "p"),
                    ]);
                }
                let e = fails(&extra);
                assert_eq!(e.key, k, "{e}");
                assert!(e.rule.contains("does not use TLS"), "{e}");
            }
        }
        let alg = "ssl.endpoint.identification.algorithm";
        assert!(parse(&[ssl, (alg, "HTTPS")]).0.security.ssl_verify_hostname);
        assert!(!parse(&[ssl, (alg, " ")]).0.security.ssl_verify_hostname);
        assert_eq!(fails(&[ssl, (alg, "none")]).key, alg);
    }

    #[test]
    fn unknown_keys_are_named() {
        let e = fails(&[("enable.auto.commit", "false")]);
        assert_eq!(e.key, UNKNOWN_KEY);
        assert!(e.rule.contains("\"enable.auto.commit\""), "{e}");
        let e = fails(&[("session.timeout", "10000")]);
        assert!(
            e.rule.contains("did you mean \"session.timeout.ms\"?"),
            "{e}"
        );
        // The value of an unknown key is never echoed (it may be a secret).
        let e = fails(&[("sasl.passwrd", "hunter2")]);
        assert!(!e.to_string().contains("hunter2"), "{e}");
        assert!(e.rule.contains("sasl.password"), "{e}");
    }

    #[test]
    fn debug_output_hides_the_password() {
        let (c, g) = parse(&[
            ("security.protocol", "SASL_SSL"),
            ("sasl.mechanism", "PLAIN"),
            ("sasl.username", "alice"),
            ("sasl.password", "hunter2-very-secret"),
        ]);
        let shown = format!("{c:?} {c:#?} {g:?}");
        assert!(!shown.contains("hunter2"), "{shown}");
        assert!(shown.contains("alice"));
        assert!(shown.contains("***"));
    }

    #[test]
    fn properties_syntax() {
        let text = "# a comment\n\
                    ! another comment\n\
                    \n\
                    \x20  bootstrap.servers = a:1,\\\n\
                    \x20         b:2\r\n\
                    group.id:orders\n\
                    client.id  my app  \n\
                    client.rack\t=\\  rack\\u0031\\ \n\
                    sasl.password=p\\=ss\\:word\\\\\n\
                    weird\\ key\\=x = v\n\
                    no.value\n\
                    group.id = last-wins";
        let p = parse_properties(text).unwrap();
        let get = |k: &str| p.get(k).map(String::as_str);
        assert_eq!(get("bootstrap.servers"), Some("a:1,b:2"));
        assert_eq!(get("group.id"), Some("last-wins"));
        // Java keeps the blanks at the end of a value (from_properties trims it).
        assert_eq!(get("client.id"), Some("my app  "));
        assert_eq!(get("client.rack"), Some("  rack1 "));
        assert_eq!(get("sasl.password"), Some("p=ss:word\\"));
        assert_eq!(get("weird key=x"), Some("v"));
        assert_eq!(get("no.value"), Some(""));
        assert_eq!(p.len(), 7);
        // A continuation at the end of the text, a comment line ending in a backslash.
        let p = parse_properties("# c \\\na=1\nb=2\\").unwrap();
        assert_eq!(p, props(&[("a", "1"), ("b", "2")]));
        for bad in ["a=\\u12", "a=\\uZZZZ"] {
            let e = parse_properties(bad).unwrap_err();
            assert_eq!(e.key, PROPERTIES_FILE);
            assert!(e.rule.starts_with("line 1:"), "{e}");
        }
        // A lone surrogate is replaced, not a panic.
        assert_eq!(
            parse_properties("a=\\uD83D").unwrap()["a"],
            char::REPLACEMENT_CHARACTER.to_string()
        );
    }

    fn temp_file(name: &str, contents: &[u8]) -> PathBuf {
        let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("target/properties-tests");
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join(format!("{}-{name}", std::process::id()));
        std::fs::write(&path, contents).unwrap();
        path
    }

    #[test]
    fn properties_file() {
        let path = temp_file(
            "consumer.properties",
            b"# consumer.properties\n\
              bootstrap.servers=localhost:9092\n\
              group.id=orders\n\
              group.protocol=consumer\n\
              group.remote.assignor=uniform\n\
              client.rack=r\xc3\xa9gion\n",
        );
        let (c, g) = from_properties_file(&path).unwrap();
        assert_eq!(c.bootstrap_servers, ["localhost:9092"]);
        assert_eq!(g.group_id, "orders");
        assert_eq!(g.protocol, GroupProtocol::Consumer);
        assert_eq!(c.client_rack.as_deref(), Some("région"));

        // Latin-1 (what Java's Properties.load(InputStream) reads).
        let latin1 = temp_file(
            "latin1.properties",
            b"bootstrap.servers=h:1\ngroup.id=g\nclient.rack=r\xe9gion\n",
        );
        let (c, _) = from_properties_file(&latin1).unwrap();
        assert_eq!(c.client_rack.as_deref(), Some("région"));

        let bad = temp_file(
            "bad.properties",
            b"bootstrap.servers=h:1\ngroup.id=g\nfetch.min.bytes=1\n",
        );
        let e = from_properties_file(&bad).unwrap_err();
        assert_eq!(e.key, UNKNOWN_KEY);
        assert!(e.rule.contains("fetch.min.bytes"), "{e}");

        let syntax = temp_file("syntax.properties", b"\n\na=\\u00\n");
        let e = from_properties_file(&syntax).unwrap_err();
        assert_eq!(e.key, PROPERTIES_FILE);
        assert!(e.rule.contains("syntax.properties: line 3:"), "{e}");

        let e = from_properties_file(&path.with_extension("missing")).unwrap_err();
        assert_eq!(e.key, PROPERTIES_FILE);
        assert!(e.rule.contains("cannot read"), "{e}");
        for p in [path, latin1, bad, syntax] {
            let _ = std::fs::remove_file(p);
        }
    }

    #[test]
    fn suggestions_are_keys_within_three_edits() {
        let hint = |key: &str| {
            let rule = unknown_key(key).rule;
            rule.split_once("did you mean ").map(|(_, k)| k.to_owned())
        };
        assert_eq!(hint("groupid").as_deref(), Some("\"group.id\"?"));
        assert_eq!(hint("client.racks").as_deref(), Some("\"client.rack\"?"));
        assert_eq!(
            hint("sesion.timeot.m").as_deref(),
            Some("\"session.timeout.ms\"?")
        );
        assert_eq!(hint("fetch.min.bytes"), None);
        assert_eq!(hint(""), None);
    }

    #[test]
    fn separators_and_blanks() {
        let p = parse_properties(
            "a=1\n\
             b:2\n\
             c 3\n\
             d\t\x0c 4\n\
             e \t= \x0c5\n\
             f : = 6\n\
             g:=7\n\
             h  8=9 \t\n\
             \t i\\:j\\ k = 10\n\
             l=\n\
             m\n",
        )
        .unwrap();
        assert_eq!(
            p,
            props(&[
                ("a", "1"),
                ("b", "2"),
                ("c", "3"),
                ("d", "4"),
                ("e", "5"),
                ("f", "= 6"),
                ("g", "=7"),
                // Only blanks after the key: what follows is the value, `=` included; the value
                // keeps its trailing blanks, as in Java.
                ("h", "8=9 \t"),
                ("i:j k", "10"),
                ("l", ""),
                ("m", ""),
            ])
        );
    }

    #[test]
    fn comments() {
        let p = parse_properties(
            "#a=1\n\
             !b=2\n\
             \x20 \t# c=3\n\
             # a comment ending in a backslash does not continue \\\n\
             d=4\n\
             # C:\\users\\me: a comment is never unescaped\n\
             ! \\uZZZZ \\u12\n\
             e=5\\\n\
             # continues the value, not a comment\n\
             f=#6\n\
             \\#g=7\n",
        )
        .unwrap();
        assert_eq!(
            p,
            props(&[
                ("d", "4"),
                ("e", "5# continues the value, not a comment"),
                ("f", "#6"),
                ("#g", "7"),
            ])
        );
    }

    #[test]
    fn line_continuations() {
        let p = parse_properties(
            "a=1,\\\n\
             \x20 \t\x0c 2,\\\r\n\
             \x20   3\r\
             b=x\\\\\n\
             c=not continued\n\
             long.\\\n\
             \x20 key = v\\\n\
             \n\
             d = after an empty continuation\r\
             e = 1\\\n\
             \x20   \\\n\
             \x20 2",
        )
        .unwrap();
        assert_eq!(
            p,
            props(&[
                ("a", "1,2,3"),
                // An even number of backslashes: escaped backslashes, no continuation.
                ("b", "x\\"),
                ("c", "not continued"),
                ("long.key", "v"),
                ("d", "after an empty continuation"),
                ("e", "12"),
            ])
        );
        // Only Java's blanks are skipped at the start of a continuation line.
        let p = parse_properties("a=1,\\\n \u{A0}2,\\\n\t\u{B}3,\\\n\u{2003}4").unwrap();
        assert_eq!(p["a"], "1,\u{A0}2,\u{B}3,\u{2003}4");
        // A continuation at the very end of the text ends the entry (Java's LineReader).
        for text in ["a=1\\", "a=1\\\n", "a=1\\\r\n", "a=\\\n1\\"] {
            assert_eq!(
                parse_properties(text).unwrap(),
                props(&[("a", "1")]),
                "{text:?}"
            );
        }
    }

    #[test]
    fn escapes() {
        let p = parse_properties(
            "tab=a\\tb\n\
             lines=\\r\\n\\f\n\
             plain=\\q\\b\\\"\\'\n\
             caf\\u00E9=caf\\u00e9 \\u0041\\u00410\n\
             smile=\\uD83D\\uDE00!\n\
             \\uD83D\\uDE00=key\n\
             lone=\\uD83Dx\\uDE00\\uDE00\\uD83D\n\
             reversed=\\uDE00\\uD83D\n\
             not.an.escape=\\\\uD83D\n\
             doubled=\\\\\\uD83D\\uDE00\n",
        )
        .unwrap();
        assert_eq!(
            p,
            props(&[
                ("tab", "a\tb"),
                ("lines", "\r\n\x0c"),
                // Any other escaped character is itself (Java has no \b).
                ("plain", "qb\"'"),
                ("café", "café AA0"),
                ("smile", "\u{1F600}!"),
                ("\u{1F600}", "key"),
                ("lone", "\u{FFFD}x\u{FFFD}\u{FFFD}\u{FFFD}"),
                ("reversed", "\u{FFFD}\u{FFFD}"),
                ("not.an.escape", "\\uD83D"),
                ("doubled", "\\\u{1F600}"),
            ])
        );

        // Malformed \uXXXX: an error naming the line where the entry starts.
        for (text, line) in [
            ("a=\\u12", 1),
            ("a=\\uZZZZ", 1),
            ("a=\\u12é4", 1),
            ("# c\n\na=1\nb=x\\\n\\u00", 4),
            ("a=1\r\nb=\\u\r\n", 2),
            ("a=1\rb=\\u", 2),
            ("\\u00G0=v", 1),
        ] {
            let e = parse_properties(text).unwrap_err();
            assert_eq!(e.key, PROPERTIES_FILE);
            assert!(
                e.rule.starts_with(&format!("line {line}: ")),
                "{text:?}: {e}"
            );
            assert!(e.rule.contains("\\uxxxx"), "{text:?}: {e}");
        }
    }

    #[test]
    fn byte_order_mark_and_empty_text() {
        let p = parse_properties("\u{FEFF}group.id=g\n").unwrap();
        assert_eq!(p, props(&[("group.id", "g")]));
        assert!(parse_properties("").unwrap().is_empty());
        assert!(parse_properties(" \n\t\r\n\x0c").unwrap().is_empty());
    }
}
