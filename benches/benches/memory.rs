//! Memory per open, idle connection: RSS growth for 100,000 connections whose actions wait for
//! their first input, against 100,000 raw tasks waiting on a bare channel. Also the time to open
//! and to close them all.
//!
//! ```sh
//! cargo bench -p benches --bench memory
//! ```
//!
//! Each side runs in a fresh child process (this same binary, re-executed), so one side's freed
//! memory cannot flatter the other.

use std::future::poll_fn;
use std::process::Command;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Instant;

use benches::{on_worker, runtime};
use bidi_core::__bench::{Chan, Reason};
use bidi_core::{ActionContext, BidiAction, BoxError, Inbound, Outbound};

const CONNECTIONS: usize = 100_000;

/// Actions (or raw tasks) that have started and are about to wait for input.
static STARTED: AtomicUsize = AtomicUsize::new(0);

async fn all_started() {
    while STARTED.load(Ordering::Acquire) < CONNECTIONS + 1 {
        tokio::task::yield_now().await;
    }
}

fn rss_bytes() -> usize {
    let statm = std::fs::read_to_string("/proc/self/statm").expect("/proc/self/statm");
    let pages: usize = statm
        .split_whitespace()
        .nth(1)
        .and_then(|field| field.parse().ok())
        .expect("resident pages");
    pages * 4096
}

fn measure(kind: &str) {
    let raw = kind == "raw_chan";
    let rt = runtime();
    let (per_conn, open, close) = on_worker(&rt, async move {
        // Warm the allocator and the runtime before the baseline reading.
        let action = BidiAction::new(
            "idle",
            |_: ActionContext, (), mut inbound: Inbound<u64>, _: Outbound<u64>| async move {
                STARTED.fetch_add(1, Ordering::AcqRel);
                Ok::<_, BoxError>(inbound.recv().await)
            },
        );
        action.connect(()).output().await.expect("warm-up");
        STARTED.store(1, Ordering::Release);
        let before = rss_bytes();
        let start = Instant::now();
        let (per_conn, open, close) = if !raw {
            let conns: Vec<_> = (0..CONNECTIONS).map(|_| action.connect(())).collect();
            all_started().await;
            let open = start.elapsed();
            let per_conn = (rss_bytes() - before) / CONNECTIONS;
            let start = Instant::now();
            for conn in conns {
                conn.close();
                assert_eq!(conn.output().await.expect("output"), None);
            }
            (per_conn, open, start.elapsed())
        } else {
            let chans: Vec<_> = (0..CONNECTIONS)
                .map(|_| {
                    let input = Arc::new(Chan::<u64>::new(0));
                    let output = Arc::new(Chan::<u64>::new(0));
                    let (rx, tx) = (Arc::clone(&input), Arc::clone(&output));
                    let task = tokio::spawn(async move {
                        STARTED.fetch_add(1, Ordering::AcqRel);
                        let got = poll_fn(|cx| rx.poll_recv(cx)).await;
                        drop(tx);
                        got
                    });
                    (input, output, task)
                })
                .collect();
            all_started().await;
            let open = start.elapsed();
            let per_conn = (rss_bytes() - before) / CONNECTIONS;
            let start = Instant::now();
            for (input, _output, task) in chans {
                input.close(Reason::Closed);
                assert_eq!(task.await.expect("task"), None);
            }
            (per_conn, open, start.elapsed())
        };
        (per_conn, open, close)
    });
    println!(
        "{kind}: {per_conn} B RSS per idle connection ({CONNECTIONS} open); open all {:.3} s, close all {:.3} s",
        open.as_secs_f64(),
        close.as_secs_f64()
    );
}

fn main() {
    let mut args = std::env::args().skip(1).filter(|a| !a.starts_with("--"));
    if let Some(kind) = args.next() {
        measure(&kind);
        return;
    }
    let exe = std::env::current_exe().expect("current exe");
    for kind in ["raw_chan", "connection"] {
        let status = Command::new(&exe)
            .arg(kind)
            .status()
            .expect("child process");
        assert!(status.success(), "{kind} measurement failed");
    }
}
