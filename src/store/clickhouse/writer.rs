//! The group-commit writer: one task turns many small writes into few INSERTs.
//!
//! Every ClickHouse INSERT makes a part per partition touched, and many small parts is what
//! ClickHouse handles worst (TOO_MANY_PARTS). So callers queue encoded rows and await a
//! oneshot; the task takes the first request, drains whatever else is queued (up to
//! [`MAX_BATCH_ROWS`]), sends ONE INSERT per table for all of them, and answers every caller only
//! after ClickHouse confirmed every INSERT of the group (the HTTP 200 of the INSERT means the
//! data is written to its parts). While an INSERT is in flight the next group accumulates, so
//! under load the number of INSERTs stays flat while the rows per INSERT grow.
//!
//! Retrying a group (transient failure) is safe: every table collapses identical rows by key and
//! version. When a group fails with bad data, its requests are retried one by one so only the
//! request holding the bad row fails.

use tokio::sync::{mpsc, oneshot};

use super::error::{ClickHouseError, ErrorClass, RetryPolicy};
use super::rows::*;
use crate::store::StoreError;

/// Upper bound on rows per group, so one INSERT (and the latency of everyone waiting on it)
/// stays bounded when a backlog has built up.
pub const MAX_BATCH_ROWS: usize = 100_000;

/// Queue depth in requests. A full queue makes writers wait: the backpressure the OTLP receiver
/// turns into retryable refusals.
pub const QUEUE_DEPTH: usize = 4096;

/// Encoded rows of one request, by table.
#[derive(Default)]
pub struct Rows {
    pub attempts: Vec<AttemptRow>,
    pub readbacks: Vec<ReadbackRow>,
    pub records: Vec<RecordRow>,
    pub findings: Vec<FindingRow>,
    pub verdicts: Vec<VerdictRow>,
    pub escalations: Vec<EscalationRow>,
}

impl Rows {
    pub fn len(&self) -> usize {
        self.attempts.len()
            + self.readbacks.len()
            + self.records.len()
            + self.findings.len()
            + self.verdicts.len()
            + self.escalations.len()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

pub struct Request {
    pub rows: Rows,
    pub reply: oneshot::Sender<Result<(), StoreError>>,
}

pub async fn run(
    client: ::clickhouse::Client,
    retry: RetryPolicy,
    mut rx: mpsc::Receiver<Request>,
) {
    while let Some(first) = rx.recv().await {
        let mut total = first.rows.len();
        let mut batch = vec![first];
        while total < MAX_BATCH_ROWS {
            match rx.try_recv() {
                Ok(r) => {
                    total += r.rows.len();
                    batch.push(r);
                }
                Err(_) => break,
            }
        }
        commit(&client, &retry, batch).await;
    }
}

async fn commit(client: &::clickhouse::Client, retry: &RetryPolicy, batch: Vec<Request>) {
    let all: Vec<&Rows> = batch.iter().map(|r| &r.rows).collect();
    match insert_all(client, retry, &all).await {
        Ok(()) => {
            for r in batch {
                // A caller that gave up (dropped its future) no longer wants the answer.
                let _ = r.reply.send(Ok(()));
            }
        }
        Err(e) if e.class == ErrorClass::BadData && batch.len() > 1 => {
            tracing::warn!(error = %e, requests = batch.len(), "group insert refused as bad data; retrying its requests one by one");
            for r in batch {
                let result = insert_all(client, retry, &[&r.rows]).await;
                let _ = r.reply.send(result.map_err(StoreError::from));
            }
        }
        Err(e) => {
            tracing::error!(error = %e, requests = batch.len(), "group insert failed");
            let msg = e.to_string();
            let mut first = Some(e);
            for r in batch {
                // The error itself goes to one caller; the others get its text (it is not Clone).
                let err = match first.take() {
                    Some(e) => StoreError::from(e),
                    None => StoreError::WriteFailed(msg.clone()),
                };
                let _ = r.reply.send(Err(err));
            }
        }
    }
}

/// One INSERT per table, in an order that keeps reads consistent if the group fails midway:
/// events before anything derived from them, findings before the verdict version that makes
/// them current.
async fn insert_all(
    client: &::clickhouse::Client,
    retry: &RetryPolicy,
    parts: &[&Rows],
) -> Result<(), ClickHouseError> {
    insert(client, retry, ATTEMPTS, parts, |r| &r.attempts).await?;
    insert(client, retry, READBACKS, parts, |r| &r.readbacks).await?;
    insert(client, retry, RECORDS, parts, |r| &r.records).await?;
    insert(client, retry, FINDINGS, parts, |r| &r.findings).await?;
    insert(client, retry, VERDICTS, parts, |r| &r.verdicts).await?;
    insert(client, retry, ESCALATIONS, parts, |r| &r.escalations).await?;
    Ok(())
}

async fn insert<T>(
    client: &::clickhouse::Client,
    retry: &RetryPolicy,
    table: &'static str,
    parts: &[&Rows],
    pick: impl Fn(&Rows) -> &Vec<T>,
) -> Result<(), ClickHouseError>
where
    T: ::clickhouse::RowOwned + ::clickhouse::RowWrite + serde::Serialize,
{
    if parts.iter().all(|p| pick(p).is_empty()) {
        return Ok(());
    }
    retry
        .run(
            || format!("INSERT INTO {table}"),
            || async {
                let mut ins = client
                    .insert::<T>(table)
                    .await?
                    .with_timeouts(Some(super::SEND_TIMEOUT), Some(super::END_TIMEOUT));
                for p in parts {
                    for row in pick(p) {
                        ins.write(row).await?;
                    }
                }
                ins.end().await
            },
        )
        .await
}
