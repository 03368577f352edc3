//! The store the app runs on, chosen by configuration. An enum rather than `dyn Store`: the
//! trait returns `impl Future`, and the set of backends is closed.

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
    async fn append_received(
        &self,
        events: Vec<Event>,
        received_at: Timestamp,
    ) -> Result<Vec<Appended>, StoreError> {
        dispatch!(self, s => s.append_received(events, received_at))
    }
    async fn checkpoint(&self) -> Result<Option<Timestamp>, StoreError> {
        dispatch!(self, s => s.checkpoint())
    }
    async fn routes_of_open_intents(&self) -> Result<bool, StoreError> {
        dispatch!(self, s => s.routes_of_open_intents())
    }
    async fn unsettled_intents(&self) -> Result<Vec<Unsettled>, StoreError> {
        dispatch!(self, s => s.unsettled_intents())
    }
    async fn events_received_since(&self, since: Timestamp) -> Result<Vec<Event>, StoreError> {
        dispatch!(self, s => s.events_received_since(since))
    }
    async fn route_owners(&self, routes: Vec<String>) -> Result<Vec<String>, StoreError> {
        dispatch!(self, s => s.route_owners(routes))
    }
    async fn expire_events(&self, before: Timestamp, limit: usize) -> Result<usize, StoreError> {
        dispatch!(self, s => s.expire_events(before, limit))
    }

    async fn expire_outbox(&self, before: Timestamp) -> Result<u64, StoreError> {
        dispatch!(self, s => s.expire_outbox(before))
    }
    async fn scan_routes(
        &self,
        chunk: usize,
        each: impl FnMut(Vec<String>) -> bool + Send,
    ) -> Result<u64, StoreError> {
        dispatch!(self, s => s.scan_routes(chunk, each))
    }
    async fn load_events(&self) -> Result<Vec<Event>, StoreError> {
        dispatch!(self, s => s.load_events())
    }
    async fn put_verdicts(&self, verdicts: Vec<Verdict>) -> Result<(), StoreError> {
        dispatch!(self, s => s.put_verdicts(verdicts))
    }
    async fn delete_verdicts(&self, intent_ids: Vec<String>) -> Result<(), StoreError> {
        dispatch!(self, s => s.delete_verdicts(intent_ids))
    }
    async fn put_derived(&self, derived: Derived) -> Result<(), StoreError> {
        dispatch!(self, s => s.put_derived(derived))
    }
    async fn stored_verdicts(&self, intent_ids: Vec<String>) -> Result<Vec<String>, StoreError> {
        dispatch!(self, s => s.stored_verdicts(intent_ids))
    }
    async fn get_verdict(&self, intent_id: &str) -> Result<Option<VerdictDoc>, StoreError> {
        dispatch!(self, s => s.get_verdict(intent_id))
    }
    async fn list_verdicts(&self, filter: &VerdictFilter) -> Result<Page<VerdictDoc>, StoreError> {
        dispatch!(self, s => s.list_verdicts(filter))
    }
    async fn put_escalations(&self, escalations: Vec<Escalation>) -> Result<(), StoreError> {
        dispatch!(self, s => s.put_escalations(escalations))
    }
    async fn swap_escalation(
        &self,
        current: Escalation,
        new: Escalation,
    ) -> Result<Swap, StoreError> {
        dispatch!(self, s => s.swap_escalation(current, new))
    }
    async fn swap_escalation_notify(
        &self,
        current: Escalation,
        new: Escalation,
        outbox: Vec<OutboxItem>,
    ) -> Result<Swap, StoreError> {
        dispatch!(self, s => s.swap_escalation_notify(current, new, outbox))
    }
    async fn outbox_put(&self, items: Vec<OutboxItem>) -> Result<(), StoreError> {
        dispatch!(self, s => s.outbox_put(items))
    }
    async fn outbox_pending(
        &self,
        target: &str,
        since: Timestamp,
        limit: usize,
    ) -> Result<OutboxPage, StoreError> {
        dispatch!(self, s => s.outbox_pending(target, since, limit))
    }
    async fn load_escalations(&self) -> Result<Vec<Escalation>, StoreError> {
        dispatch!(self, s => s.load_escalations())
    }
    async fn escalations_of(&self, intent_ids: Vec<String>) -> Result<Vec<Escalation>, StoreError> {
        dispatch!(self, s => s.escalations_of(intent_ids))
    }
    async fn listed_of(
        &self,
        intent_ids: Vec<String>,
    ) -> Result<Vec<(String, crate::model::Timestamp)>, StoreError> {
        dispatch!(self, s => s.listed_of(intent_ids))
    }
    async fn escalation_counts(&self) -> Result<Vec<(EscalationStatus, u64)>, StoreError> {
        dispatch!(self, s => s.escalation_counts())
    }
    async fn get_escalation(&self, id: &str) -> Result<Option<Escalation>, StoreError> {
        dispatch!(self, s => s.get_escalation(id))
    }
    async fn list_escalations(
        &self,
        status: Option<EscalationStatus>,
        limit: usize,
    ) -> Result<Vec<Escalation>, StoreError> {
        dispatch!(self, s => s.list_escalations(status, limit))
    }
    async fn page_escalations(
        &self,
        filter: &super::EscalationFilter,
    ) -> Result<Page<Escalation>, StoreError> {
        dispatch!(self, s => s.page_escalations(filter))
    }
    async fn report(&self, since: Option<Timestamp>, now: Timestamp) -> Result<Report, StoreError> {
        dispatch!(self, s => s.report(since, now))
    }
    async fn known_observations(
        &self,
        keys: Vec<RecordKey>,
    ) -> Result<std::collections::HashSet<RecordKey>, StoreError> {
        dispatch!(self, s => s.known_observations(keys))
    }
    async fn events_touching(&self, q: super::EventQuery) -> Result<Vec<Event>, StoreError> {
        dispatch!(self, s => s.events_touching(q))
    }
}
