use mailer_sdk::{Emit, Record, Result, operator};

#[operator(process, state_version = 2, migrate = upgrade)]
fn count(r: Record, out: &mut Emit) -> Result<()> {
    let _ = (r, out);
    Ok(())
}

fn upgrade(value: Vec<u8>) -> Vec<u8> {
    value
}

fn main() {}
