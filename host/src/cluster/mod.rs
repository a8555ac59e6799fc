//! Cluster mode (docs/architecture.md, "Cluster mode"): the same manifest
//! in several processes of one Kafka consumer group, which splits the
//! source's partitions and each `key_by`'s repartition topic among them;
//! each keyed task's state follows its partition through a changelog
//! topic. [`run`] is one process of it.

mod committed;
mod engine;
mod error;
mod kept;
pub mod member;
mod member_folder;
pub mod restore;
mod run;
mod standby;
mod status;
mod task;
pub mod topics;
pub mod watermarks;

pub use error::ClusterError;
pub use run::run;
pub use status::{ClusterStatus, MemberStatus, PartitionStatus, member_admins, status};
pub use task::TaskError;
