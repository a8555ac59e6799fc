//! Test plugin (process): each record's value is a list of commands,
//! `register <t>`, `delete <t>`, `register-processing <t>`, separated by
//! `;`. Each timer that fires emits `<key> <domain> <at> watermark=<w>`.

use mailer_sdk::{Emit, Error, Record, Result, TimeDomain, Timer, Timers, operator};

/// Registers and deletes timers as the record says.
#[operator(process, on_timer = fired)]
fn command(rec: Record, timers: &mut Timers) -> Result<()> {
    for command in rec
        .value_str()?
        .split(';')
        .map(str::trim)
        .filter(|c| !c.is_empty())
    {
        let (verb, at) = command
            .split_once(' ')
            .ok_or_else(|| Error::new(format!("`{command}` is not `<verb> <time>`")))?;
        let at: i64 = at.parse()?;
        match verb {
            "register" => timers.register_event_time(at),
            "delete" => timers.delete_event_time(at),
            "register-processing" => timers.register_processing_time(at),
            _ => return Err(Error::new(format!("unknown command `{verb}`"))),
        }
    }
    Ok(())
}

/// Reports the timer.
#[operator(timer)]
fn fired(timer: Timer, timers: &mut Timers, out: &mut Emit) -> Result<()> {
    let key = String::from_utf8_lossy(timer.key().unwrap_or_default()).into_owned();
    let domain = match timer.domain {
        TimeDomain::EventTime => "event",
        TimeDomain::ProcessingTime => "processing",
    };
    out.emit(
        timer.key(),
        format!("{key} {domain} {} watermark={}", timer.at, timers.watermark()),
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use mailer_sdk::testing::Harness;

    #[test]
    fn harness_fires_in_time_order_once_and_never_deleted() {
        let mut h = Harness::new(command_operator());
        h.send(Record::new("register 30; register 10; register 10; register 20").with_key("a"))
            .unwrap();
        h.send(Record::new("delete 20").with_key("a")).unwrap();
        let out: Vec<String> = h
            .advance_watermark(100)
            .unwrap()
            .into_iter()
            .map(|r| String::from_utf8(r.value).unwrap())
            .collect();
        assert_eq!(out, ["a event 10 watermark=100", "a event 30 watermark=100"]);
        assert!(h.advance_watermark(200).unwrap().is_empty());
    }
}
