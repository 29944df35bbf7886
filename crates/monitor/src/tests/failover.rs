//! Failover against the fake agent: promotion, repointing, and what happens when a step fails.

use super::*;

#[tokio::test(start_paused = true)]
async fn failover_promotes_and_repoints() {
    let (m, agent) = cluster().await;
    agent.with(P, |f| f.up = false);
    m.round().await;
    m.round().await;
    let new = m.primary().expect("a primary");
    assert_ne!(&*new.address, P, "{}", events(&m));
    let other = if &*new.address == R1 { R2 } else { R1 };
    assert_eq!(role(&m, &new.address), Role::Primary);
    assert!(!agent.get(&new.address).read_only);
    replicating(&m, &agent, &[other], &new.address);
    assert_eq!(
        m.stats.failovers.load(std::sync::atomic::Ordering::Relaxed),
        1
    );
}

#[tokio::test(start_paused = true)]
async fn failed_promotion_is_undone_and_retried() {
    let (m, agent) = cluster().await;
    for r in [R1, R2] {
        agent.with(r, |f| f.denied.push("promote"));
    }
    agent.with(P, |f| f.up = false);
    m.round().await;
    m.round().await;
    let ev = events(&m);
    assert!(ev.contains("failed at step promote"), "{ev}");
    assert!(ev.contains("replication restarted on"), "{ev}");
    assert!(
        m.stats.failover_failures(FailoverStep::Promote) >= 1,
        "{ev}"
    );
    // As it was: both replicas follow the old primary again and serve reads; nobody is
    // fenced; the unreachable old primary is not given the primary role.
    replicating(&m, &agent, &[R1, R2], P);
    assert_ne!(role(&m, P), Role::Primary, "{ev}");
    assert_eq!(
        &*m.primary().expect("still the primary to replace").address,
        P
    );
    assert!(m.status().last_failover_error.is_some());
    // Fixed: the next attempt succeeds.
    for r in [R1, R2] {
        agent.with(r, |f| f.denied.clear());
    }
    for _ in 0..3 {
        m.round().await;
    }
    let new = m.primary().expect("a primary");
    assert_ne!(&*new.address, P, "{}", events(&m));
    assert!(m.status().last_failover_error.is_none());
}

#[tokio::test(start_paused = true)]
async fn candidate_dying_during_catch_up_hands_over_to_the_other() {
    let (m, agent) = cluster().await;
    let first = m.candidates(&server(&m, P))[0].0.address.to_string();
    let second = if first == R1 { R2 } else { R1 };
    agent.with(&first, |f| f.dies_in.push("catch_up"));
    agent.with(P, |f| f.up = false);
    m.round().await;
    m.round().await;
    let ev = events(&m);
    assert!(ev.contains("failed at step catch_up"), "{ev}");
    assert!(m.stats.failover_failures(FailoverStep::CatchUp) >= 1);
    // The other replica was stopped, then restarted.
    assert!(
        agent.log.lock().contains(&format!("resume {second}")),
        "{ev}"
    );
    for _ in 0..4 {
        m.round().await;
    }
    let new = m.primary().expect("a primary");
    assert_eq!(&*new.address, second, "{}", events(&m));
    assert!(!agent.get(second).read_only);
}

#[tokio::test(start_paused = true)]
async fn only_a_synchronous_standby_replaces_a_synchronous_primary() {
    let (m, agent) = cluster().await;
    // The best-ranked replica is not synchronous: the other one takes over, and the best
    // one follows it.
    let first = m.candidates(&server(&m, P))[0].0.address.to_string();
    let second = if first == R1 { R2 } else { R1 };
    agent.with(P, |f| f.synchronous = Some(vec![second.to_string()]));
    m.round().await;
    agent.with(P, |f| f.up = false);
    m.round().await;
    m.round().await;
    assert_eq!(
        &*m.primary().expect("promoted").address,
        second,
        "{}",
        events(&m)
    );
    assert!(agent
        .log
        .lock()
        .contains(&format!("replicate_from {first}")));

    // With no synchronous standby reachable, no failover at all.
    let (m, agent) = cluster().await;
    agent.with(P, |f| {
        f.synchronous = Some(vec!["10.0.0.9:3306".to_string()])
    });
    m.round().await;
    agent.with(P, |f| f.up = false);
    for _ in 0..3 {
        m.round().await;
    }
    assert_eq!(
        &*m.primary().expect("still the primary to replace").address,
        P
    );
    assert_eq!(agent.ops("promote"), 0);
    let ev = events(&m);
    assert!(ev.contains("none of its synchronous standbys"), "{ev}");
}

#[tokio::test(start_paused = true)]
async fn failed_repoint_is_retried_and_keeps_the_replica_out_of_reads() {
    let (m, agent) = cluster().await;
    let first = m.candidates(&server(&m, P))[0].0.address.to_string();
    let second = if first == R1 { R2 } else { R1 };
    agent.with(second, |f| f.denied.push("replicate_from"));
    agent.with(P, |f| f.up = false);
    m.round().await;
    m.round().await;
    assert_eq!(&*m.primary().expect("promoted").address, first);
    let s = server(&m, second);
    assert!(!s.is_usable(), "follows the dead primary: no reads");
    assert!(
        s.monitor_block()
            .unwrap_or_default()
            .contains("not from the primary"),
        "{:?}",
        s.state()
    );
    assert_eq!(m.status().repairs.len(), 1, "{:?}", m.status());
    agent.with(second, |f| f.denied.clear());
    // Retried with backoff (1 s at first).
    let deadline = Instant::now() + Duration::from_secs(10);
    while agent.get(second).replica.as_ref().map(|r| r.0.as_str()) != Some(first.as_str()) {
        assert!(
            Instant::now() < deadline,
            "repointed in time\n{}",
            events(&m)
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
        m.round().await;
    }
    m.round().await;
    replicating(&m, &agent, &[second], &first);
    assert!(m.status().repairs.is_empty(), "{:?}", m.status());
}

#[tokio::test(start_paused = true)]
async fn missing_privileges_refuse_failover_before_it_starts() {
    let (m, agent) = cluster().await;
    agent.missing.lock().insert(
        R1.into(),
        vec!["READ_ONLY ADMIN (SET GLOBAL read_only)".into()],
    );
    m.recheck_privileges();
    m.round().await;
    assert!(m.status().failover_refused.is_some(), "{:?}", m.status());
    agent.with(P, |f| f.up = false);
    m.round().await;
    m.round().await;
    assert_eq!(agent.ops("detach"), 0, "nothing stopped");
    assert!(events(&m).contains("refused"), "{}", events(&m));
    assert!(m.stats.failover_failures(FailoverStep::Refused) >= 1);
    replicating(&m, &agent, &[R1, R2], P);
    // Granted: the next attempt (after a fresh check) goes ahead.
    agent.missing.lock().clear();
    let deadline = Instant::now() + Duration::from_secs(20);
    while m.primary().is_some_and(|p| &*p.address == P) {
        assert!(
            Instant::now() < deadline,
            "failover after the grant\n{}",
            events(&m)
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
        m.round().await;
    }
}
