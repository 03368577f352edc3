//! The escalation state machine. (being written)
