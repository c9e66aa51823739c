//! A session's save and load by the size of its state: 10 KB, 1 MB and 10 MB, on `MemoryStore`
//! and `SqliteStore` (a file), against serializing and parsing the state once (the least any
//! store that keeps JSON does), and how a load grows with the changes saved since the session
//! began.
//!
//! ```sh
//! cargo bench -p benches --bench states
//! ```
//!
//! The state is a document of items (`{"items": [{"id", "text"}]}`, 100 bytes of text each); a
//! save (`Session::update_state`) changes one item's text, as a turn of a custom agent would.
//! Rounds alternate the baseline and the store's figures (this VM drifts ±20 % over minutes);
//! the table prints medians.

use std::sync::Arc;
use std::time::{Duration, Instant};

use benches::runtime;
use bidi_session::{MemoryStore, Session, SessionStore, SqliteStore};
use serde::{Deserialize, Serialize};

#[derive(Debug, Clone, Serialize, Deserialize)]
struct Doc {
    items: Vec<Item>,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
struct Item {
    id: u64,
    text: String,
}

/// A document of about `bytes` of JSON.
fn doc(bytes: usize) -> Doc {
    let items = (0..bytes / 125)
        .map(|id| Item {
            id: id as u64,
            text: format!("{id:0>100}"),
        })
        .collect();
    Doc { items }
}

fn median(mut times: Vec<Duration>) -> Duration {
    times.sort();
    times[times.len() / 2]
}

fn ms(time: Duration) -> String {
    format!("{:.2}", time.as_secs_f64() * 1e3)
}

async fn stores() -> Vec<(&'static str, Arc<dyn SessionStore>, tempfile::TempDir)> {
    let dir = tempfile::tempdir().expect("tempdir");
    let sqlite = SqliteStore::open(dir.path().join("states.sqlite3"))
        .await
        .expect("sqlite");
    let memory: Arc<dyn SessionStore> = Arc::new(MemoryStore::new());
    let keep = tempfile::tempdir().expect("tempdir");
    vec![("memory", memory, keep), ("sqlite", Arc::new(sqlite), dir)]
}

/// Saves and loads at each size, interleaved with the baseline: the table's rows.
async fn sizes(rounds: usize) {
    println!(
        "| state | store | save ms | serialize once ms | save / serialize | load ms | parse once ms | load / parse |"
    );
    println!("|---|---|---:|---:|---:|---:|---:|---:|");
    for (label, bytes) in [
        ("10 KB", 10_000),
        ("1 MB", 1_000_000),
        ("10 MB", 10_000_000),
    ] {
        for (name, store, _dir) in stores().await {
            let mut state = doc(bytes);
            let id = format!("size-{bytes}");
            let session = Session::create(Arc::clone(&store), &id, state.clone())
                .await
                .expect("create");
            let (mut save, mut serialize, mut load, mut parse) = (vec![], vec![], vec![], vec![]);
            for round in 0..rounds {
                let at = round % state.items.len();
                state.items[at].text = format!("{round:x>100}");
                let start = Instant::now();
                let json = serde_json::to_vec(&state).expect("json");
                serialize.push(start.elapsed());
                let copy = state.clone();
                let start = Instant::now();
                session.update_state(copy).await.expect("save");
                save.push(start.elapsed());
                let start = Instant::now();
                let parsed: Doc = serde_json::from_slice(&json).expect("parse");
                parse.push(start.elapsed());
                drop(parsed);
                let start = Instant::now();
                let loaded = Session::<Doc>::load(Arc::clone(&store), &id)
                    .await
                    .expect("load")
                    .expect("session");
                load.push(start.elapsed());
                assert_eq!(loaded.state().items[at].text, state.items[at].text);
            }
            let (save, serialize, load, parse) =
                (median(save), median(serialize), median(load), median(parse));
            println!(
                "| {label} | {name} | {} | {} | {:.2} | {} | {} | {:.2} |",
                ms(save),
                ms(serialize),
                save.as_secs_f64() / serialize.as_secs_f64(),
                ms(load),
                ms(parse),
                load.as_secs_f64() / parse.as_secs_f64(),
            );
        }
    }
}

/// A 1 MB state's load after 10, 100, 1,000 and 10,000 saves: the changes it replays stay
/// bounded.
async fn growth() {
    println!(
        "\n| store | saves | load ms | changes replayed (bytes, as counted) | checkpoint (bytes) |"
    );
    println!("|---|---:|---:|---:|---:|");
    for (name, store, _dir) in stores().await {
        let mut state = doc(1_000_000);
        let id = "growth";
        let session = Session::create(Arc::clone(&store), id, state.clone())
            .await
            .expect("create");
        let mut saves = 0;
        for target in [10, 100, 1_000, 10_000] {
            while saves < target {
                let at = saves % state.items.len();
                state.items[at].text = format!("{saves:y>100}");
                session.update_state(state.clone()).await.expect("save");
                saves += 1;
            }
            let mut times = Vec::new();
            let mut replay = None;
            for _ in 0..9 {
                let start = Instant::now();
                let loaded = Session::<Doc>::load(Arc::clone(&store), id)
                    .await
                    .expect("load")
                    .expect("session");
                times.push(start.elapsed());
                replay = Some(loaded.head().replay);
            }
            let replay = replay.expect("loaded");
            println!(
                "| {name} | {saves} | {} | {} | {} |",
                ms(median(times)),
                replay.changes,
                replay.checkpoint
            );
        }
    }
}

fn main() {
    let rt = runtime();
    let rounds = std::env::var("ROUNDS")
        .ok()
        .and_then(|rounds| rounds.parse().ok())
        .unwrap_or(15);
    rt.block_on(async move {
        tokio::spawn(async move {
            sizes(rounds).await;
            growth().await;
        })
        .await
        .expect("benchmark task");
    });
}
