//! The store the app runs on, chosen by configuration. An enum rather than `dyn Store`: the
//! trait returns `impl Future`, and the set of backends is closed.

use std::future::Future;

use super::*;
use crate::codec::VerdictDoc;
use crate::model::{Escalation, EscalationStatus, Event, Timestamp, Verdict};

pub enum AnyStore {
    Sqlite(SqliteStore),
    ClickHouse(ClickHouseStore),
}

macro_rules! dispatch {
    ($self:ident, $s:ident => $call:expr) => {
        match $self {
            AnyStore::Sqlite($s) => $call.await,
            AnyStore::ClickHouse($s) => $call.await,
        }
    };
}

impl Store for AnyStore {
    fn append(
        &self,
        events: Vec<Event>,
    ) -> impl Future<Output = Result<Vec<bool>, StoreError>> + Send {
        async move { dispatch!(self, s => s.append(events)) }
    }
    fn load_events(&self) -> impl Future<Output = Result<Vec<Event>, StoreError>> + Send {
        async move { dispatch!(self, s => s.load_events()) }
    }
    fn put_verdicts(
        &self,
        verdicts: Vec<Verdict>,
    ) -> impl Future<Output = Result<(), StoreError>> + Send {
        async move { dispatch!(self, s => s.put_verdicts(verdicts)) }
    }
    fn delete_verdicts(
        &self,
        intent_ids: Vec<String>,
    ) -> impl Future<Output = Result<(), StoreError>> + Send {
        async move { dispatch!(self, s => s.delete_verdicts(intent_ids)) }
    }
    fn get_verdict(
        &self,
        intent_id: &str,
    ) -> impl Future<Output = Result<Option<VerdictDoc>, StoreError>> + Send {
        async move { dispatch!(self, s => s.get_verdict(intent_id)) }
    }
    fn list_verdicts(
        &self,
        filter: &VerdictFilter,
    ) -> impl Future<Output = Result<Page<VerdictDoc>, StoreError>> + Send {
        async move { dispatch!(self, s => s.list_verdicts(filter)) }
    }
    fn put_escalations(
        &self,
        escalations: Vec<Escalation>,
    ) -> impl Future<Output = Result<(), StoreError>> + Send {
        async move { dispatch!(self, s => s.put_escalations(escalations)) }
    }
    fn load_escalations(&self) -> impl Future<Output = Result<Vec<Escalation>, StoreError>> + Send {
        async move { dispatch!(self, s => s.load_escalations()) }
    }
    fn get_escalation(
        &self,
        id: &str,
    ) -> impl Future<Output = Result<Option<Escalation>, StoreError>> + Send {
        async move { dispatch!(self, s => s.get_escalation(id)) }
    }
    fn list_escalations(
        &self,
        status: Option<EscalationStatus>,
        limit: usize,
    ) -> impl Future<Output = Result<Vec<Escalation>, StoreError>> + Send {
        async move { dispatch!(self, s => s.list_escalations(status, limit)) }
    }
    fn report(
        &self,
        since: Option<Timestamp>,
        now: Timestamp,
    ) -> impl Future<Output = Result<Report, StoreError>> + Send {
        async move { dispatch!(self, s => s.report(since, now)) }
    }
}
