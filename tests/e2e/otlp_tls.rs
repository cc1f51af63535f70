//! OTLP to an https collector signed by a private CA (`OTEL_EXPORTER_OTLP_CERTIFICATE`), over
//! gRPC and over HTTP/protobuf: spans arrive with the CA, and none without it (verification
//! is on); plain http off loopback is refused unless asked for.

use crate::support::otlp;

use std::time::Duration;

use fleetnet_hub::telemetry::{OtlpConfig, SamplingConfig, tracer_provider};
use opentelemetry::trace::{Span as _, Tracer as _, TracerProvider as _};
use otlp::{Receiver, TestPki};

/// Exports `n` spans to `receiver` through the product's exporter; returns how many arrived.
async fn export(receiver: &Receiver, grpc: bool, ca: Option<&std::path::Path>, n: usize) -> usize {
    let vars = {
        let endpoint = receiver.endpoint.clone();
        let ca = ca.map(|p| p.display().to_string());
        move |k: &str| match k {
            "OTEL_EXPORTER_OTLP_ENDPOINT" => Some(endpoint.clone()),
            "OTEL_EXPORTER_OTLP_PROTOCOL" => {
                Some(if grpc { "grpc" } else { "http/protobuf" }.into())
            }
            "OTEL_EXPORTER_OTLP_TIMEOUT" => Some("3000".into()),
            "OTEL_EXPORTER_OTLP_CERTIFICATE" => ca.clone(),
            _ => None,
        }
    };
    let config = OtlpConfig::from_vars(vars)
        .expect("valid")
        .expect("configured");
    assert!(
        config.endpoint.starts_with("https://"),
        "{}",
        config.endpoint
    );
    let provider =
        tracer_provider(&config, &SamplingConfig::default(), "otlp-tls-test").expect("provider");
    let tracer = provider.tracer("t");
    for i in 0..n {
        let mut span = tracer.start(format!("tls-span-{i}"));
        span.end();
    }
    // Flushing blocks: off the runtime's worker.
    let flushed = tokio::task::spawn_blocking(move || {
        let r = provider.force_flush();
        let _ = provider.shutdown();
        r
    })
    .await
    .expect("flush");
    if ca.is_some() {
        flushed.expect("flushed to the https collector");
    }
    tokio::time::sleep(Duration::from_millis(200)).await;
    receiver
        .spans()
        .iter()
        .filter(|s| s.name.starts_with("tls-span-"))
        .count()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn spans_reach_an_https_collector_with_a_private_ca_over_grpc_and_http() {
    fleetnet_hub::telemetry::install_crypto_provider();
    let pki = TestPki::new();
    for grpc in [true, false] {
        let protocol = if grpc { "grpc" } else { "http/protobuf" };
        let receiver = if grpc {
            Receiver::grpc_tls(&pki).await
        } else {
            Receiver::https(&pki).await
        };
        let arrived = export(&receiver, grpc, Some(&pki.ca_pem), 3).await;
        assert_eq!(
            arrived, 3,
            "{protocol}: spans over https with the private CA"
        );

        // Without the CA the collector's certificate is not trusted: nothing arrives.
        let untrusted = if grpc {
            Receiver::grpc_tls(&pki).await
        } else {
            Receiver::https(&pki).await
        };
        let arrived = export(&untrusted, grpc, None, 2).await;
        assert_eq!(arrived, 0, "{protocol}: verification must be on");
        println!("otlp tls {protocol}: 3 spans with the CA, 0 without");
    }
}
