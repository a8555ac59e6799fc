//! The branch against a brute-force router: each record to the first
//! branch whose condition holds, else the default; a record that is not
//! JSON to the failure policy and to no output.

use super::*;
use crate::failure::FailurePolicy;
use crate::operators::builtin::Compare;
use proptest::prelude::*;
use serde_json::{Value, json};

fn record(value: &str, i: i64) -> Record {
    Record::new(Some(bytes::Bytes::from(format!("k{i}"))), value.to_owned(), i)
}

fn values_of(batch: &Batch) -> Vec<String> {
    batch
        .clone()
        .into_records()
        .iter()
        .map(|r| String::from_utf8(r.value.to_vec()).unwrap())
        .collect()
}

fn branch_of(conditions: &[Condition], policy: FailurePolicy) -> (Branch, Arc<crate::failure::FailureStats>) {
    let stats: Arc<crate::failure::FailureStats> = Default::default();
    let failure = FailureHandler::new("route", policy, None, stats.clone());
    let predicates = conditions
        .iter()
        .map(|c| Box::new(c.clone()) as Box<dyn Predicate>)
        .collect();
    (Branch::new("route", predicates, failure), stats)
}

/// A record's value: a JSON object with a number `a` and a string `s`
/// (each sometimes missing), or text that is not JSON.
fn value() -> impl Strategy<Value = String> {
    prop_oneof![
        8 => (proptest::option::of(-5i64..5), proptest::option::of("[xyz]{0,2}")).prop_map(|(a, s)| {
            let mut doc = serde_json::Map::new();
            if let Some(a) = a {
                doc.insert("a".into(), json!(a));
            }
            if let Some(s) = s {
                doc.insert("s".into(), json!(s));
            }
            Value::Object(doc).to_string()
        }),
        1 => "[a-z ]{0,6}".prop_map(|t| format!("not json {t}")),
    ]
}

/// A condition on `a` (a number) or `s` (a string).
fn condition() -> impl Strategy<Value = Condition> {
    let compare = prop_oneof![
        Just(Compare::Eq),
        Just(Compare::Ne),
        Just(Compare::Lt),
        Just(Compare::Le),
        Just(Compare::Gt),
        Just(Compare::Ge),
        Just(Compare::Exists),
    ];
    prop_oneof![
        (compare.clone(), -5i64..5).prop_map(|(c, v)| Condition::new("a", c, json!(v)).unwrap()),
        (compare, "[xyz]{0,2}").prop_map(|(c, v)| Condition::new("s", c, json!(v)).unwrap()),
        "[xyz]{1,2}".prop_map(|p| Condition::new("s", Compare::Regex, json!(format!("^{p}"))).unwrap()),
    ]
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(400))]

    /// Whole batches, decoded or encoded, in slices of random sizes: every
    /// output holds exactly the records the brute-force router sends it, in
    /// order; failed records are counted and go nowhere.
    #[test]
    fn every_record_goes_to_the_first_branch_that_takes_it(
        values in proptest::collection::vec(value(), 0..60),
        conditions in proptest::collection::vec(condition(), 1..5),
        encoded in any::<bool>(),
        cut in 1usize..20,
    ) {
        let (mut branch, stats) = branch_of(&conditions, FailurePolicy::Skip);
        prop_assert_eq!(branch.outputs(), conditions.len() + 1);
        let mut got: Vec<Vec<String>> = vec![Vec::new(); conditions.len() + 1];
        for (c, chunk) in values.chunks(cut).enumerate() {
            let records: Vec<Record> = chunk.iter().enumerate().map(|(i, v)| record(v, (c * cut + i) as i64)).collect();
            let batch = match encoded {
                true => Batch::Encoded(crate::batch::EncodedRecords::of(&records)),
                false => Batch::Records(records),
            };
            let parts = branch.split(batch).unwrap();
            prop_assert_eq!(parts.len(), conditions.len() + 1);
            for (all, part) in got.iter_mut().zip(&parts) {
                all.extend(values_of(part));
            }
        }
        let mut want: Vec<Vec<String>> = vec![Vec::new(); conditions.len() + 1];
        let mut failed = 0;
        for v in &values {
            match serde_json::from_str::<Value>(v) {
                Err(_) => failed += 1,
                Ok(doc) => {
                    let n = conditions.iter().position(|c| c.holds(&doc)).unwrap_or(conditions.len());
                    want[n].push(v.clone());
                }
            }
        }
        prop_assert_eq!(got, want);
        prop_assert_eq!(stats.failures.load(std::sync::atomic::Ordering::Relaxed), failed);
        prop_assert_eq!(stats.records.load(std::sync::atomic::Ordering::Relaxed), values.len() as u64);
    }
}

#[test]
fn a_record_a_predicate_fails_on_stops_the_run_under_fail() {
    let conditions = [Condition::new("a", Compare::Gt, json!(1)).unwrap()];
    let (mut branch, _) = branch_of(&conditions, FailurePolicy::Fail);
    let batch = Batch::Records(vec![record(r#"{"a":2}"#, 0), record("plain", 1)]);
    let err = branch.split(batch).unwrap_err().to_string();
    assert!(err.contains("operator `route` failed on record"), "{err}");
    assert!(err.contains("not a JSON document"), "{err}");
}

#[test]
fn a_later_branch_sees_only_what_the_earlier_ones_left() {
    let seen = Arc::new(std::sync::Mutex::new(Vec::new()));
    let log = seen.clone();
    let failure = FailureHandler::new("route", FailurePolicy::Fail, None, Default::default());
    let first: Box<dyn Predicate> = Box::new(Native(Arc::new(|r: &Record| r.timestamp % 2 == 0)));
    let second: Box<dyn Predicate> = Box::new(Native(Arc::new(move |r: &Record| {
        log.lock().unwrap().push(r.timestamp);
        true
    })));
    let mut branch = Branch::new("route", vec![first, second], failure);
    let batch = Batch::Records((0..6).map(|i| record("{}", i)).collect());
    let parts = branch.split(batch).unwrap();
    let times = |b: &Batch| {
        b.clone()
            .into_records()
            .iter()
            .map(|r| r.timestamp)
            .collect::<Vec<_>>()
    };
    assert_eq!(times(&parts[0]), [0, 2, 4]);
    assert_eq!(times(&parts[1]), [1, 3, 5]);
    assert!(parts[2].is_empty());
    assert_eq!(*seen.lock().unwrap(), [1, 3, 5]);
}
