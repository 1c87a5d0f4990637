// Checks the single-node test broker's SASL_SSL and SASL_PLAINTEXT listeners with Kafka's
// own Java client (kafka-clients from the broker's libs/): a diagnostic for when the Rust
// TLS/SASL tests fail, to tell a broker-side problem from a client-side one.
//
//   set -a; . "$dir/security.env"; set +a
//   java -cp "$dir/libs/*" tests/kafka/SecurityCheck.java
//
// (JDK 11+ single-file source launcher; reads the KAFKA_SASL_* / KAFKA_TLS_* variables
// that broker.sh writes to security.env.) Prints one line per check; exit 0 if all pass,
// 1 if any fails, 2 on bad usage.
//
// Checks: every mechanism (PLAIN, SCRAM-SHA-256, SCRAM-SHA-512) on both listeners
// (describeCluster + listTopics; the broker must advertise the listener's own port);
// SASL_SSL with a "localhost" bootstrap (DNS SAN) and with the client certificate (mTLS);
// a wrong password and an unknown user fail with SaslAuthenticationException; a client
// trusting only the untrusted CA fails with SslAuthenticationException; and a raw
// SaslHandshake + SaslAuthenticate exchange on each listener reports a session lifetime
// (KIP-368, connections.max.reauth.ms) of at most 60 s.
//
// Client logging: log4j2 finds no configuration here and keeps its default, ERROR only; the
// expected authentication and handshake failures each log one such ERROR line.

import java.io.DataInputStream;
import java.io.DataOutputStream;
import java.io.FileInputStream;
import java.io.InputStream;
import java.net.Socket;
import java.nio.ByteBuffer;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.security.KeyStore;
import java.security.cert.Certificate;
import java.security.cert.CertificateFactory;
import java.util.Collection;
import java.util.Properties;
import java.util.concurrent.ExecutionException;
import java.util.concurrent.TimeUnit;

import javax.net.ssl.SSLContext;
import javax.net.ssl.SSLParameters;
import javax.net.ssl.SSLSocket;
import javax.net.ssl.TrustManagerFactory;

import org.apache.kafka.clients.CommonClientConfigs;
import org.apache.kafka.clients.admin.Admin;
import org.apache.kafka.clients.admin.AdminClientConfig;
import org.apache.kafka.common.Node;
import org.apache.kafka.common.config.SaslConfigs;
import org.apache.kafka.common.config.SslConfigs;
import org.apache.kafka.common.errors.SaslAuthenticationException;
import org.apache.kafka.common.errors.SslAuthenticationException;
import org.apache.kafka.common.message.SaslAuthenticateRequestData;
import org.apache.kafka.common.message.SaslHandshakeRequestData;
import org.apache.kafka.common.protocol.ApiKeys;
import org.apache.kafka.common.protocol.Errors;
import org.apache.kafka.common.requests.AbstractRequest;
import org.apache.kafka.common.requests.AbstractResponse;
import org.apache.kafka.common.requests.RequestHeader;
import org.apache.kafka.common.requests.SaslAuthenticateRequest;
import org.apache.kafka.common.requests.SaslAuthenticateResponse;
import org.apache.kafka.common.requests.SaslHandshakeRequest;
import org.apache.kafka.common.requests.SaslHandshakeResponse;

public class SecurityCheck {
    static final int TIMEOUT_MS = 10000;
    static final long MAX_SESSION_LIFETIME_MS = 60000;
    static final String[] MECHANISMS = {"PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512"};

    static String sslBootstrap, saslBootstrap, ca, untrustedCa, clientCert, clientKey, user, password;
    static int failures = 0;

    public static void main(String[] args) throws Exception {
        if (args.length != 0) {
            System.err.println("usage: SecurityCheck (configured by the variables of security.env)");
            System.exit(2);
        }
        sslBootstrap = env("KAFKA_SASL_SSL_BOOTSTRAP");
        saslBootstrap = env("KAFKA_SASL_PLAINTEXT_BOOTSTRAP");
        ca = env("KAFKA_TLS_CA");
        untrustedCa = env("KAFKA_TLS_UNTRUSTED_CA");
        clientCert = env("KAFKA_TLS_CLIENT_CERT");
        clientKey = env("KAFKA_TLS_CLIENT_KEY");
        user = env("KAFKA_SASL_USER");
        password = env("KAFKA_SASL_PASSWORD");
        int sslPort = port(sslBootstrap), saslPort = port(saslBootstrap);

        for (String m : MECHANISMS) {
            expectOk("SASL_SSL " + m, ssl(m, user, password, ca), sslPort);
        }
        for (String m : MECHANISMS) {
            expectOk("SASL_PLAINTEXT " + m, sasl(m, user, password), saslPort);
        }
        Properties p = ssl("SCRAM-SHA-512", user, password, ca);
        p.put(AdminClientConfig.BOOTSTRAP_SERVERS_CONFIG, "localhost:" + sslPort);
        expectOk("SASL_SSL SCRAM-SHA-512, bootstrap localhost (DNS SAN)", p, sslPort);
        p = ssl("SCRAM-SHA-512", user, password, ca);
        p.put(SslConfigs.SSL_KEYSTORE_TYPE_CONFIG, "PEM");
        p.put(SslConfigs.SSL_KEYSTORE_CERTIFICATE_CHAIN_CONFIG, Files.readString(Path.of(clientCert)));
        p.put(SslConfigs.SSL_KEYSTORE_KEY_CONFIG, Files.readString(Path.of(clientKey)));
        expectOk("SASL_SSL SCRAM-SHA-512 + client certificate (mTLS)", p, sslPort);

        expectFail("SASL_SSL SCRAM-SHA-512, wrong password",
                ssl("SCRAM-SHA-512", user, password + "-wrong", ca), SaslAuthenticationException.class);
        expectFail("SASL_SSL PLAIN, wrong password",
                ssl("PLAIN", user, password + "-wrong", ca), SaslAuthenticationException.class);
        expectFail("SASL_PLAINTEXT PLAIN, wrong password",
                sasl("PLAIN", user, password + "-wrong"), SaslAuthenticationException.class);
        expectFail("SASL_PLAINTEXT SCRAM-SHA-256, unknown user",
                sasl("SCRAM-SHA-256", "mallory", password), SaslAuthenticationException.class);
        expectFail("SASL_SSL, only the untrusted CA trusted",
                ssl("SCRAM-SHA-512", user, password, untrustedCa), SslAuthenticationException.class);

        sessionLifetime("SASL_PLAINTEXT", saslBootstrap, false);
        sessionLifetime("SASL_SSL", sslBootstrap, true);

        System.out.println(failures == 0 ? "SecurityCheck: all checks passed"
                : "SecurityCheck: " + failures + " check(s) FAILED");
        System.exit(failures == 0 ? 0 : 1);
    }

    static String env(String name) {
        String v = System.getenv(name);
        if (v == null || v.isEmpty()) {
            System.err.println("SecurityCheck: " + name + " is not set (source security.env)");
            System.exit(2);
        }
        return v;
    }

    static int port(String hostPort) {
        return Integer.parseInt(hostPort.substring(hostPort.lastIndexOf(':') + 1));
    }

    static Properties base(String bootstrap, String protocol, String mechanism, String u, String pw) {
        Properties p = new Properties();
        p.put(AdminClientConfig.BOOTSTRAP_SERVERS_CONFIG, bootstrap);
        p.put(AdminClientConfig.CLIENT_ID_CONFIG, "security-check");
        p.put(AdminClientConfig.REQUEST_TIMEOUT_MS_CONFIG, TIMEOUT_MS);
        p.put(AdminClientConfig.DEFAULT_API_TIMEOUT_MS_CONFIG, TIMEOUT_MS);
        p.put(CommonClientConfigs.SECURITY_PROTOCOL_CONFIG, protocol);
        p.put(SaslConfigs.SASL_MECHANISM, mechanism);
        String module = mechanism.equals("PLAIN") ? "org.apache.kafka.common.security.plain.PlainLoginModule"
                : "org.apache.kafka.common.security.scram.ScramLoginModule";
        p.put(SaslConfigs.SASL_JAAS_CONFIG,
                module + " required username=\"" + u + "\" password=\"" + pw + "\";");
        return p;
    }

    static Properties sasl(String mechanism, String u, String pw) {
        return base(saslBootstrap, "SASL_PLAINTEXT", mechanism, u, pw);
    }

    /** SASL_SSL trusting only the PEM CA file caFile; hostname verification stays on (https). */
    static Properties ssl(String mechanism, String u, String pw, String caFile) {
        Properties p = base(sslBootstrap, "SASL_SSL", mechanism, u, pw);
        p.put(SslConfigs.SSL_TRUSTSTORE_TYPE_CONFIG, "PEM");
        p.put(SslConfigs.SSL_TRUSTSTORE_LOCATION_CONFIG, caFile);
        return p;
    }

    /** describeCluster + listTopics must succeed and the broker must advertise port. */
    static void expectOk(String what, Properties p, int port) {
        try (Admin admin = Admin.create(p)) {
            Collection<Node> nodes = admin.describeCluster().nodes().get(TIMEOUT_MS, TimeUnit.MILLISECONDS);
            int topics = admin.listTopics().names().get(TIMEOUT_MS, TimeUnit.MILLISECONDS).size();
            boolean advertised = nodes.stream().allMatch(n -> n.port() == port);
            report(advertised, what, "cluster " + nodes + ", " + topics + " topic(s)"
                    + (advertised ? "" : "; expected every node on port " + port));
        } catch (Exception e) {
            report(false, what, "unexpected " + cause(e));
        }
    }

    /** describeCluster must fail with an exception of class expected. */
    static void expectFail(String what, Properties p, Class<? extends Exception> expected) {
        try (Admin admin = Admin.create(p)) {
            Collection<Node> nodes = admin.describeCluster().nodes().get(TIMEOUT_MS, TimeUnit.MILLISECONDS);
            report(false, what, "succeeded (" + nodes + "), expected " + expected.getSimpleName());
        } catch (Exception e) {
            Throwable c = e instanceof ExecutionException ? e.getCause() : e;
            report(expected.isInstance(c), what, "rejected: " + cause(e));
        }
    }

    /**
     * SaslHandshake v1 + SaslAuthenticate v2 (PLAIN) by hand, as a non-Java client does
     * it: the response must carry a session lifetime in (0, MAX_SESSION_LIFETIME_MS].
     */
    static void sessionLifetime(String listener, String bootstrap, boolean tls) {
        String what = listener + " SaslAuthenticate session_lifetime_ms (KIP-368)";
        String host = bootstrap.substring(0, bootstrap.lastIndexOf(':'));
        try (Socket s = tls ? tlsSocket(host, port(bootstrap)) : new Socket(host, port(bootstrap))) {
            s.setSoTimeout(TIMEOUT_MS);
            DataOutputStream out = new DataOutputStream(s.getOutputStream());
            DataInputStream in = new DataInputStream(s.getInputStream());
            SaslHandshakeResponse hs = (SaslHandshakeResponse) roundTrip(out, in, ApiKeys.SASL_HANDSHAKE, 1,
                    new SaslHandshakeRequest.Builder(new SaslHandshakeRequestData().setMechanism("PLAIN")));
            if (hs.error() != Errors.NONE) {
                report(false, what, "SaslHandshake: " + hs.error() + ", enabled " + hs.data().mechanisms());
                return;
            }
            byte[] token = ("\0" + user + "\0" + password).getBytes(StandardCharsets.UTF_8);
            SaslAuthenticateResponse auth = (SaslAuthenticateResponse) roundTrip(out, in,
                    ApiKeys.SASL_AUTHENTICATE, 2,
                    new SaslAuthenticateRequest.Builder(new SaslAuthenticateRequestData().setAuthBytes(token)));
            long lifetime = auth.sessionLifetimeMs();
            report(auth.error() == Errors.NONE && lifetime > 0 && lifetime <= MAX_SESSION_LIFETIME_MS, what,
                    auth.error() + ", session_lifetime_ms " + lifetime + " (mechanisms "
                            + hs.data().mechanisms() + ")");
        } catch (Exception e) {
            report(false, what, "unexpected " + cause(e));
        }
    }

    static int correlationId = 0;

    static AbstractResponse roundTrip(DataOutputStream out, DataInputStream in, ApiKeys api, int version,
            AbstractRequest.Builder<?> builder) throws Exception {
        RequestHeader header = new RequestHeader(api, (short) version, "security-check", ++correlationId);
        ByteBuffer req = builder.build((short) version).serializeWithHeader(header);
        out.writeInt(req.remaining());
        out.write(req.array(), req.arrayOffset() + req.position(), req.remaining());
        out.flush();
        byte[] resp = new byte[in.readInt()];
        in.readFully(resp);
        return AbstractResponse.parseResponse(ByteBuffer.wrap(resp), header);
    }

    /** A TLS socket trusting only the test CA, with HTTPS-style hostname checking. */
    static Socket tlsSocket(String host, int port) throws Exception {
        KeyStore ts = KeyStore.getInstance(KeyStore.getDefaultType());
        ts.load(null, null);
        try (InputStream is = new FileInputStream(ca)) {
            int i = 0;
            for (Certificate c : CertificateFactory.getInstance("X.509").generateCertificates(is)) {
                ts.setCertificateEntry("ca" + i++, c);
            }
        }
        TrustManagerFactory tmf = TrustManagerFactory.getInstance(TrustManagerFactory.getDefaultAlgorithm());
        tmf.init(ts);
        SSLContext ctx = SSLContext.getInstance("TLS");
        ctx.init(null, tmf.getTrustManagers(), null);
        SSLSocket s = (SSLSocket) ctx.getSocketFactory().createSocket(host, port);
        SSLParameters params = s.getSSLParameters();
        params.setEndpointIdentificationAlgorithm("HTTPS");
        s.setSSLParameters(params);
        s.startHandshake();
        return s;
    }

    static String cause(Throwable e) {
        Throwable c = e instanceof ExecutionException && e.getCause() != null ? e.getCause() : e;
        return c.getClass().getSimpleName() + ": " + c.getMessage();
    }

    static void report(boolean ok, String what, String detail) {
        if (!ok) failures++;
        System.out.println((ok ? "ok   " : "FAIL ") + what + ": " + detail);
    }
}
