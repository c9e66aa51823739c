//! Where the main command's spans go: to the Dev UI's store when it serves HTTP, and over
//! OTLP (http/protobuf, batched) to a collector when the standard variables name one:
//! `OTEL_EXPORTER_OTLP_ENDPOINT` (spans go to its `/v1/traces`) or
//! `OTEL_EXPORTER_OTLP_TRACES_ENDPOINT` (as is), with `OTEL_EXPORTER_OTLP_HEADERS`,
//! `OTEL_EXPORTER_OTLP_TIMEOUT`, `OTEL_BSP_*` for the batches, `OTEL_SERVICE_NAME` (else
//! `bidi-demo`) and `OTEL_RESOURCE_ATTRIBUTES`; `OTEL_TRACES_EXPORTER=none` turns it off. The
//! spans still batched are sent at shutdown.
//!
//! Callers' traces continue: OpenTelemetry's W3C propagator is installed, so a request's
//! `traceparent` makes its turn a child of the caller's span, and the model's requests carry
//! theirs.

use opentelemetry::global;
use opentelemetry_otlp::{ExporterBuildError, SpanExporter, WithExportConfig as _};
use opentelemetry_sdk::Resource;
use opentelemetry_sdk::propagation::TraceContextPropagator;
use opentelemetry_sdk::trace::{SdkTracerProvider, SpanProcessor};

/// The service name when neither `OTEL_SERVICE_NAME` nor `OTEL_RESOURCE_ATTRIBUTES` names one.
const SERVICE: &str = "bidi-demo";

/// The installed tracer provider; [`shutdown`](Self::shutdown) sends what is still batched.
pub(crate) struct Telemetry {
    provider: SdkTracerProvider,
    /// The collector's endpoint, when spans are exported.
    exporting: Option<String>,
}

impl Telemetry {
    /// Installs the global tracer provider, with `store` (the Dev UI's) among its processors
    /// if given, and the W3C propagator.
    ///
    /// # Errors
    ///
    /// The OTLP variables ask for what this command cannot do (a protocol other than
    /// http/protobuf), or name an endpoint the exporter refuses.
    pub(crate) fn install(store: Option<impl SpanProcessor + 'static>) -> Result<Self, String> {
        global::set_text_map_propagator(TraceContextPropagator::new());
        let mut builder = SdkTracerProvider::builder().with_resource(resource());
        if let Some(store) = store {
            builder = builder.with_span_processor(store);
        }
        let exporting = endpoint()?;
        if exporting.is_some() {
            let exporter = SpanExporter::builder()
                .with_http()
                .with_protocol(opentelemetry_otlp::Protocol::HttpBinary)
                .build()
                .map_err(|error: ExporterBuildError| format!("OTLP: {error}"))?;
            builder = builder.with_batch_exporter(exporter);
        }
        let provider = builder.build();
        global::set_tracer_provider(provider.clone());
        Ok(Self {
            provider,
            exporting,
        })
    }

    /// Where spans are exported, if anywhere.
    pub(crate) fn exporting(&self) -> Option<&str> {
        self.exporting.as_deref()
    }

    /// Sends the spans still batched, and stops exporting.
    pub(crate) fn shutdown(self) {
        if let Err(error) = self.provider.shutdown()
            && self.exporting.is_some()
        {
            eprintln!("error: the last spans were not exported: {error}");
        }
    }
}

/// The variable's value, if set and not empty.
fn var(name: &str) -> Option<String> {
    std::env::var(name).ok().filter(|value| !value.is_empty())
}

/// The collector the variables name, if they name one and do not turn exporting off.
fn endpoint() -> Result<Option<String>, String> {
    if var("OTEL_TRACES_EXPORTER").is_some_and(|exporter| exporter == "none") {
        return Ok(None);
    }
    let endpoint = var("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT").or_else(|| {
        var("OTEL_EXPORTER_OTLP_ENDPOINT")
            .map(|base| format!("{}/v1/traces", base.trim_end_matches('/')))
    });
    if endpoint.is_none() {
        return Ok(None);
    }
    let protocol =
        var("OTEL_EXPORTER_OTLP_TRACES_PROTOCOL").or_else(|| var("OTEL_EXPORTER_OTLP_PROTOCOL"));
    match protocol.as_deref() {
        None | Some("http/protobuf") => Ok(endpoint),
        Some(other) => Err(format!(
            "OTEL_EXPORTER_OTLP_PROTOCOL is {other}: this command exports over http/protobuf \
             (unset it, or set it to http/protobuf)"
        )),
    }
}

/// The service's resource: the variables' attributes, named `bidi-demo` unless they name it.
fn resource() -> Resource {
    let named = var("OTEL_SERVICE_NAME").is_some()
        || var("OTEL_RESOURCE_ATTRIBUTES").is_some_and(|attributes| {
            attributes
                .split(',')
                .any(|pair| pair.trim_start().starts_with("service.name="))
        });
    let builder = Resource::builder();
    if named {
        builder.build()
    } else {
        builder.with_service_name(SERVICE).build()
    }
}
