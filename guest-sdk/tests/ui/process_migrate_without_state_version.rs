use mailer_sdk::{Emit, Record, Result, operator};

#[operator(process, migrate = upgrade)]
fn count(r: Record, out: &mut Emit) -> Result<()> {
    let _ = (r, out);
    Ok(())
}

fn upgrade(_from: u32, _state: &str, value: Vec<u8>) -> Result<Vec<u8>> {
    Ok(value)
}

fn main() {}
