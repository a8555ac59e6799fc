use mailer_sdk::{Emit, Record, Result, ValueState, operator};

#[operator(process)]
fn count(r: Record, seen: &ValueState<u64>, out: &mut Emit) -> Result<()> {
    let _ = (r, seen, out);
    Ok(())
}

fn main() {}
