//! SASL authentication on a fresh connection: SaslHandshake v1, then SaslAuthenticate carrying
//! the mechanism's bytes (KIP-152). PLAIN (RFC 4616) and SCRAM-SHA-256/512 (RFC 5802, RFC 7677)
//! built on RustCrypto's HMAC, SHA-2 and PBKDF2; the password never reaches a log.

use std::time::Duration;

use base64::Engine as _;
use base64::engine::general_purpose::STANDARD;
use bytes::Bytes;
use hmac::digest::core_api::BlockSizeUser;
use hmac::{Mac, SimpleHmac};
use kafka_protocol::messages::{
    RequestKind, ResponseKind, SaslAuthenticateRequest, SaslHandshakeRequest,
};
use kafka_protocol::protocol::StrBytes;
use sha2::{Digest, Sha256, Sha512};

use super::conn::Connection;
use crate::config::{SaslMechanism, Secret};
use crate::error::{TransportError, codes};
use crate::request::{Request, ResponseBody};

/// Kafka's minimum SCRAM iteration count (ScramMechanism.minIterations); fewer is refused as a
/// downgrade.
const MIN_ITERATIONS: u32 = 4096;

/// Kafka's maximum SCRAM iteration count (apache/kafka `clients/.../scram/internals/
/// ScramMechanism.java`: `maxIterations` 16384 for both SCRAM-SHA-256 and SCRAM-SHA-512). A Kafka
/// broker cannot hold a credential with more: `kafka-storage format --add-scram` and the
/// controller's AlterUserScramCredentials check (KIP-554) refuse it. More is refused here, before
/// PBKDF2 runs: the count comes from the broker, and a hostile one asking for `i=4000000000`
/// would otherwise hold a runtime worker thread for minutes, while 16384 rounds take tens of
/// milliseconds at most in a release build. (The Java client checks only the minimum.)
const MAX_ITERATIONS: u32 = 16384;

fn auth_error(mechanism: SaslMechanism, reason: impl Into<String>) -> TransportError {
    TransportError::Authentication {
        mechanism: mechanism.name(),
        reason: reason.into(),
    }
}

/// Authenticates `conn`; returns the session lifetime the broker granted (KIP-368), if any.
pub(crate) async fn authenticate(
    conn: &Connection,
    mechanism: SaslMechanism,
    username: &str,
    password: &Secret,
    timeout: Duration,
) -> Result<Option<Duration>, TransportError> {
    let handshake = Request::Raw {
        body: Box::new(RequestKind::SaslHandshake(
            SaslHandshakeRequest::default()
                .with_mechanism(StrBytes::from_static_str(mechanism.name())),
        )),
        versions: 1..=1,
        fit: None,
    };
    let r = conn.send(&handshake, timeout).await?;
    let ResponseBody::Kafka(ResponseKind::SaslHandshake(r)) = r.body else {
        return Err(auth_error(
            mechanism,
            "the answer is not a SaslHandshake response",
        ));
    };
    if r.error_code != codes::NONE {
        let offered: Vec<&str> = r.mechanisms.iter().map(|m| m.as_str()).collect();
        return Err(auth_error(
            mechanism,
            format!(
                "the broker refused the mechanism ({}); it offers {offered:?}",
                crate::error::error_name(r.error_code)
            ),
        ));
    }
    match mechanism {
        SaslMechanism::Plain => {
            let mut msg = Vec::with_capacity(username.len() + password.expose().len() + 2);
            msg.push(0);
            msg.extend_from_slice(username.as_bytes());
            msg.push(0);
            msg.extend_from_slice(password.expose().as_bytes());
            let (_, lifetime) = exchange(conn, mechanism, msg, timeout).await?;
            Ok(lifetime)
        }
        SaslMechanism::ScramSha256 => {
            scram::<Sha256>(conn, mechanism, username, password, timeout).await
        }
        SaslMechanism::ScramSha512 => {
            scram::<Sha512>(conn, mechanism, username, password, timeout).await
        }
        _ => Err(auth_error(
            mechanism,
            "this transport does not implement the mechanism",
        )),
    }
}

/// One SaslAuthenticate round trip: the broker's bytes and session lifetime.
async fn exchange(
    conn: &Connection,
    mechanism: SaslMechanism,
    bytes: Vec<u8>,
    timeout: Duration,
) -> Result<(Bytes, Option<Duration>), TransportError> {
    let request = Request::Raw {
        body: Box::new(RequestKind::SaslAuthenticate(
            SaslAuthenticateRequest::default().with_auth_bytes(Bytes::from(bytes)),
        )),
        versions: 0..=2,
        fit: None,
    };
    let r = conn.send(&request, timeout).await?;
    let ResponseBody::Kafka(ResponseKind::SaslAuthenticate(r)) = r.body else {
        return Err(auth_error(
            mechanism,
            "the answer is not a SaslAuthenticate response",
        ));
    };
    if r.error_code != codes::NONE {
        let message = r.error_message.as_deref().unwrap_or("no message");
        return Err(auth_error(
            mechanism,
            format!("{} ({message})", crate::error::error_name(r.error_code)),
        ));
    }
    let lifetime =
        (r.session_lifetime_ms > 0).then(|| Duration::from_millis(r.session_lifetime_ms as u64));
    Ok((r.auth_bytes, lifetime))
}

/// RFC 5802 `saslname`: `=` and `,` escaped.
fn sasl_name(username: &str) -> String {
    username.replace('=', "=3D").replace(',', "=2C")
}

/// The parts of a server-first-message.
#[derive(Debug, PartialEq, Eq)]
struct ServerFirst {
    nonce: String,
    salt: Vec<u8>,
    iterations: u32,
}

fn parse_server_first(
    msg: &str,
    client_nonce: &str,
    mechanism: SaslMechanism,
) -> Result<ServerFirst, TransportError> {
    let bad = |why: &str| auth_error(mechanism, format!("malformed server-first-message: {why}"));
    let (mut nonce, mut salt, mut iterations) = (None, None, None);
    for part in msg.split(',') {
        match part.split_once('=') {
            Some(("r", v)) => nonce = Some(v.to_owned()),
            Some(("s", v)) => {
                salt = Some(STANDARD.decode(v).map_err(|_| bad("salt is not base64"))?)
            }
            Some(("i", v)) => {
                iterations = Some(v.parse::<u32>().map_err(|_| bad("iteration count"))?)
            }
            Some(("e", v)) => return Err(auth_error(mechanism, format!("server error: {v}"))),
            _ => {}
        }
    }
    let nonce = nonce.ok_or_else(|| bad("no nonce"))?;
    // The server's nonce extends ours (RFC 5802 §5.1); anything else is a replay or a MITM.
    if !nonce.starts_with(client_nonce) || nonce.len() == client_nonce.len() {
        return Err(bad("the nonce does not extend the client nonce"));
    }
    let iterations = iterations.ok_or_else(|| bad("no iteration count"))?;
    if iterations < MIN_ITERATIONS {
        return Err(auth_error(
            mechanism,
            format!("iteration count {iterations} is below {MIN_ITERATIONS}"),
        ));
    }
    if iterations > MAX_ITERATIONS {
        return Err(auth_error(
            mechanism,
            format!(
                "iteration count {iterations} is above {MAX_ITERATIONS}, the most a Kafka broker \
                 stores (ScramMechanism.maxIterations)"
            ),
        ));
    }
    let salt = salt.ok_or_else(|| bad("no salt"))?;
    Ok(ServerFirst {
        nonce,
        salt,
        iterations,
    })
}

/// The SCRAM proof and the server signature to expect, for `H`.
struct ScramKeys {
    client_final: String,
    server_signature: Vec<u8>,
}

fn scram_keys<H>(
    password: &str,
    first_bare: &str,
    server_first_msg: &str,
    sf: &ServerFirst,
) -> ScramKeys
where
    H: Digest + BlockSizeUser + Clone + Sync,
{
    let mut salted = vec![0u8; <H as Digest>::output_size()];
    pbkdf2::pbkdf2::<SimpleHmac<H>>(password.as_bytes(), &sf.salt, sf.iterations, &mut salted)
        .expect("HMAC takes keys of any length");
    let hmac = |key: &[u8], data: &[u8]| -> Vec<u8> {
        let mut m =
            <SimpleHmac<H> as Mac>::new_from_slice(key).expect("HMAC takes keys of any length");
        m.update(data);
        m.finalize().into_bytes().to_vec()
    };
    let client_key = hmac(&salted, b"Client Key");
    let stored_key = H::digest(&client_key).to_vec();
    // "biws" = base64("n,,"): no channel binding, no authzid.
    let without_proof = format!("c=biws,r={}", sf.nonce);
    let auth_message = format!("{first_bare},{server_first_msg},{without_proof}");
    let client_signature = hmac(&stored_key, auth_message.as_bytes());
    let proof: Vec<u8> = client_key
        .iter()
        .zip(&client_signature)
        .map(|(a, b)| a ^ b)
        .collect();
    let server_key = hmac(&salted, b"Server Key");
    ScramKeys {
        client_final: format!("{without_proof},p={}", STANDARD.encode(proof)),
        server_signature: hmac(&server_key, auth_message.as_bytes()),
    }
}

async fn scram<H>(
    conn: &Connection,
    mechanism: SaslMechanism,
    username: &str,
    password: &Secret,
    timeout: Duration,
) -> Result<Option<Duration>, TransportError>
where
    H: Digest + BlockSizeUser + Clone + Sync,
{
    let nonce: [u8; 24] = rand::random();
    let client_nonce = STANDARD.encode(nonce);
    let first_bare = format!("n={},r={client_nonce}", sasl_name(username));
    let (server_first, _) = exchange(
        conn,
        mechanism,
        format!("n,,{first_bare}").into_bytes(),
        timeout,
    )
    .await?;
    let server_first = std::str::from_utf8(&server_first)
        .map_err(|_| auth_error(mechanism, "server-first-message is not UTF-8"))?
        .to_owned();
    let sf = parse_server_first(&server_first, &client_nonce, mechanism)?;
    let keys = scram_keys::<H>(password.expose(), &first_bare, &server_first, &sf);
    let (server_final, lifetime) =
        exchange(conn, mechanism, keys.client_final.into_bytes(), timeout).await?;
    verify_server_final(&server_final, &keys.server_signature, mechanism)?;
    Ok(lifetime)
}

/// The broker proves it knows the password too (`v=`), or says why not (`e=`).
fn verify_server_final(
    msg: &[u8],
    expected: &[u8],
    mechanism: SaslMechanism,
) -> Result<(), TransportError> {
    let msg = std::str::from_utf8(msg)
        .map_err(|_| auth_error(mechanism, "server-final-message is not UTF-8"))?;
    if let Some(e) = msg.strip_prefix("e=") {
        return Err(auth_error(mechanism, format!("server error: {e}")));
    }
    let v = msg
        .split(',')
        .find_map(|p| p.strip_prefix("v="))
        .ok_or_else(|| auth_error(mechanism, "server-final-message has no verifier"))?;
    let got = STANDARD
        .decode(v)
        .map_err(|_| auth_error(mechanism, "server verifier is not base64"))?;
    if got != expected {
        return Err(auth_error(
            mechanism,
            "the broker's signature does not match: it does not know the password",
        ));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// RFC 7677 §3 test vector (SCRAM-SHA-256, user "user", password "pencil").
    #[test]
    fn scram_sha_256_matches_the_rfc_7677_vector() {
        let first_bare = "n=user,r=rOprNGfwEbeRWgbNEkqO";
        let server_first = "r=rOprNGfwEbeRWgbNEkqO%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0,s=W22ZaJ0SNY7soEsUEjb6gQ==,i=4096";
        let sf = parse_server_first(
            server_first,
            "rOprNGfwEbeRWgbNEkqO",
            SaslMechanism::ScramSha256,
        )
        .unwrap();
        let keys = scram_keys::<Sha256>("pencil", first_bare, server_first, &sf);
        assert_eq!(
            keys.client_final,
            "c=biws,r=rOprNGfwEbeRWgbNEkqO%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0,p=dHzbZapWIk4jUhN+Ute9ytag9zjfMHgsqmmiz7AndVQ="
        );
        let server_final = b"v=6rriTRBi23WpRR/wtup+mMhUZUn/dB5nLTJRsjl95G4=";
        verify_server_final(
            server_final,
            &keys.server_signature,
            SaslMechanism::ScramSha256,
        )
        .unwrap();
        let forged = b"v=AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA=";
        assert!(
            verify_server_final(forged, &keys.server_signature, SaslMechanism::ScramSha256)
                .is_err()
        );
    }

    #[test]
    fn server_first_is_checked() {
        let m = SaslMechanism::ScramSha512;
        let ok = "r=abcXYZ,s=c2FsdA==,i=4096";
        assert_eq!(parse_server_first(ok, "abc", m).unwrap().iterations, 4096);
        for bad in [
            "r=xyz,s=c2FsdA==,i=4096",  // does not extend our nonce
            "r=abc,s=c2FsdA==,i=4096",  // does not extend it at all
            "r=abcX,s=c2FsdA==,i=1000", // downgraded iteration count
            "r=abcX,s=!!!,i=4096",      // salt not base64
            "r=abcX,i=4096",            // no salt
            "e=invalid-proof",
        ] {
            assert!(
                matches!(
                    parse_server_first(bad, "abc", m),
                    Err(TransportError::Authentication { .. })
                ),
                "{bad}"
            );
        }
        assert!(verify_server_final(b"e=other-error", b"x", m).is_err());
    }

    #[test]
    fn an_iteration_count_above_kafkas_maximum_is_refused_before_any_pbkdf2() {
        let m = SaslMechanism::ScramSha256;
        let at_max = "r=abcX,s=c2FsdA==,i=16384";
        assert_eq!(
            parse_server_first(at_max, "abc", m).unwrap().iterations,
            16384
        );
        // A hostile broker asking for billions of PBKDF2 rounds would hold a runtime worker
        // for minutes; the count is refused while parsing, typed, naming the bound.
        for hostile in [
            "r=abcX,s=c2FsdA==,i=16385",
            "r=abcX,s=c2FsdA==,i=4000000000",
        ] {
            match parse_server_first(hostile, "abc", m) {
                Err(TransportError::Authentication { mechanism, reason }) => {
                    assert_eq!(mechanism, "SCRAM-SHA-256");
                    assert!(reason.contains("16384"), "{reason}");
                }
                other => panic!("{hostile}: expected an authentication error, got {other:?}"),
            }
        }
    }

    #[test]
    fn usernames_are_escaped() {
        assert_eq!(sasl_name("a=b,c"), "a=3Db=2Cc");
    }

    #[test]
    fn secrets_stay_out_of_debug_output() {
        let s = Secret::new("hunter2");
        assert!(!format!("{s:?}").contains("hunter2"));
    }
}
