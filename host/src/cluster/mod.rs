//! Cluster mode (docs/architecture.md, "Cluster mode"): the same manifest
//! in several processes of one Kafka consumer group. Being built: what is
//! here is used by the parts that follow.

pub mod member;
pub mod restore;
pub mod topics;
pub mod watermarks;
