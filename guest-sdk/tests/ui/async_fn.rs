use mailer_sdk::{Record, Result, operator};

#[operator(filter)]
async fn keep(r: &Record) -> Result<bool> {
    Ok(!r.value.is_empty())
}

fn main() {}
