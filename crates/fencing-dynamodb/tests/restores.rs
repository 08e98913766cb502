//! Restores of the counter table: a table restored from a backup (or to a point in time) is a
//! new table whose counters may be behind the tokens issued since. Each counter is bound to the
//! table that last wrote it; one found bound to another table, or lower than this process saw
//! it, is raised by the rate bound for every second since it was written, so no token is
//! issued twice — by a process that saw the counter before, by a new one, or by the lease;
//! the shared suite's guarantee that a counter served from behind never reissues runs here on
//! a table restored in place.

mod common;

use std::collections::BTreeSet;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use async_trait::async_trait;
use aws_sdk_dynamodb::Client;
use aws_sdk_dynamodb::types::AttributeValue;
use fencing_core::{Error, FencingToken, InputKind, Lease, ResourceName, TokenSource, Ttl};
use fencing_dynamodb::{DynamoLease, DynamoTokenSource};
use fencing_testkit::conformance::{
    ServedFromBehind, a_counter_served_from_behind_never_reissues,
    a_lease_served_from_behind_never_reissues,
};
use fencing_testkit::unique_name;

fn resource(name: &str) -> ResourceName {
    ResourceName::new(format!("settle:{name}")).unwrap()
}

fn ttl() -> Ttl {
    Ttl::from_secs(30).unwrap()
}

/// The counter a raw `GetItem` reads for `resource`, as a number.
async fn raw_counter(client: &Client, table: &str, resource: &ResourceName) -> Option<u64> {
    let item = client
        .get_item()
        .table_name(table)
        .key("resource", AttributeValue::S(resource.to_string()))
        .consistent_read(true)
        .send()
        .await
        .unwrap()
        .item?;
    item.get("token")?.as_n().ok()?.parse().ok()
}

/// A fresh counter table and a source on it.
async fn counters(client: &Client) -> (String, DynamoTokenSource) {
    let table = unique_name("counters");
    let source = DynamoTokenSource::new(client.clone(), &table).unwrap();
    source.create_if_missing().await.unwrap();
    (table, source)
}

async fn backup(client: &Client, table: &str) -> String {
    client
        .create_backup()
        .table_name(table)
        .backup_name("before-the-last-tokens")
        .send()
        .await
        .unwrap()
        .backup_details()
        .unwrap()
        .backup_arn()
        .to_owned()
}

/// Deletes `table` and restores `backup` under its name, as an operator undoes damage.
async fn restore_in_place(client: &Client, table: &str, backup: &str) {
    client
        .delete_table()
        .table_name(table)
        .send()
        .await
        .unwrap();
    client
        .restore_table_from_backup()
        .target_table_name(table)
        .backup_arn(backup)
        .send()
        .await
        .unwrap();
    wait_until_active(client, table).await;
}

async fn wait_until_active(client: &Client, table: &str) {
    for _ in 0..100 {
        let described = client.describe_table().table_name(table).send().await;
        if let Ok(out) = described
            && out
                .table()
                .and_then(|t| t.table_status())
                .map(|s| s.as_str())
                == Some("ACTIVE")
        {
            return;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    panic!("table {table} not active after 10 s");
}

/// Counters on three resources, each drawn before a backup and after it (a lease holder
/// among them that writes nothing); the table deleted and the backup restored under its name:
/// the process that saw the counters, a new process, and the lease each issue above every
/// token issued before, though the restored counters are behind.
#[tokio::test]
async fn a_table_restored_from_an_older_backup_never_reissues_a_token() {
    let client = common::client();
    let (table, source) = counters(&client).await;
    let lease = DynamoLease::new(client.clone(), &table).unwrap();
    let [seen, fresh, leased] = ["m_4471", "m_4472", "m_4473"].map(resource);

    let mut issued: Vec<BTreeSet<FencingToken>> = vec![BTreeSet::new(); 3];
    let draw = async |issued: &mut Vec<BTreeSet<FencingToken>>, count| {
        for _ in 0..count {
            for (i, r) in [&seen, &fresh, &leased].into_iter().enumerate() {
                issued[i].insert(source.next(r).await.unwrap());
            }
        }
    };
    draw(&mut issued, 5).await;
    let backup = backup(&client, &table).await;
    draw(&mut issued, 3).await;
    // A holder that took its lease on the lost table and has written nothing yet.
    let holder = lease.try_acquire(&leased, ttl()).await.unwrap().unwrap();
    issued[2].insert(holder.token());
    let highest: Vec<FencingToken> = issued.iter().map(|s| *s.last().unwrap()).collect();

    restore_in_place(&client, &table, &backup).await;
    for r in [&seen, &fresh, &leased] {
        assert_eq!(
            raw_counter(&client, &table, r).await,
            Some(5),
            "the restored counter of {r} is behind: a plain increment would issue 6 again"
        );
    }

    // The process that issued them: its memory of the table is stale, its counter went back.
    let next = source.next(&seen).await.unwrap();
    assert!(next > highest[0], "{next} after {:?}", issued[0]);
    // A process started after the restore.
    let new_process = DynamoTokenSource::new(client.clone(), &table).unwrap();
    let moved = new_process.history(&fresh).await.unwrap();
    assert!(moved.moved(), "{moved:?}");
    let next = new_process.next(&fresh).await.unwrap();
    assert!(next > highest[1], "{next} after {:?}", issued[1]);
    assert!(!new_process.history(&fresh).await.unwrap().moved());
    // The lease, on an item whose restored state has no holder.
    let new_lease = DynamoLease::new(client.clone(), &table).unwrap();
    let taken = new_lease
        .try_acquire(&leased, ttl())
        .await
        .unwrap()
        .expect("the restored item has no holder");
    assert!(
        taken.token() > highest[2],
        "{} after {:?}",
        taken.token(),
        issued[2]
    );
    // Once raised, tokens count on one by one.
    assert_eq!(
        new_process.next(&fresh).await.unwrap().get(),
        next.get() + 1
    );
}

/// One backup restored in place twice, each time after tokens were issued on the table it
/// replaces (three histories in a row: the lost one, the first restore, the second): every
/// token after each restore lies above every token issued before it, for a counter the
/// backup holds and for one first used after it (missing from the backup both times).
#[tokio::test]
async fn one_backup_restored_twice_never_reissues_a_token() {
    let client = common::client();
    let (table, source) = counters(&client).await;
    let [kept, fresh] = ["m_4471", "m_4472"].map(resource);
    let mut issued = [BTreeSet::new(), BTreeSet::new()];
    for _ in 0..2 {
        issued[0].insert(source.next(&kept).await.unwrap());
    }
    let backup = backup(&client, &table).await;
    for restore in ["first", "second"] {
        for (i, r) in [&kept, &fresh].into_iter().enumerate() {
            for _ in 0..3 {
                let token = source.next(r).await.unwrap();
                assert!(issued[i].insert(token), "{r}: {token} issued twice");
            }
        }
        restore_in_place(&client, &table, &backup).await;
        for (i, r) in [&kept, &fresh].into_iter().enumerate() {
            let highest = *issued[i].last().unwrap();
            let next = source.next(r).await.unwrap();
            assert!(
                next > highest,
                "{r}, after the {restore} restore: {next} is not above {highest}"
            );
            issued[i].insert(next);
        }
    }
}

/// The sum of every counter in `table`: lower after the restore than before it shows the
/// table really answers from behind.
async fn counted(client: &Client, table: &str) -> u64 {
    let scanned = client
        .scan()
        .table_name(table)
        .consistent_read(true)
        .send()
        .await
        .unwrap();
    scanned
        .items()
        .iter()
        .filter_map(|item| item.get("token")?.as_n().ok()?.parse::<u64>().ok())
        .sum()
}

/// A counter table and its backup: the copy is the backup, taken then; the event the table
/// deleted and the backup restored under its name, as an operator undoes damage.
struct RestoreInPlace {
    client: Client,
    table: String,
    backup: Option<String>,
}

#[async_trait]
impl ServedFromBehind for RestoreInPlace {
    async fn keep_a_copy(&mut self) {
        self.backup = Some(backup(&self.client, &self.table).await);
    }

    async fn serve_the_copy(&mut self) {
        let before = counted(&self.client, &self.table).await;
        let backup = self.backup.as_deref().expect("a copy kept");
        restore_in_place(&self.client, &self.table, backup).await;
        assert!(
            counted(&self.client, &self.table).await < before,
            "the backup is older"
        );
    }
}

/// The shared guarantee, for `DynamoTokenSource` and `DynamoLease`, on a table restored from
/// an older backup under its own name.
#[tokio::test]
async fn a_table_restored_in_place_serves_no_token_twice_to_the_shared_suite() {
    let client = common::client();
    let (table, source) = counters(&client).await;
    let mut restore = RestoreInPlace {
        client: client.clone(),
        table,
        backup: None,
    };
    a_counter_served_from_behind_never_reissues(&source, &mut restore).await;

    let (table, _) = counters(&client).await;
    let lease = DynamoLease::new(client.clone(), &table).unwrap();
    let mut restore = RestoreInPlace {
        client,
        table,
        backup: None,
    };
    a_lease_served_from_behind_never_reissues(&lease, &mut restore, common::caps()).await;
}

/// A table restored to a point in time under a new name (how AWS restores): a source on the
/// new table raises each counter first, whatever it holds.
#[tokio::test]
async fn a_table_restored_to_a_point_in_time_under_a_new_name_never_reissues_a_token() {
    let client = common::client();
    let (table, source) = counters(&client).await;
    let r = resource("m_4471");
    let mut highest = FencingToken::MIN;
    for _ in 0..4 {
        highest = source.next(&r).await.unwrap();
    }
    let restored = unique_name("restored");
    client
        .restore_table_to_point_in_time()
        .source_table_name(&table)
        .target_table_name(&restored)
        .use_latest_restorable_time(true)
        .send()
        .await
        .unwrap();
    wait_until_active(&client, &restored).await;
    let on_restored = DynamoTokenSource::new(client.clone(), &restored).unwrap();
    let history = on_restored.history(&r).await.unwrap();
    assert!(history.moved(), "{history:?}");
    assert_ne!(history.bound.as_deref(), Some(history.serving.as_str()));
    let next = on_restored.next(&r).await.unwrap();
    assert!(next > highest, "{next} after {highest}");
}

/// The raise is the rate bound for the time since the counter was last written, to the
/// millisecond, and one second more: with a bound of 1000 a second, a counter restored at 5
/// goes on from 5 + milliseconds + 1000.
#[tokio::test]
async fn a_counter_bound_to_another_table_is_raised_by_the_bound_for_each_second_since_it_was_written()
 {
    let client = common::client();
    let table = unique_name("counters");
    let source = DynamoTokenSource::new(client.clone(), &table)
        .unwrap()
        .with_max_rate(1000)
        .unwrap();
    source.create_if_missing().await.unwrap();
    let r = resource("m_4471");
    for _ in 0..4 {
        source.next(&r).await.unwrap();
    }
    // The counter the backup keeps is written after this, by this process's clock.
    let before = SystemTime::now().duration_since(UNIX_EPOCH).unwrap();
    source.next(&r).await.unwrap();
    let backup = backup(&client, &table).await;
    source.next(&r).await.unwrap();
    restore_in_place(&client, &table, &backup).await;
    tokio::time::sleep(Duration::from_millis(1200)).await;
    let fresh = DynamoTokenSource::new(client.clone(), &table)
        .unwrap()
        .with_max_rate(1000)
        .unwrap();
    let next = fresh.next(&r).await.unwrap().get();
    let after = SystemTime::now().duration_since(UNIX_EPOCH).unwrap();
    // Written at most `after - before` ago, at least 1.2 s ago: raised by 1,000 a second for
    // that time, to the millisecond, and one second more.
    let (least, most) = (
        5 + 1200 + 1000 + 1,
        5 + (after - before).as_millis() as u64 + 1000 + 1,
    );
    assert!(
        (least..=most).contains(&next),
        "{next} not in {least}..={most}"
    );
}

#[tokio::test]
async fn a_rate_bound_out_of_range_and_the_binding_attributes_as_a_key_are_refused() {
    let client = common::client();
    for bad in [0, (1 << 32) + 1] {
        let err = DynamoTokenSource::new(client.clone(), "counters")
            .unwrap()
            .with_max_rate(bad)
            .unwrap_err();
        assert_eq!(err.kind(), InputKind::Token, "{err}");
    }
    for taken in ["history", "written_at_ms"] {
        let err = DynamoTokenSource::new(client.clone(), "counters")
            .unwrap()
            .with_key_attribute(taken)
            .unwrap_err();
        assert_eq!(err.kind(), InputKind::Identifier, "{err}");
    }
}

/// A binding the source cannot read (a history that is not a String, a history without the
/// time it was written) is corrupt: reported, nothing written.
#[tokio::test]
async fn a_binding_that_cannot_be_read_is_reported_corrupt_and_nothing_is_written() {
    let client = common::client();
    let (table, source) = counters(&client).await;
    let cases = [
        (
            "m_1",
            Some(AttributeValue::N("7".into())),
            Some("1"),
            "counter history N(\"7\") is not a String",
        ),
        (
            "m_2",
            Some(AttributeValue::S("elsewhere@1".into())),
            None,
            "a counter bound to a table has no time it was written",
        ),
    ];
    for (name, history, written, said) in cases {
        let r = resource(name);
        let mut put = client
            .put_item()
            .table_name(&table)
            .item("resource", AttributeValue::S(r.to_string()))
            .item("token", AttributeValue::N("9".into()));
        if let Some(history) = history {
            put = put.item("history", history);
        }
        if let Some(written) = written {
            put = put.item("written_at_ms", AttributeValue::N(written.into()));
        }
        put.send().await.unwrap();
        let err = source.next(&r).await.unwrap_err();
        assert!(matches!(err, Error::Corrupt { .. }), "{err:?}");
        assert!(err.to_string().contains(said), "{err}");
        assert_eq!(raw_counter(&client, &table, &r).await, Some(9), "{name}");
    }
}
