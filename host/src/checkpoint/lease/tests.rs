//! Against `object_store`'s in-memory store (its conditional PUTs are
//! S3's); the S3 server is in the integration tests.
use super::*;
use object_store::memory::InMemory;

fn url() -> BucketUrl {
    BucketUrl::parse("s3://b/p").unwrap().unwrap()
}

fn quick() -> LeaseTiming {
    LeaseTiming {
        life: Duration::from_millis(600),
        skew: Duration::ZERO,
    }
}

fn lease_record(client: &Arc<dyn ObjectStore>) -> Record {
    let c = client.clone();
    let got = wait_for(async move { read(&*c, &ObjectPath::from("p/_lease.json")).await }).unwrap();
    got.unwrap().1.unwrap()
}

/// Writes `record` as the lease, whatever is there.
fn force(client: &Arc<dyn ObjectStore>, record: &Record) {
    let (c, payload) = (client.clone(), record.to_payload());
    wait_for(async move { c.put(&ObjectPath::from("p/_lease.json"), payload).await }).unwrap();
}

fn other_host(pid: u32, life: Duration) -> Record {
    let holder = Holder {
        host: "elsewhere".into(),
        pid,
        run: "r1".into(),
    };
    Record::new(holder, 1, life)
}

#[test]
fn a_held_lease_refuses_a_second_holder_naming_the_first_until_released() {
    let client: Arc<dyn ObjectStore> = Arc::new(InMemory::new());
    let first = Lease::acquire(client.clone(), &url(), LeaseTiming::default()).unwrap();
    first.check().unwrap();
    let holder = lease_record(&client).holder;
    assert_eq!(holder.pid, std::process::id());
    let e = Lease::acquire(client.clone(), &url(), LeaseTiming::default())
        .unwrap_err()
        .to_string();
    assert!(
        e.contains("`s3://b/p` is in use")
            && e.contains("p/_lease.json")
            && e.contains(&holder.to_string())
            && e.contains("stop that one first"),
        "{e}"
    );
    drop(first);
    assert!(lease_record(&client).released);
    let second = Lease::acquire(client.clone(), &url(), LeaseTiming::default()).unwrap();
    assert_ne!(lease_record(&client).holder.run, holder.run);
    second.check().unwrap();
}

#[test]
fn a_live_lease_of_another_host_is_refused_and_an_expired_one_taken_over() {
    let client: Arc<dyn ObjectStore> = Arc::new(InMemory::new());
    force(&client, &other_host(7, Duration::from_secs(60)));
    let e = Lease::acquire(client.clone(), &url(), quick()).unwrap_err();
    let LeaseError::Held {
        holder, remaining_s, ..
    } = &e
    else {
        panic!("{e}")
    };
    assert!(holder.contains("process 7 on host `elsewhere`"), "{e}");
    assert!((55..=60).contains(remaining_s), "{e}");
    // Expired, but not by more than the clocks may disagree: held.
    force(&client, &other_host(7, Duration::ZERO));
    let skewed = LeaseTiming {
        skew: Duration::from_secs(60),
        ..quick()
    };
    assert!(matches!(
        Lease::acquire(client.clone(), &url(), skewed),
        Err(LeaseError::Held { .. })
    ));
    let taken = Lease::acquire(client.clone(), &url(), quick()).unwrap();
    taken.check().unwrap();
    assert_eq!(lease_record(&client).holder.pid, std::process::id());
}

#[test]
fn a_lease_of_a_process_of_this_host_that_is_gone_is_taken_over_at_once() {
    let client: Arc<dyn ObjectStore> = Arc::new(InMemory::new());
    let mut gone = std::process::Command::new("true").spawn().unwrap();
    let dead = gone.id();
    gone.wait().unwrap();
    let mut record = other_host(dead, Duration::from_secs(60));
    record.holder.host = host_name();
    force(&client, &record);
    Lease::acquire(client.clone(), &url(), LeaseTiming::default()).unwrap();
    // One that runs (this test's parent) is live.
    record.holder.pid = std::os::unix::process::parent_id();
    force(&client, &record);
    assert!(matches!(
        Lease::acquire(client.clone(), &url(), LeaseTiming::default()),
        Err(LeaseError::Held { .. })
    ));
}

#[test]
fn renewals_keep_a_lease_and_one_taken_over_meanwhile_is_lost_and_never_released() {
    let client: Arc<dyn ObjectStore> = Arc::new(InMemory::new());
    let lease = Lease::acquire(client.clone(), &url(), quick()).unwrap();
    let writes = lease_record(&client).writes;
    // Past its first life: renewed all along.
    std::thread::sleep(Duration::from_millis(900));
    lease.check().unwrap();
    assert!(lease_record(&client).writes >= writes + 2);
    assert!(lease.lost().is_none());
    // Another instance takes it (as after a pause of this one).
    let thief = other_host(9, Duration::from_secs(60));
    force(&client, &thief);
    std::thread::sleep(Duration::from_millis(500));
    let e = lease.check().unwrap_err().to_string();
    assert!(
        e.contains("was taken over by process 9 on host `elsewhere`") && e.contains("this run stops"),
        "{e}"
    );
    assert!(lease.lost().is_some());
    drop(lease);
    assert_eq!(lease_record(&client), thief, "the new holder's lease stays");
}

#[test]
fn a_lease_not_renewed_for_two_thirds_of_its_life_allows_no_writes() {
    let client: Arc<dyn ObjectStore> = Arc::new(InMemory::new());
    // Renewed every 20 s: none comes during the test.
    let lease = Lease::acquire(client.clone(), &url(), LeaseTiming::default()).unwrap();
    lease.shared.state().valid_until = Instant::now() + Duration::from_secs(1);
    let e = lease.check().unwrap_err();
    assert!(matches!(e, LeaseError::Lapsed { .. }), "{e}");
    assert!(
        lease.lost().is_none(),
        "lapsed is not lost: a renewal may still succeed"
    );
}

#[test]
fn an_object_that_is_not_a_lease_is_refused_and_left_alone() {
    let client: Arc<dyn ObjectStore> = Arc::new(InMemory::new());
    let c = client.clone();
    wait_for(async move {
        c.put(&ObjectPath::from("p/_lease.json"), PutPayload::from_static(b"{"))
            .await
    })
    .unwrap();
    let e = Lease::acquire(client.clone(), &url(), quick())
        .unwrap_err()
        .to_string();
    assert!(e.contains("does not parse") && e.contains("delete it"), "{e}");
}
