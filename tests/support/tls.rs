//! TLS for the tests' own servers (the hostile member, the https OTLP receiver): a private CA
//! and a certificate for 127.0.0.1 (openssl), the listener axum serves over (each connection's
//! handshake done as it is accepted), and PEM as a kubeconfig's `*-data` field holds it.

use std::sync::Arc;
use std::time::Duration;

/// TLS connections one after another; failed or stalled (10 s) handshakes skipped. Handshakes
/// in the accept loop: one stalled client would hold up the others, which is fine for a test
/// server with few clients.
pub struct Listener {
    pub tcp: tokio::net::TcpListener,
    pub acceptor: tokio_rustls::TlsAcceptor,
}

impl axum::serve::Listener for Listener {
    type Io = tokio_rustls::server::TlsStream<tokio::net::TcpStream>;
    type Addr = std::net::SocketAddr;

    async fn accept(&mut self) -> (Self::Io, Self::Addr) {
        loop {
            let Ok((tcp, addr)) = self.tcp.accept().await else {
                continue;
            };
            if let Ok(Ok(tls)) =
                tokio::time::timeout(Duration::from_secs(10), self.acceptor.accept(tcp)).await
            {
                return (tls, addr);
            }
        }
    }

    fn local_addr(&self) -> std::io::Result<Self::Addr> {
        self.tcp.local_addr()
    }
}

/// A server-side TLS acceptor for the certificate chain and key in PEM.
pub fn acceptor(cert_pem: &[u8], key_pem: &[u8]) -> tokio_rustls::TlsAcceptor {
    use tokio_rustls::rustls;
    use tokio_rustls::rustls::pki_types::pem::PemObject;
    use tokio_rustls::rustls::pki_types::{CertificateDer, PrivateKeyDer};
    let certs = CertificateDer::pem_slice_iter(cert_pem)
        .collect::<Result<Vec<_>, _>>()
        .expect("certificate PEM");
    let key = PrivateKeyDer::from_pem_slice(key_pem).expect("key PEM");
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let config = rustls::ServerConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .expect("protocols")
        .with_no_client_auth()
        .with_single_cert(certs, key)
        .expect("server certificate");
    tokio_rustls::TlsAcceptor::from(Arc::new(config))
}

/// A CA and a certificate for 127.0.0.1 it signed (EC P-256, one day), made with the openssl
/// CLI in `dir`: (CA PEM, certificate PEM, key PEM).
pub fn make_pki(dir: &std::path::Path) -> (Vec<u8>, Vec<u8>, Vec<u8>) {
    let openssl = |args: &[&str]| {
        let out = std::process::Command::new("openssl")
            .args(args)
            .current_dir(dir)
            .output()
            .expect("openssl runs");
        assert!(
            out.status.success(),
            "openssl {args:?}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
    };
    let ec = [
        "-newkey",
        "ec",
        "-pkeyopt",
        "ec_paramgen_curve:prime256v1",
        "-nodes",
    ];
    let mut ca = vec![
        "req",
        "-x509",
        "-days",
        "1",
        "-subj",
        "/CN=fleetnet test CA",
    ];
    ca.extend(ec);
    ca.extend(["-keyout", "ca.key", "-out", "ca.pem"]);
    openssl(&ca);
    let mut csr = vec!["req", "-subj", "/CN=127.0.0.1"];
    csr.extend(ec);
    csr.extend(["-keyout", "server.key", "-out", "server.csr"]);
    openssl(&csr);
    std::fs::write(dir.join("ext"), "subjectAltName=IP:127.0.0.1\n").expect("write ext");
    openssl(&[
        "x509",
        "-req",
        "-in",
        "server.csr",
        "-CA",
        "ca.pem",
        "-CAkey",
        "ca.key",
        "-CAcreateserial",
        "-days",
        "1",
        "-extfile",
        "ext",
        "-out",
        "server.pem",
    ]);
    let read = |f: &str| std::fs::read(dir.join(f)).expect("read PEM");
    (read("ca.pem"), read("server.pem"), read("server.key"))
}

/// `data` in standard base64 with padding, as a kubeconfig's `*-data` fields hold it.
pub fn base64(data: &[u8]) -> String {
    serde_json::to_value(k8s_openapi::ByteString(data.to_vec()))
        .ok()
        .and_then(|v| v.as_str().map(str::to_string))
        .expect("base64")
}

#[test]
fn base64_matches_the_standard_alphabet_and_padding() {
    assert_eq!(base64(b""), "");
    assert_eq!(base64(b"f"), "Zg==");
    assert_eq!(base64(b"fo"), "Zm8=");
    assert_eq!(base64(b"foo"), "Zm9v");
    assert_eq!(base64(b"foobar"), "Zm9vYmFy");
}
