//! Several instances on one ClickHouse cluster (DESIGN.md "Scale-out"). Work in progress
//! (issue 38): the auditor's lease (`lease.rs`) exists and is tested against a real ZooKeeper;
//! nothing in `reckon serve` uses it yet.

pub mod lease;
