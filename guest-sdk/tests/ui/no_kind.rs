use mailer_sdk::{Record, Result, operator};

#[operator]
fn upper(r: Record) -> Result<Record> {
    Ok(r)
}

fn main() {}
