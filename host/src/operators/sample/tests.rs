use super::*;
use proptest::prelude::*;

fn record(i: u64) -> Record {
    Record::new(Some(format!("k{}", i % 7).into()), format!("{{\"n\":{i}}}"), 0)
}

fn sample(every: u64, seed: u64) -> Sample {
    Sample {
        name: "sample".into(),
        every,
        seed,
    }
}

fn kept(op: &mut Sample, records: Vec<Record>, batch: usize) -> Vec<Record> {
    let mut out = Vec::new();
    for chunk in records.chunks(batch.max(1)) {
        out.extend(op.process(Batch::Records(chunk.to_vec())).unwrap().into_records());
    }
    out
}

#[test]
fn every_one_keeps_every_record() {
    let records: Vec<_> = (0..500).map(record).collect();
    assert_eq!(kept(&mut sample(1, 0), records.clone(), 64), records);
}

#[test]
fn about_one_in_n_is_kept_and_another_seed_keeps_others() {
    let records: Vec<_> = (0..20_000).map(record).collect();
    let ten = kept(&mut sample(10, 0), records.clone(), 1024);
    assert!(
        (1_800..=2_200).contains(&ten.len()),
        "kept {} of 20000",
        ten.len()
    );
    let other = kept(&mut sample(10, 1), records, 1024);
    assert!(
        (1_800..=2_200).contains(&other.len()),
        "kept {} of 20000",
        other.len()
    );
    let both = ten.iter().filter(|r| other.contains(r)).count();
    assert!(both < 400, "seeds 0 and 1 share {both} of {} records", ten.len());
}

#[test]
fn a_missing_key_and_an_empty_one_are_told_apart() {
    let hits = |key: Option<&'static str>| {
        (0..2_000)
            .filter(|i| keeps(&Record::new(key.map(Into::into), format!("{i}"), 0), 2, 0))
            .collect::<Vec<_>>()
    };
    assert_ne!(hits(None), hits(Some("")));
}

proptest! {
    /// The records kept are exactly those the model keeps, in their order,
    /// whatever the batches they come in: the choice is the record's own.
    #[test]
    fn the_records_kept_depend_on_the_records_alone(
        values in proptest::collection::vec(0u64..1_000, 0..300),
        every in 1u64..6,
        seed in 0u64..4,
        batch in 1usize..50,
    ) {
        let records: Vec<_> = values.iter().map(|&v| record(v)).collect();
        let model: Vec<_> = records.iter().filter(|r| keeps(r, every, seed)).cloned().collect();
        prop_assert_eq!(kept(&mut sample(every, seed), records.clone(), batch), model.clone());
        prop_assert_eq!(kept(&mut sample(every, seed), records, 1), model);
    }
}
