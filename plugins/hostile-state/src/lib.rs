//! Test plugin (process): a record whose value is `state-bomb` writes 4096
//! values of 1 MiB into map state `junk` in one call (4 GiB of host memory
//! until the call commits, unless the host caps a call's writes); any other
//! record is counted in value state `count`, whose running count it emits.

use mailer_sdk::{Emit, MapState, Record, Result, ValueState, operator};

/// Fills state, or counts.
#[operator(process)]
fn state_bomb(
    rec: Record,
    count: &mut ValueState<u64>,
    junk: &mut MapState<u64, String>,
    out: &mut Emit,
) -> Result<()> {
    if rec.value == b"state-bomb" {
        let mib = "x".repeat(1 << 20);
        for i in 0..4096 {
            junk.insert(&i, &mib)?;
        }
        return Ok(());
    }
    let n = count.get()?.unwrap_or(0) + 1;
    count.set(&n)?;
    out.emit(rec.key(), n.to_string())?;
    Ok(())
}
