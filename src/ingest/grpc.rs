//! OTLP/gRPC adapter: decoded messages in, the ingest service's answer out. Nothing else.

use std::sync::Arc;
use std::time::Instant;

use opentelemetry_proto::tonic::collector::logs::v1::logs_service_server::{
    LogsService, LogsServiceServer,
};
use opentelemetry_proto::tonic::collector::logs::v1::{
    ExportLogsPartialSuccess, ExportLogsServiceRequest, ExportLogsServiceResponse,
};
use opentelemetry_proto::tonic::collector::trace::v1::trace_service_server::{
    TraceService, TraceServiceServer,
};
use opentelemetry_proto::tonic::collector::trace::v1::{
    ExportTracePartialSuccess, ExportTraceServiceRequest, ExportTraceServiceResponse,
};
use tonic::codec::CompressionEncoding;
use tonic::{Request, Response, Status};

use super::error::IngestError;
use super::otlp;
use super::service::{IngestService, Transport};
use crate::auth::{Gate, Need};

pub struct Traces(pub Arc<IngestService>);
pub struct Logs(pub Arc<IngestService>);

#[tonic::async_trait]
impl TraceService for Traces {
    async fn export(
        &self,
        request: Request<ExportTraceServiceRequest>,
    ) -> Result<Response<ExportTraceServiceResponse>, Status> {
        let received = Instant::now();
        let admitted = self.0.admit().map_err(|e| e.to_status())?;
        // Recognition runs off the async workers, holding the permit until it is done.
        let service = self.0.clone();
        let req = request.into_inner();
        let (decoded, admitted) = tokio::task::spawn_blocking(move || {
            (
                otlp::traces_from_proto(&req, &service.contracts()),
                admitted,
            )
        })
        .await
        .map_err(|e| Status::internal(format!("decoder failed: {e}")))?;
        let reply = self
            .0
            .traces(admitted, Transport::Grpc, decoded, received)
            .await
            .map_err(|e| e.to_status())?;
        let partial_success = (reply.rejected > 0 || !reply.message.is_empty()).then_some(
            ExportTracePartialSuccess {
                rejected_spans: reply.rejected as i64,
                error_message: reply.message,
            },
        );
        Ok(Response::new(ExportTraceServiceResponse {
            partial_success,
        }))
    }
}

#[tonic::async_trait]
impl LogsService for Logs {
    async fn export(
        &self,
        request: Request<ExportLogsServiceRequest>,
    ) -> Result<Response<ExportLogsServiceResponse>, Status> {
        let received = Instant::now();
        let admitted = self.0.admit().map_err(|e| e.to_status())?;
        let req = request.into_inner();
        let (decoded, admitted) =
            tokio::task::spawn_blocking(move || (otlp::logs_from_proto(&req), admitted))
                .await
                .map_err(|e| Status::internal(format!("decoder failed: {e}")))?;
        let reply = self
            .0
            .logs(admitted, Transport::Grpc, decoded, received)
            .await
            .map_err(|e| e.to_status())?;
        let partial_success =
            (reply.rejected > 0 || !reply.message.is_empty()).then_some(ExportLogsPartialSuccess {
                rejected_log_records: reply.rejected as i64,
                error_message: reply.message,
            });
        Ok(Response::new(ExportLogsServiceResponse { partial_success }))
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
    let traces = TraceServiceServer::new(Traces(service.clone()))
        .accept_compressed(CompressionEncoding::Gzip)
        .send_compressed(CompressionEncoding::Gzip)
        .max_decoding_message_size(max_message_bytes);
    let logs = LogsServiceServer::new(Logs(service))
        .accept_compressed(CompressionEncoding::Gzip)
        .send_compressed(CompressionEncoding::Gzip)
        .max_decoding_message_size(max_message_bytes);
    let authorize = Authorize(gate);
    tonic::service::Routes::new(tonic::service::interceptor::InterceptedService::new(
        traces,
        authorize.clone(),
    ))
    .add_service(tonic::service::interceptor::InterceptedService::new(
        logs, authorize,
    ))
}
