use mailer_sdk::{Emit, Record, Result, operator};

#[operator(process, timeout = 5)]
fn count(r: Record, out: &mut Emit) -> Result<()> {
    let _ = (r, out);
    Ok(())
}

fn main() {}
