use mailer_sdk::{Record, Result, operator};

#[operator(map)]
fn upper(r: Record, extra: Record) -> Result<Record> {
    let _ = extra;
    Ok(r)
}

fn main() {}
