//! Built-in incremental aggregates: count, sum, min, max, avg. Integer
//! inputs stay exact integers; any fractional input (or an overflowing sum)
//! makes the result a float.

use serde::{Deserialize, Serialize};
use std::fmt::Write;

/// One built-in aggregate.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum AggregateKind {
    /// How many records.
    Count,
    /// The sum of the values.
    Sum,
    /// The smallest value.
    Min,
    /// The largest value.
    Max,
    /// The mean of the values.
    Avg,
}

impl AggregateKind {
    /// Its name in manifests and results.
    pub fn name(self) -> &'static str {
        match self {
            AggregateKind::Count => "count",
            AggregateKind::Sum => "sum",
            AggregateKind::Min => "min",
            AggregateKind::Max => "max",
            AggregateKind::Avg => "avg",
        }
    }
}

/// A number from a record: exact integer or float.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Number {
    /// An integer.
    Int(i64),
    /// Anything else.
    Float(f64),
}

impl Number {
    fn as_f64(self) -> f64 {
        match self {
            Number::Int(i) => i as f64,
            Number::Float(f) => f,
        }
    }

    fn add(self, other: Number) -> Number {
        match (self, other) {
            (Number::Int(a), Number::Int(b)) => a
                .checked_add(b)
                .map_or(Number::Float(a as f64 + b as f64), Number::Int),
            (a, b) => Number::Float(a.as_f64() + b.as_f64()),
        }
    }

    fn less(self, other: Number) -> bool {
        match (self, other) {
            (Number::Int(a), Number::Int(b)) => a < b,
            (a, b) => a.as_f64() < b.as_f64(),
        }
    }

    /// Parses decimal text (an integer when it is one).
    pub fn parse(text: &str) -> Option<Number> {
        let text = text.trim();
        text.parse::<i64>().map(Number::Int).ok().or_else(|| {
            text.parse::<f64>()
                .ok()
                .filter(|f| f.is_finite())
                .map(Number::Float)
        })
    }

    /// The number of a JSON value, if it is one.
    pub fn from_json(v: &serde_json::Value) -> Option<Number> {
        match v {
            serde_json::Value::Number(n) => n
                .as_i64()
                .map(Number::Int)
                .or_else(|| n.as_f64().map(Number::Float)),
            serde_json::Value::String(s) => Number::parse(s),
            _ => None,
        }
    }

    fn write_json(self, out: &mut String) {
        match self {
            Number::Int(i) => {
                let _ = write!(out, "{i}");
            }
            Number::Float(f) => {
                let _ = write!(out, "{}", serde_json::Value::from(f));
            }
        }
    }

    fn encode(self, out: &mut Vec<u8>) {
        match self {
            Number::Int(i) => {
                out.push(1);
                out.extend_from_slice(&i.to_le_bytes());
            }
            Number::Float(f) => {
                out.push(2);
                out.extend_from_slice(&f.to_le_bytes());
            }
        }
    }

    fn decode(b: &[u8]) -> Option<(Option<Number>, &[u8])> {
        let (&tag, rest) = b.split_first()?;
        if tag == 0 {
            return Some((None, rest));
        }
        let bytes: [u8; 8] = rest.get(..8)?.try_into().ok()?;
        let n = match tag {
            1 => Number::Int(i64::from_le_bytes(bytes)),
            2 => Number::Float(f64::from_le_bytes(bytes)),
            _ => return None,
        };
        Some((Some(n), &rest[8..]))
    }
}

/// Whether any of `kinds` needs a number from each record (all but count).
pub fn needs_values(kinds: &[AggregateKind]) -> bool {
    kinds.iter().any(|a| *a != AggregateKind::Count)
}

/// The number a record contributes: its JSON `field` (dotted path), or its
/// value as decimal text when there is no field.
pub fn number_of(rec: &crate::record::Record, field: Option<&str>) -> Result<Number, String> {
    let n = match field {
        None => std::str::from_utf8(&rec.value).ok().and_then(Number::parse),
        Some(f) => {
            let doc: serde_json::Value =
                serde_json::from_slice(&rec.value).map_err(|e| format!("value is not JSON: {e}"))?;
            match crate::json::field(&doc, f) {
                None => return Err(format!("no field `{f}`")),
                Some(v) => Number::from_json(v),
            }
        }
    };
    n.ok_or_else(|| match field {
        Some(f) => format!("field `{f}` is not a number"),
        None => "value is not a number".to_owned(),
    })
}

/// The running state of every built-in aggregate at once.
#[derive(Debug, Clone, Copy, PartialEq, Default)]
pub struct Accumulator {
    /// Records added.
    pub count: u64,
    /// Sum of the values (None before the first value).
    pub sum: Option<Number>,
    /// Smallest value.
    pub min: Option<Number>,
    /// Largest value.
    pub max: Option<Number>,
}

impl Accumulator {
    /// Adds one record whose value is `v` (`None` when only counted).
    pub fn add(&mut self, v: Option<Number>) {
        self.count += 1;
        if let Some(v) = v {
            self.sum = Some(self.sum.map_or(v, |s| s.add(v)));
            self.min = Some(self.min.map_or(v, |m| if v.less(m) { v } else { m }));
            self.max = Some(self.max.map_or(v, |m| if m.less(v) { v } else { m }));
        }
    }

    /// Merges another accumulator into this one.
    pub fn merge(&mut self, other: &Accumulator) {
        self.count += other.count;
        for (mine, theirs, pick_less) in [
            (&mut self.min, other.min, true),
            (&mut self.max, other.max, false),
        ] {
            if let Some(t) = theirs {
                *mine = Some(match *mine {
                    Some(m) if pick_less == t.less(m) => t,
                    Some(m) => m,
                    None => t,
                });
            }
        }
        if let Some(s) = other.sum {
            self.sum = Some(self.sum.map_or(s, |m| m.add(s)));
        }
    }

    /// The bytes kept in the state backend.
    pub fn encode(&self) -> Vec<u8> {
        let mut out = Vec::with_capacity(8 + 3 * 9);
        out.extend_from_slice(&self.count.to_le_bytes());
        for n in [self.sum, self.min, self.max] {
            match n {
                Some(n) => n.encode(&mut out),
                None => out.push(0),
            }
        }
        out
    }

    /// Reads bytes made by [`Accumulator::encode`].
    pub fn decode(b: &[u8]) -> Option<Accumulator> {
        let count = u64::from_le_bytes(b.get(..8)?.try_into().ok()?);
        let (sum, rest) = Number::decode(&b[8..])?;
        let (min, rest) = Number::decode(rest)?;
        let (max, _) = Number::decode(rest)?;
        Some(Accumulator { count, sum, min, max })
    }

    /// The requested aggregates as a JSON object (a state query's view).
    pub fn to_json(&self, kinds: &[AggregateKind]) -> serde_json::Value {
        let mut text = String::from("{");
        self.write_json(kinds, &mut text);
        text.push('}');
        serde_json::from_str(&text).expect("the aggregates write JSON")
    }

    /// Appends `"name":value` for each requested aggregate (JSON, `null`
    /// where there was no value).
    pub fn write_json(&self, kinds: &[AggregateKind], out: &mut String) {
        for (i, kind) in kinds.iter().enumerate() {
            if i > 0 {
                out.push(',');
            }
            let _ = write!(out, "\"{}\":", kind.name());
            let n = match kind {
                AggregateKind::Count => Some(Number::Int(self.count as i64)),
                AggregateKind::Sum => self.sum,
                AggregateKind::Min => self.min,
                AggregateKind::Max => self.max,
                AggregateKind::Avg => self
                    .sum
                    .filter(|_| self.count > 0)
                    .map(|s| Number::Float(s.as_f64() / self.count as f64)),
            };
            match n {
                Some(n) => n.write_json(out),
                None => out.push_str("null"),
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn integers_stay_exact_and_fractions_make_floats() {
        let mut a = Accumulator::default();
        for v in [3, -1, 10] {
            a.add(Some(Number::Int(v)));
        }
        let mut s = String::new();
        a.write_json(
            &[
                AggregateKind::Count,
                AggregateKind::Sum,
                AggregateKind::Min,
                AggregateKind::Max,
                AggregateKind::Avg,
            ],
            &mut s,
        );
        assert_eq!(s, r#""count":3,"sum":12,"min":-1,"max":10,"avg":4.0"#);
        a.add(Some(Number::Float(0.5)));
        assert_eq!(a.sum, Some(Number::Float(12.5)));
        assert_eq!(Accumulator::decode(&a.encode()), Some(a));
    }

    proptest! {
        #[test]
        fn merging_equals_adding_everything(xs in proptest::collection::vec(-1000i64..1000, 0..20), ys in proptest::collection::vec(-1000i64..1000, 0..20)) {
            let (mut a, mut b, mut all) = (Accumulator::default(), Accumulator::default(), Accumulator::default());
            for &x in &xs { a.add(Some(Number::Int(x))); all.add(Some(Number::Int(x))); }
            for &y in &ys { b.add(Some(Number::Int(y))); all.add(Some(Number::Int(y))); }
            a.merge(&b);
            prop_assert_eq!(a, all);
        }
    }
}
