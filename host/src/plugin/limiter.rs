//! What one plugin instance may make the host allocate for it: its linear
//! memories and tables together stay within one byte budget (the operator's
//! `memory_limit_mb`), and the numbers of core instances, memories and
//! tables within fixed caps. wasmtime's own `StoreLimits` bounds each memory
//! alone, so a component with many memories could take the budget many
//! times over, and it leaves table elements unbounded.

use wasmtime::ResourceLimiter;

/// Bytes charged for one table element (a function or object reference).
pub const TABLE_ELEMENT_BYTES: usize = 8;

/// The most core instances one plugin instance may create (the Python and
/// JavaScript components of `tests/all/languages.rs` run within it).
pub const MAX_INSTANCES: usize = 100;

/// The most linear memories one plugin instance may create.
pub const MAX_MEMORIES: usize = 16;

/// The most tables one plugin instance may create.
pub const MAX_TABLES: usize = 100;

/// Why an instance may not grow.
#[derive(Debug, thiserror::Error)]
#[error(
    "the plugin asked for {asked} of {what}, past its budget: {used} of {budget} bytes \
     (`memory_limit_mb`) already held by its memories and tables"
)]
pub struct OverBudget {
    what: &'static str,
    asked: String,
    used: usize,
    budget: usize,
}

/// One instance's budget and what it holds of it.
#[derive(Debug, Clone)]
pub struct InstanceBudget {
    budget: usize,
    used: usize,
}

impl InstanceBudget {
    /// A budget of `bytes` for all memories and tables together.
    pub fn new(bytes: usize) -> Self {
        Self {
            budget: bytes,
            used: 0,
        }
    }

    fn grow(
        &mut self,
        what: &'static str,
        current: usize,
        desired: usize,
        asked: String,
    ) -> wasmtime::Result<bool> {
        let after = self
            .used
            .checked_sub(current)
            .and_then(|rest| rest.checked_add(desired))
            .filter(|after| *after <= self.budget);
        match after {
            Some(after) => {
                self.used = after;
                Ok(true)
            }
            None => Err(OverBudget {
                what,
                asked,
                used: self.used,
                budget: self.budget,
            }
            .into()),
        }
    }
}

impl ResourceLimiter for InstanceBudget {
    fn memory_growing(
        &mut self,
        current: usize,
        desired: usize,
        _maximum: Option<usize>,
    ) -> wasmtime::Result<bool> {
        self.grow("memory", current, desired, format!("{desired} bytes"))
    }

    fn table_growing(
        &mut self,
        current: usize,
        desired: usize,
        _maximum: Option<usize>,
    ) -> wasmtime::Result<bool> {
        let bytes = |elements: usize| elements.saturating_mul(TABLE_ELEMENT_BYTES);
        self.grow(
            "table",
            bytes(current),
            bytes(desired),
            format!("{desired} elements"),
        )
    }

    fn memory_grow_failed(&mut self, error: wasmtime::Error) -> wasmtime::Result<()> {
        Err(error)
    }

    fn table_grow_failed(&mut self, error: wasmtime::Error) -> wasmtime::Result<()> {
        Err(error)
    }

    fn instances(&self) -> usize {
        MAX_INSTANCES
    }

    fn tables(&self) -> usize {
        MAX_TABLES
    }

    fn memories(&self) -> usize {
        MAX_MEMORIES
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn memories_and_tables_share_one_budget() {
        let mut b = InstanceBudget::new(1 << 20);
        assert!(b.memory_growing(0, 512 << 10, None).unwrap());
        assert!(b.memory_growing(0, 256 << 10, None).unwrap(), "a second memory");
        assert!(b.table_growing(0, 1024, None).unwrap(), "8 KiB of table");
        assert_eq!(b.used, (768 << 10) + 8192);
        let err = b.memory_growing(256 << 10, 512 << 10, None).unwrap_err();
        assert!(err.to_string().contains("memory_limit_mb"), "{err}");
        assert_eq!(b.used, (768 << 10) + 8192, "a refused growth holds nothing");
        assert!(b.memory_growing(256 << 10, (256 << 10) + 4096, None).unwrap());
    }

    #[test]
    fn the_largest_table_growth_is_refused_without_overflow() {
        let mut b = InstanceBudget::new(64 << 20);
        assert!(b.table_growing(1, usize::MAX, None).is_err());
        assert!(b.table_growing(1, u32::MAX as usize, None).is_err());
        assert_eq!(b.used, 0);
    }
}
