use mailer_sdk::{Record, Result, operator};

#[operator(mapp)]
fn upper(r: Record) -> Result<Record> {
    Ok(r)
}

fn main() {}
