//! TLS for the TCP transport (feature `tls`): rustls with a CA bundle from `ssl.ca.location` or
//! the system roots, an optional client certificate (mTLS), host name verification on unless
//! `ssl.endpoint.identification.algorithm` is empty, and SNI for host names.

use std::sync::Arc;

use rustls::client::WebPkiServerVerifier;
use rustls::client::danger::{HandshakeSignatureValid, ServerCertVerified, ServerCertVerifier};
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer, ServerName, UnixTime};
use rustls::{CertificateError, DigitallySignedStruct, RootCertStore, SignatureScheme};
use tokio::net::TcpStream;
use tokio_rustls::TlsConnector;
use tokio_rustls::client::TlsStream;

use crate::config::SecurityConfig;
use crate::error::TransportError;

fn tls_error(reason: impl Into<String>) -> TransportError {
    TransportError::Tls {
        reason: reason.into(),
    }
}

/// The rustls client settings the TCP transport connects with for `security`: the CA bundle of
/// `ssl.ca.location` (else the system roots), the client certificate and key when both are set,
/// host names verified unless `ssl.endpoint.identification.algorithm` is empty. Hand them to a
/// data-plane client on the same rustls 0.23 (rskafka's `tls_config`, for one), so records and
/// membership trust the same brokers the same way.
///
/// # Errors
///
/// [`TransportError::Tls`] naming the file that cannot be read or the setting that is wrong (a
/// certificate without its key), or when no CA is trusted.
pub fn tls_client_config(
    security: &SecurityConfig,
) -> Result<Arc<rustls::ClientConfig>, TransportError> {
    client_config(security).map(Arc::new)
}

/// Builds the connector once per transport; bad files are a typed TLS error naming the file.
pub(crate) fn connector(security: &SecurityConfig) -> Result<TlsConnector, TransportError> {
    client_config(security).map(|config| TlsConnector::from(Arc::new(config)))
}

/// The rustls client settings `security` describes (see
/// [`tls_client_config`]).
pub(crate) fn client_config(
    security: &SecurityConfig,
) -> Result<rustls::ClientConfig, TransportError> {
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let mut roots = RootCertStore::empty();
    match &security.ssl_ca_location {
        Some(path) => {
            let certs = CertificateDer::pem_file_iter(path)
                .map_err(|e| tls_error(format!("ssl.ca.location {}: {e}", path.display())))?;
            for cert in certs {
                let cert = cert
                    .map_err(|e| tls_error(format!("ssl.ca.location {}: {e}", path.display())))?;
                roots
                    .add(cert)
                    .map_err(|e| tls_error(format!("ssl.ca.location {}: {e}", path.display())))?;
            }
        }
        None => {
            let native = rustls_native_certs::load_native_certs();
            for cert in native.certs {
                let _ = roots.add(cert);
            }
        }
    }
    if roots.is_empty() {
        return Err(tls_error(
            "no trusted CA certificates (ssl.ca.location or the system roots)",
        ));
    }
    let roots = Arc::new(roots);
    let builder = rustls::ClientConfig::builder_with_provider(provider.clone())
        .with_safe_default_protocol_versions()
        .map_err(|e| tls_error(e.to_string()))?;
    let builder = if security.ssl_verify_hostname {
        builder.with_root_certificates(roots)
    } else {
        let inner = WebPkiServerVerifier::builder_with_provider(roots, provider)
            .build()
            .map_err(|e| tls_error(e.to_string()))?;
        builder
            .dangerous()
            .with_custom_certificate_verifier(Arc::new(ChainOnly(inner)))
    };
    Ok(
        match (
            &security.ssl_certificate_location,
            &security.ssl_key_location,
        ) {
            (Some(cert), Some(key)) => {
                let chain: Vec<CertificateDer<'static>> = CertificateDer::pem_file_iter(cert)
                    .and_then(|it| it.collect())
                    .map_err(|e| {
                        tls_error(format!("ssl.certificate.location {}: {e}", cert.display()))
                    })?;
                let key = PrivateKeyDer::from_pem_file(key)
                    .map_err(|e| tls_error(format!("ssl.key.location {}: {e}", key.display())))?;
                builder
                    .with_client_auth_cert(chain, key)
                    .map_err(|e| tls_error(format!("client certificate: {e}")))?
            }
            (None, None) => builder.with_no_client_auth(),
            _ => {
                return Err(tls_error(
                    "ssl.certificate.location and ssl.key.location go together",
                ));
            }
        },
    )
}

/// Runs the TLS handshake on `stream`; any failure (untrusted certificate, wrong name, protocol)
/// is a typed [`TransportError::Tls`].
pub(crate) async fn handshake(
    connector: &TlsConnector,
    host: &str,
    stream: TcpStream,
) -> Result<TlsStream<TcpStream>, TransportError> {
    let name = ServerName::try_from(host.to_owned())
        .map_err(|e| tls_error(format!("server name {host:?}: {e}")))?;
    connector.connect(name, stream).await.map_err(|e| {
        // A listener that closes the connection on a ClientHello does not speak TLS.
        let hint = if e.kind() == std::io::ErrorKind::UnexpectedEof {
            " (the peer closed the connection: a plaintext listener? check security.protocol)"
        } else {
            ""
        };
        tls_error(format!("handshake with {host}: {e}{hint}"))
    })
}

/// Verifies the chain and signatures but accepts any host name
/// (`ssl.endpoint.identification.algorithm=`).
#[derive(Debug)]
struct ChainOnly(Arc<WebPkiServerVerifier>);

impl ServerCertVerifier for ChainOnly {
    fn verify_server_cert(
        &self,
        end_entity: &CertificateDer<'_>,
        intermediates: &[CertificateDer<'_>],
        server_name: &ServerName<'_>,
        ocsp: &[u8],
        now: UnixTime,
    ) -> Result<ServerCertVerified, rustls::Error> {
        match self
            .0
            .verify_server_cert(end_entity, intermediates, server_name, ocsp, now)
        {
            Err(rustls::Error::InvalidCertificate(CertificateError::NotValidForName))
            | Err(rustls::Error::InvalidCertificate(CertificateError::NotValidForNameContext {
                ..
            })) => Ok(ServerCertVerified::assertion()),
            other => other,
        }
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        self.0.verify_tls12_signature(message, cert, dss)
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        self.0.verify_tls13_signature(message, cert, dss)
    }

    fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
        self.0.supported_verify_schemes()
    }
}
