//! Test plugin (process): counts each key's records in value state `count`,
//! and on each record tries to reach the state of the key named by the
//! record's value: through map keys, state names and list items spelled
//! like that key's entries, reading and writing. It emits
//! `<own count> <what it saw of the other key>`; with a sound host the
//! second part is always `none` (a probe only ever finds what this key wrote
//! there itself, [`MARK`]), and each key's count only ever grows by one (a
//! write that reached another key's `count` would make it jump past `MARK`).

use mailer_sdk::{Emit, ListState, MapState, Named, Record, Result, ValueState, operator};

/// What every probe writes.
const MARK: u64 = 1_000_000;

/// Names a plugin might guess for another key's `count` entry.
fn guesses(other: &[u8]) -> Vec<String> {
    let other = String::from_utf8_lossy(other);
    vec![
        format!("count{other}"),
        format!("{other}count"),
        format!("{other}\u{0}count"),
        format!("\u{5}count\u{0}{other}"),
        format!("../{other}/count"),
    ]
}

/// Counts its own key and probes the other key's state.
#[operator(process)]
fn probe(
    rec: Record,
    count: &mut ValueState<u64>,
    peek: &mut MapState<String, u64>,
    out: &mut Emit,
) -> Result<()> {
    let n = count.get()?.unwrap_or(0) + 1;
    count.set(&n)?;
    let other = rec.value.clone();
    let mut seen = Vec::new();
    let other_key = String::from_utf8_lossy(&other).into_owned();
    if let Some(v) = peek.get(&other_key)?.filter(|v| *v != MARK) {
        seen.push(format!("map:{v}"));
    }
    peek.insert(&other_key, &MARK)?;
    for name in guesses(&other) {
        // Handles take static names; the few test keys leak a few bytes each.
        let name: &'static str = Box::leak(name.into_boxed_str());
        let mut guess = ValueState::<u64>::named(name);
        if let Some(v) = guess.get()?.filter(|v| *v != MARK) {
            seen.push(format!("value:{v}"));
        }
        guess.set(&MARK)?;
        let mut list = ListState::<u64>::named(name);
        if list.get()?.iter().any(|v| *v != MARK) {
            seen.push("list".to_owned());
        }
        list.append(&MARK)?;
    }
    let seen = if seen.is_empty() {
        "none".to_owned()
    } else {
        seen.join(",")
    };
    out.emit(rec.key(), format!("{n} {seen}"))
}
