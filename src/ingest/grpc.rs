//! OTLP/gRPC adapter: an export's bytes in, the ingest service's answer out. Nothing else.
//!
//! The message is taken as the bytes it arrived in and decoded by the same pure decoder as an
//! OTLP/HTTP protobuf body ([`otlp::traces_from_protobuf_bytes`]), off the async workers. The
//! generated tonic server decodes through tonic's chunked buffer instead, which cost a third
//! of the drop path's throughput (a `BytesMut` split per field); and a body that is not
//! protobuf is now refused and counted like HTTP's (`INVALID_ARGUMENT`, `decode_error`).

use std::convert::Infallible;
use std::future::Future;
use std::marker::PhantomData;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Instant;
use tracing::Instrument;

use bytes::{Buf, Bytes};
use opentelemetry_proto::tonic::collector::logs::v1::{
    ExportLogsPartialSuccess, ExportLogsServiceResponse,
};
use opentelemetry_proto::tonic::collector::trace::v1::{
    ExportTracePartialSuccess, ExportTraceServiceResponse,
};
use tonic::codec::{Codec, CompressionEncoding, DecodeBuf, Decoder, EncodeBuf, Encoder};
use tonic::codegen::http;
use tonic::{Request, Response, Status};

use super::error::IngestError;
use super::otlp::{self, DecodeError, Decoded};
use super::service::{IngestService, PartialSuccess, Transport};
use crate::auth::{Gate, Need};

/// One OTLP export service: its gRPC names, how its body decodes, how its answer reads.
pub trait Signal: Send + Sync + 'static {
    /// The gRPC service name, as routed.
    const SERVICE: &'static str;
    /// The path of its one method, `Export`.
    const EXPORT: &'static str;
    type Response: prost::Message + Default + Send + 'static;
    fn decode(service: &IngestService, body: &[u8]) -> Result<Decoded, DecodeError>;
    fn ingest(
        service: Arc<IngestService>,
        admitted: super::service::Admission,
        decoded: Decoded,
        received: Instant,
    ) -> impl Future<Output = Result<PartialSuccess, IngestError>> + Send;
    fn response(reply: PartialSuccess) -> Self::Response;
}

pub struct Traces;
pub struct Logs;

impl Signal for Traces {
    const SERVICE: &'static str = "opentelemetry.proto.collector.trace.v1.TraceService";
    const EXPORT: &'static str = "/opentelemetry.proto.collector.trace.v1.TraceService/Export";
    type Response = ExportTraceServiceResponse;

    fn decode(service: &IngestService, body: &[u8]) -> Result<Decoded, DecodeError> {
        otlp::traces_from_protobuf_bytes(body, &service.contracts())
    }

    async fn ingest(
        service: Arc<IngestService>,
        admitted: super::service::Admission,
        decoded: Decoded,
        received: Instant,
    ) -> Result<PartialSuccess, IngestError> {
        service
            .traces(admitted, Transport::Grpc, decoded, received)
            .await
    }

    fn response(reply: PartialSuccess) -> ExportTraceServiceResponse {
        let partial_success = (reply.rejected > 0 || !reply.message.is_empty()).then_some(
            ExportTracePartialSuccess {
                rejected_spans: reply.rejected as i64,
                error_message: reply.message,
            },
        );
        ExportTraceServiceResponse { partial_success }
    }
}

impl Signal for Logs {
    const SERVICE: &'static str = "opentelemetry.proto.collector.logs.v1.LogsService";
    const EXPORT: &'static str = "/opentelemetry.proto.collector.logs.v1.LogsService/Export";
    type Response = ExportLogsServiceResponse;

    fn decode(_: &IngestService, body: &[u8]) -> Result<Decoded, DecodeError> {
        otlp::logs_from_protobuf_bytes(body)
    }

    async fn ingest(
        service: Arc<IngestService>,
        admitted: super::service::Admission,
        decoded: Decoded,
        received: Instant,
    ) -> Result<PartialSuccess, IngestError> {
        service
            .logs(admitted, Transport::Grpc, decoded, received)
            .await
    }

    fn response(reply: PartialSuccess) -> ExportLogsServiceResponse {
        let partial_success =
            (reply.rejected > 0 || !reply.message.is_empty()).then_some(ExportLogsPartialSuccess {
                rejected_log_records: reply.rejected as i64,
                error_message: reply.message,
            });
        ExportLogsServiceResponse { partial_success }
    }
}

/// One export: admit, decode off the async workers, ingest, answer.
async fn export<S: Signal>(
    service: Arc<IngestService>,
    body: Bytes,
) -> Result<S::Response, Status> {
    let span = tracing::info_span!("otlp.export", transport = "grpc", bytes = body.len());
    export_in::<S>(service, body).instrument(span).await
}

async fn export_in<S: Signal>(
    service: Arc<IngestService>,
    body: Bytes,
) -> Result<S::Response, Status> {
    let received = Instant::now();
    let admitted = service.admit().map_err(|e| e.to_status())?;
    // The permit travels with the decode: a caller that leaves does not free capacity the
    // (uncancellable) decode is still using.
    let decoding = service.clone();
    let export = tracing::Span::current();
    let (decoded, admitted) = tokio::task::spawn_blocking(move || {
        let _decode = tracing::info_span!(parent: &export, "otlp.decode").entered();
        (S::decode(&decoding, &body), admitted)
    })
    .await
    .map_err(|e| Status::internal(format!("decoder failed: {e}")))?;
    let decoded = decoded.map_err(|e| {
        let e = IngestError::Decode(e.to_string());
        service.refused(&e);
        e.to_status()
    })?;
    let reply = S::ingest(service, admitted, decoded, received)
        .await
        .map_err(|e| e.to_status())?;
    Ok(S::response(reply))
}

/// The codec of an export: the request as the bytes it arrived in (a view of tonic's buffer,
/// not a copy), the response encoded by prost.
struct ExportCodec<R>(PhantomData<R>);

impl<R: prost::Message + Send + 'static> Codec for ExportCodec<R> {
    type Encode = R;
    type Decode = Bytes;
    type Encoder = ExportCodec<R>;
    type Decoder = ExportCodec<R>;

    fn encoder(&mut self) -> Self::Encoder {
        ExportCodec(PhantomData)
    }

    fn decoder(&mut self) -> Self::Decoder {
        ExportCodec(PhantomData)
    }
}

impl<R: prost::Message> Encoder for ExportCodec<R> {
    type Item = R;
    type Error = Status;

    fn encode(&mut self, item: R, dst: &mut EncodeBuf<'_>) -> Result<(), Status> {
        item.encode(dst)
            .map_err(|e| Status::internal(format!("encoding the response: {e}")))
    }
}

impl<R> Decoder for ExportCodec<R> {
    type Item = Bytes;
    type Error = Status;

    fn decode(&mut self, src: &mut DecodeBuf<'_>) -> Result<Option<Bytes>, Status> {
        Ok(Some(src.copy_to_bytes(src.remaining())))
    }
}

/// The unary method: hands the bytes to [`export`].
struct ExportMethod<S>(Arc<IngestService>, PhantomData<S>);

impl<S: Signal> tonic::server::UnaryService<Bytes> for ExportMethod<S> {
    type Response = S::Response;
    type Future = Pin<Box<dyn Future<Output = Result<Response<S::Response>, Status>> + Send>>;

    fn call(&mut self, request: Request<Bytes>) -> Self::Future {
        let service = self.0.clone();
        Box::pin(async move {
            export::<S>(service, request.into_inner())
                .await
                .map(Response::new)
        })
    }
}

/// The gRPC service of one signal: what tonic's generated server is, with [`ExportCodec`].
pub struct ExportServer<S> {
    service: Arc<IngestService>,
    max_message_bytes: usize,
    signal: PhantomData<S>,
}

impl<S> Clone for ExportServer<S> {
    fn clone(&self) -> Self {
        ExportServer {
            service: self.service.clone(),
            max_message_bytes: self.max_message_bytes,
            signal: PhantomData,
        }
    }
}

impl<S: Signal> tonic::server::NamedService for ExportServer<S> {
    const NAME: &'static str = S::SERVICE;
}

impl<S, B> tonic::codegen::Service<http::Request<B>> for ExportServer<S>
where
    S: Signal,
    B: tonic::codegen::Body + Send + 'static,
    B::Error: Into<Box<dyn std::error::Error + Send + Sync>> + Send + 'static,
{
    type Response = http::Response<tonic::body::Body>;
    type Error = Infallible;
    type Future = Pin<Box<dyn Future<Output = Result<Self::Response, Infallible>> + Send>>;

    fn poll_ready(&mut self, _: &mut Context<'_>) -> Poll<Result<(), Infallible>> {
        Poll::Ready(Ok(()))
    }

    fn call(&mut self, req: http::Request<B>) -> Self::Future {
        if req.uri().path() != S::EXPORT {
            return Box::pin(async { Ok(Status::unimplemented("no such method").into_http()) });
        }
        // The connection is not idle while the export is answered (`crate::listen`).
        let busy = req
            .extensions()
            .get::<crate::listen::Conn>()
            .map(crate::listen::Conn::begin);
        let method = ExportMethod::<S>(self.service.clone(), PhantomData);
        let mut grpc = tonic::server::Grpc::new(ExportCodec::<S::Response>(PhantomData))
            .accept_compressed(CompressionEncoding::Gzip)
            .send_compressed(CompressionEncoding::Gzip)
            .max_decoding_message_size(self.max_message_bytes);
        Box::pin(async move {
            let answer = grpc.unary(method, req).await;
            drop(busy);
            Ok(answer)
        })
    }
}

/// Every export needs an `ingest` token in its `authorization` metadata. The interceptor sees
/// the headers before the message is read, so a refused export costs no decoding.
#[derive(Clone)]
pub struct Authorize(pub Gate);

impl tonic::service::Interceptor for Authorize {
    fn call(&mut self, request: Request<()>) -> Result<Request<()>, Status> {
        let header = request
            .metadata()
            .get("authorization")
            .map(|v| v.as_bytes());
        match self.0.check(header, Need::Ingest) {
            Ok(_) => Ok(request),
            Err(e) => Err(IngestError::from(e).to_status()),
        }
    }
}

/// The gRPC router: exports authorized by `gate`, gzip accepted, messages capped at
/// `max_message_bytes` after decompression.
pub fn router(
    service: Arc<IngestService>,
    max_message_bytes: usize,
    gate: Gate,
) -> tonic::service::Routes {
    fn server<S>(service: &Arc<IngestService>, max_message_bytes: usize) -> ExportServer<S> {
        ExportServer {
            service: service.clone(),
            max_message_bytes,
            signal: PhantomData,
        }
    }
    let traces = server::<Traces>(&service, max_message_bytes);
    let logs = server::<Logs>(&service, max_message_bytes);
    let authorize = Authorize(gate);
    tonic::service::Routes::new(tonic::service::interceptor::InterceptedService::new(
        traces,
        authorize.clone(),
    ))
    .add_service(tonic::service::interceptor::InterceptedService::new(
        logs, authorize,
    ))
}
