#!/usr/bin/env bash
# Throwaway TLS material for the test broker's SASL_SSL listener, made with openssl only
# (no keytool, no JVM). broker.sh runs it on every single-node start.
#
#   certs.sh OUT_DIR      (re)creates OUT_DIR with:
#
#   ca.pem, ca.key                   test CA (self-signed, CA:TRUE)
#   broker.crt, broker.key           broker certificate signed by the CA; CN and SAN
#                                    DNS:localhost, IP:127.0.0.1, IP:::1; serverAuth
#   broker.keystore.pem              broker.key + broker.crt: the broker's
#                                    ssl.keystore.type=PEM keystore (the broker sends
#                                    the leaf alone, as the CA is the trust anchor)
#   client.pem, client.key           client certificate signed by the CA (clientAuth), for
#                                    mTLS checks (the broker requests, never requires one)
#   untrusted-ca.pem, untrusted-ca.key
#                                    a second CA that signed nothing the broker serves: a
#                                    client trusting only it must fail the handshake
#
# Keys are unencrypted PKCS#8 PEM ("BEGIN PRIVATE KEY"), ECDSA P-256 (generated in
# milliseconds, unlike RSA; supported by Java's TLS, Kafka's PEM keystore and rustls).
# Certificates are X.509 v3, valid from now for 30 days, ecdsa-with-SHA256.
set -euo pipefail

(($# == 1)) || { echo "usage: $0 OUT_DIR" >&2; exit 2; }
out=$1
OPENSSL=${OPENSSL:-openssl}
DAYS=30

rm -rf "$out"
mkdir -p "$out"
cd "$out"
umask 077

# Self-signed CA $1 (file stem) with common name $2.
new_ca() {
    "$OPENSSL" req -x509 -new -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes \
        -keyout "$1.key" -out "$1.pem" -days "$DAYS" -sha256 -subj "/CN=$2" \
        -addext "basicConstraints=critical,CA:TRUE" \
        -addext "keyUsage=critical,keyCertSign,cRLSign" \
        -addext "subjectKeyIdentifier=hash" 2>/dev/null
}

# Leaf $1 (file stem) with common name $2, signed by ca.pem, extensions from $1.ext.
# A random serial: certificates of successive runs never share issuer+serial.
new_leaf() {
    "$OPENSSL" req -new -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes \
        -keyout "$1.key" -subj "/CN=$2" 2>/dev/null |
        "$OPENSSL" x509 -req -CA ca.pem -CAkey ca.key -set_serial "0x$("$OPENSSL" rand -hex 16)" \
            -days "$DAYS" -sha256 -extfile "$1.ext" -out "$1.crt" 2>/dev/null
    rm -f "$1.ext"
}

new_ca ca "consumer-membership test CA"
new_ca untrusted-ca "consumer-membership UNTRUSTED test CA"

cat >broker.ext <<'EOF'
basicConstraints=critical,CA:FALSE
keyUsage=critical,digitalSignature
extendedKeyUsage=serverAuth
subjectAltName=DNS:localhost,IP:127.0.0.1,IP:::1
authorityKeyIdentifier=keyid
EOF
new_leaf broker localhost

cat >client.ext <<'EOF'
basicConstraints=critical,CA:FALSE
keyUsage=critical,digitalSignature
extendedKeyUsage=clientAuth
subjectAltName=DNS:client
authorityKeyIdentifier=keyid
EOF
new_leaf client client
mv client.crt client.pem

cat broker.key broker.crt >broker.keystore.pem

# Fail here, not in the broker, if a file is missing or the chain does not verify.
"$OPENSSL" verify -CAfile ca.pem broker.crt client.pem >/dev/null
chmod 644 ./*.pem ./*.crt
