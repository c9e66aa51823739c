//! A running answer written to every client reading it, and kept for the clients that come
//! back to it while it streams: the UI message stream's chat answers (keyed by chat) and
//! Genkit's durable streams (keyed by stream id) are both a [`Tee`] registered in a [`Tees`]
//! of their wire's key. Tees with a [`Retention`] (Genkit's) also keep an answer that ended,
//! for a while and within a bound of bytes, for the clients that come back a moment late.
//! [`relay`] carries an answer to the clients of other processes.
//!
//! One home for every wire that resumes: the UI message stream's chats (keyed by scope, agent
//! and chat id), and the streamed turns of [`turns`](crate::turns) (keyed by
//! [`TurnKey`](crate::turns::TurnKey): scope, agent, turn id), which Genkit's agent wire and
//! A2A's streamed tasks share. A key always carries its identity's scope, so that it never
//! reaches another identity's answer.
//!
//! - A [`Tee`] is a [`bidi_flow::wire::Sink`]: the pump writes an answer to it as to a response
//!   body. It hands each write to every reader at the pace of the fastest (each reader a
//!   channel of 64 writes); a reader left 64 writes behind is dropped, so that one resumer
//!   that never reads holds nobody back.
//! - It keeps the answer's bytes for the clients that come back (up to [`RESUME_BYTES`], 8 MiB,
//!   an answer; past that a new reader gets 410), and all the answers of every wire together
//!   keep at most [`KEPT_BYTES`] (64 MiB), one [`Budget`] for the server.
//! - An answer through a tee is detached from its readers, a departure from the rule that a
//!   departed peer cancels its connection: it runs to its end (or its idle timeout) when its
//!   first client and every resumer are gone, so that a page that reloads gets what was
//!   written, then the rest, and the session holds the whole answer either way. A tee is never
//!   closed for the pump.
//! - A [`Retention`] keeps the answers that ended for a while (Genkit's: five minutes, 16 MiB
//!   for all, the oldest forgotten first), so that a client that reconnects a moment late reads
//!   its answer whole. Expired answers are forgotten lazily, with no task per answer.

pub mod relay;

use std::collections::{HashMap, VecDeque};
use std::fmt;
use std::hash::Hash;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, OnceLock, PoisonError};
use std::time::Duration;

use axum::body::{Body, Bytes};
use futures_util::future::select_all;
use tokio::sync::mpsc;
use tokio::time::Instant;

use bidi_flow::wire::{Closed, Sink};
use relay::Publisher;

/// How many bytes of an answer are kept for the clients that resume it: past them, the answer
/// streams on to the clients reading it, and new ones are refused (410).
pub const RESUME_BYTES: usize = 8 << 20;

/// How many bytes of all the answers streaming at once are kept for resuming clients: past
/// them, answers stream on to the clients reading them, and new ones are refused (410). Without
/// it, what a server keeps grows with the answers it runs at once (8 MiB each at most).
pub const KEPT_BYTES: usize = 64 << 20;

/// What names an answer in its wire's [`Tees`]: a chat (the UI message stream), a stream id
/// (Genkit's). Every key includes its identity's scope, so that no identity reads another's.
pub trait Key: Eq + Hash + Clone + fmt::Debug + Send + Sync + 'static {}

impl<K: Eq + Hash + Clone + fmt::Debug + Send + Sync + 'static> Key for K {}

/// How many bytes the answers of every wire keep for resuming clients, and how many they may
/// keep in all ([`KEPT_BYTES`]): one budget for the server.
#[derive(Debug)]
pub struct Budget {
    kept: AtomicUsize,
    limit: usize,
}

impl Default for Budget {
    fn default() -> Self {
        Self::new(KEPT_BYTES)
    }
}

impl Budget {
    /// A budget of `limit` bytes.
    #[must_use]
    pub fn new(limit: usize) -> Self {
        Self {
            kept: AtomicUsize::new(0),
            limit,
        }
    }

    /// Counts `n` more bytes kept, unless they would take the answers over the budget.
    fn keep(&self, n: usize) -> bool {
        self.kept
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |kept| {
                kept.checked_add(n).filter(|total| *total <= self.limit)
            })
            .is_ok()
    }

    /// `n` kept bytes were dropped.
    fn release(&self, n: usize) {
        self.kept.fetch_sub(n, Ordering::AcqRel);
    }
}

/// How long, and within how many bytes in all, the answers that ended are kept for the
/// clients that come back to them: past either, the oldest are forgotten.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Retention {
    /// How long after its end an answer is kept.
    pub time: Duration,
    /// How many bytes the answers kept after their end hold at most, in all.
    pub bytes: usize,
}

impl Retention {
    /// Genkit's stream manager keeps a finished stream five minutes; in at most 16 MiB.
    pub const GENKIT: Self = Self {
        time: Duration::from_secs(300),
        bytes: 16 << 20,
    };
}

/// The answers of one wire streaming in this process, by key.
#[derive(Debug)]
pub struct Tees<K> {
    streams: Mutex<HashMap<K, Arc<Stream<K>>>>,
    budget: Arc<Budget>,
    /// How the answers that ended are kept; `None`: they are forgotten at their end.
    retention: Option<Retention>,
    /// The answers that ended and are kept, oldest first.
    ended: Mutex<Ended<K>>,
}

/// The answers kept after their end, in the order they ended, and the bytes they hold.
#[derive(Debug)]
struct Ended<K> {
    answers: VecDeque<(K, Arc<Stream<K>>)>,
    bytes: usize,
}

impl<K> Default for Ended<K> {
    fn default() -> Self {
        Self {
            answers: VecDeque::new(),
            bytes: 0,
        }
    }
}

/// One answer being streamed, and its readers.
#[derive(Debug)]
pub struct Stream<K> {
    state: Mutex<Tally>,
    /// The key it was registered under ([`Tees::insert`]), once it is.
    key: OnceLock<K>,
}

#[derive(Debug, Default)]
struct Tally {
    /// Everything written so far, unless it outgrew [`RESUME_BYTES`], as one buffer: the
    /// writes of a slow answer are a token each, and keeping each apart would cost an
    /// allocation and a handle per token (a hundred times the text, for long answers).
    written: Option<Vec<u8>>,
    /// How many bytes were written.
    len: usize,
    /// Where the writes go, one sender per reader.
    readers: Vec<mpsc::Sender<Bytes>>,
    /// The answer ended: nobody new attaches, unless it is kept (`ended`).
    over: bool,
    /// When the answer ended, if its writes are kept after its end.
    ended: Option<Instant>,
}

/// What a client coming back to an answer finds.
#[derive(Debug)]
pub enum Attached {
    /// The answer so far, and the rest as it comes.
    Reader(Bytes, Reader),
    /// No answer is streaming.
    Nothing,
    /// The answer outgrew what is kept of it.
    TooLong,
}

impl Attached {
    /// The answer so far and the rest, as one response body.
    pub fn body(written: Bytes, reader: Reader) -> Body {
        let written = futures_util::stream::iter([Ok(written)]);
        let rest = reader.into_stream();
        Body::from_stream(futures_util::StreamExt::chain(written, rest))
    }
}

fn lock<T>(mutex: &Mutex<T>) -> MutexGuard<'_, T> {
    mutex.lock().unwrap_or_else(PoisonError::into_inner)
}

/// One reader's writes; dropping it (its body) says it went away.
#[derive(Debug)]
pub struct Reader {
    writes: mpsc::Receiver<Bytes>,
}

impl Reader {
    fn new(state: &mut Tally) -> Self {
        let (sender, writes) = mpsc::channel(READER_WINDOW);
        state.readers.push(sender);
        Self { writes }
    }

    /// The reader of an answer that ended: nothing more comes.
    fn ended() -> Self {
        let (_, writes) = mpsc::channel(1);
        Self { writes }
    }

    async fn recv(&mut self) -> Option<Bytes> {
        self.writes.recv().await
    }

    fn into_stream(
        self,
    ) -> impl futures_util::Stream<Item = Result<Bytes, std::convert::Infallible>> + Send {
        futures_util::stream::unfold(self, |mut reader| async move {
            reader.recv().await.map(|bytes| (Ok(bytes), reader))
        })
    }

    /// The rest of the answer as a response body.
    pub fn body(self) -> Body {
        Body::from_stream(self.into_stream())
    }
}

impl<K: Key> Tees<K> {
    /// No answers yet; what they keep counts in `budget`. An answer is forgotten at its end.
    pub fn new(budget: Arc<Budget>) -> Self {
        Self {
            streams: Mutex::default(),
            budget,
            retention: None,
            ended: Mutex::default(),
        }
    }

    /// [`new`](Self::new), keeping the answers that ended as `retention` says (none if its
    /// time or its bytes are zero).
    pub fn with_retention(budget: Arc<Budget>, retention: Retention) -> Self {
        let kept = !retention.time.is_zero() && retention.bytes > 0;
        Self {
            retention: kept.then_some(retention),
            ..Self::new(budget)
        }
    }

    /// Registers `tee`'s answer under `key`, unless it is over already (and not kept). An
    /// answer registered under `key` before is over (a chat's session runs one answer at a
    /// time): it is replaced.
    pub fn insert(&self, key: K, tee: &Arc<Stream<K>>) {
        let kept = {
            let mut streams = lock(&self.streams);
            let state = lock(&tee.state);
            if state.over && state.ended.is_none() {
                return;
            }
            // Set under the answer's lock, so that its end (which reads it after setting
            // `over`) finds it.
            let _ = tee.key.set(key.clone());
            streams.insert(key.clone(), Arc::clone(tee));
            state.over
        };
        if kept {
            // It ended before it was registered: kept from now.
            self.keep(key, tee);
        }
    }

    /// A new reader of the answer `key` names: while it streams, or, once it ended, while it
    /// is kept.
    pub fn attach(&self, key: &K) -> Attached {
        self.forget_expired();
        let Some(stream) = lock(&self.streams).get(key).cloned() else {
            return Attached::Nothing;
        };
        let mut state = lock(&stream.state);
        if state.over {
            return match (&state.written, state.ended) {
                (Some(written), Some(_)) => {
                    Attached::Reader(Bytes::copy_from_slice(written), Reader::ended())
                }
                _ => Attached::Nothing,
            };
        }
        let Some(written) = state.written.as_deref().map(Bytes::copy_from_slice) else {
            return Attached::TooLong;
        };
        let reader = Reader::new(&mut state);
        Attached::Reader(written, reader)
    }

    /// Forgets `stream`, the answer of `key`, unless another answer replaced it.
    fn remove(&self, key: &K, stream: &Arc<Stream<K>>) {
        let mut streams = lock(&self.streams);
        if streams
            .get(key)
            .is_some_and(|registered| Arc::ptr_eq(registered, stream))
        {
            streams.remove(key);
        }
    }

    /// Keeps `stream`, the answer of `key` that ended with its writes, for the retention's
    /// time: the oldest answers kept are forgotten while the kept ones hold more than its
    /// bytes.
    fn keep(&self, key: K, stream: &Arc<Stream<K>>) {
        let Some(retention) = self.retention else {
            self.remove(&key, stream);
            return;
        };
        let len = lock(&stream.state).written.as_ref().map_or(0, Vec::len);
        // Those whose time is up first, then the oldest while they hold too much. No task
        // watches the time: what expired is forgotten here and when a client asks, and holds
        // at most the retention's bytes meanwhile.
        self.forget_expired();
        let mut ended = lock(&self.ended);
        ended.bytes += len;
        ended.answers.push_back((key, Arc::clone(stream)));
        while ended.bytes > retention.bytes {
            let Some((key, oldest)) = ended.answers.pop_front() else {
                break;
            };
            ended.bytes -= self.forget(&key, &oldest);
        }
    }

    /// Forgets the kept answers whose time is up.
    fn forget_expired(&self) {
        let Some(retention) = self.retention else {
            return;
        };
        let mut ended = lock(&self.ended);
        while let Some((key, oldest)) = ended.answers.front() {
            let expired = lock(&oldest.state)
                .ended
                .is_none_or(|at| at.elapsed() >= retention.time);
            if !expired {
                break;
            }
            let (key, oldest) = (key.clone(), Arc::clone(oldest));
            ended.answers.pop_front();
            ended.bytes -= self.forget(&key, &oldest);
        }
    }

    /// Forgets `stream`, a kept answer of `key`: the bytes it held.
    fn forget(&self, key: &K, stream: &Arc<Stream<K>>) -> usize {
        self.remove(key, stream);
        let mut state = lock(&stream.state);
        state.ended = None;
        state.written.take().map_or(0, |written| written.len())
    }

    /// How many answers are registered.
    #[cfg(test)]
    fn len(&self) -> usize {
        lock(&self.streams).len()
    }
}

/// The writes of an answer: to every reader, kept for readers to come. The answer runs to its
/// end whoever reads it (detached: a page that reloads resumes a chat's answer, a Genkit client
/// that lost its connection reconnects to its stream); dropping the tee (the answer is over)
/// ends the readers' bodies and forgets the answer.
#[derive(Debug)]
pub struct Tee<K: Key> {
    tees: Arc<Tees<K>>,
    stream: Arc<Stream<K>>,
    /// Where the writes also go for readers in other processes, if the store keeps streams.
    publisher: Option<Publisher>,
}

impl<K: Key> Tee<K> {
    /// A tee of an answer, to be registered in `tees` once it has started ([`Tees::insert`]
    /// with [`stream`](Self::stream)), and its first reader (the client that asked).
    pub fn new(tees: Arc<Tees<K>>, publisher: Option<Publisher>) -> (Self, Reader) {
        let stream = Arc::new(Stream {
            state: Mutex::default(),
            key: OnceLock::new(),
        });
        let reader = {
            let mut state = lock(&stream.state);
            state.written = Some(Vec::new());
            Reader::new(&mut state)
        };
        (
            Self {
                tees,
                stream,
                publisher,
            },
            reader,
        )
    }

    /// The answer, to register.
    #[must_use]
    pub fn stream(&self) -> Arc<Stream<K>> {
        Arc::clone(&self.stream)
    }
}

/// How many writes a reader of an answer may be behind the fastest reader: past them it
/// is dropped rather than hold the others back (at most 16 KiB each).
const READER_WINDOW: usize = 64;

/// How many writes an answer runs ahead of its fastest reader, as any answer does of its
/// client: an answer nobody takes fast enough waits instead of queueing a window of writes for
/// its client.
const AHEAD: usize = 1;

/// How many writes wait for `reader`.
fn queued(reader: &mpsc::Sender<Bytes>) -> usize {
    reader.max_capacity() - reader.capacity()
}

/// Hands `bytes` to every reader, at the pace of the fastest: it waits until the fastest
/// reader is at most [`AHEAD`] writes behind. The readers that were left a window behind the
/// one that took `bytes` are returned, to be dropped.
async fn deliver(readers: &[mpsc::Sender<Bytes>], bytes: &Bytes) -> Vec<mpsc::Sender<Bytes>> {
    let mut behind = Vec::new();
    let mut taken = false;
    for reader in readers {
        match reader.try_send(bytes.clone()) {
            Ok(()) => taken = true,
            Err(mpsc::error::TrySendError::Full(_)) => behind.push(reader.clone()),
            Err(mpsc::error::TrySendError::Closed(_)) => {}
        }
    }
    if !taken && !behind.is_empty() {
        // Every reader is a window behind: the first to make room takes `bytes`.
        let first = {
            let reserves = behind.iter().map(|reader| Box::pin(reader.reserve()));
            let (permit, first, _) = select_all(reserves).await;
            if let Ok(permit) = permit {
                permit.send(bytes.clone());
            }
            first
        };
        behind.swap_remove(first);
        behind.retain(|reader| {
            matches!(
                reader.try_send(bytes.clone()),
                Err(mpsc::error::TrySendError::Full(_))
            )
        });
    }
    // The readers that keep up: the answer goes on once one of them is at most `AHEAD` behind.
    let keeping_up: Vec<_> = readers
        .iter()
        .filter(|reader| {
            !reader.is_closed() && !behind.iter().any(|slow| slow.same_channel(reader))
        })
        .collect();
    if !keeping_up.is_empty() && keeping_up.iter().all(|reader| queued(reader) > AHEAD) {
        // Waits until one of them has room for all but `AHEAD` writes (or is gone).
        let caught_up = keeping_up
            .iter()
            .map(|reader| Box::pin(reader.reserve_many(READER_WINDOW - AHEAD)));
        drop(select_all(caught_up).await);
    }
    behind
}

impl<K: Key> Tee<K> {
    /// Writes `bytes` to every reader and keeps them for readers to come.
    async fn send(&self, bytes: Bytes) -> Result<(), Closed> {
        if let Some(publisher) = &self.publisher {
            publisher.send(&bytes);
        }
        let readers = {
            let mut state = lock(&self.stream.state);
            let len = state.len + bytes.len();
            let budget = &self.tees.budget;
            match &mut state.written {
                Some(written) if len <= RESUME_BYTES && budget.keep(bytes.len()) => {
                    written.extend_from_slice(&bytes);
                }
                Some(written) => {
                    budget.release(written.len());
                    state.written = None;
                }
                None => {}
            }
            state.len = len;
            state.readers.clone()
        };
        let behind = deliver(&readers, &bytes).await;
        let mut state = lock(&self.stream.state);
        // A reader a window behind another is dropped: its body ends where it is, and the
        // others go on at their pace. With no reader left the answer still runs on: a client
        // that comes back resumes it.
        state.readers.retain(|reader| {
            !reader.is_closed() && !behind.iter().any(|slow| slow.same_channel(reader))
        });
        Ok(())
    }
}

/// Nobody reading is no reason to stop (the sink is never closed): the answer is kept for a
/// client that resumes.
impl<K: Key> Sink<Vec<u8>> for Tee<K> {
    async fn send(&self, frames: Vec<u8>) -> Result<(), Closed> {
        Self::send(self, Bytes::from(frames)).await
    }
}

impl<K: Key> Drop for Tee<K> {
    fn drop(&mut self) {
        let (kept, key) = {
            let mut state = lock(&self.stream.state);
            state.over = true;
            // Read under the answer's lock, as `insert` sets it: either it was registered
            // before, or `insert` finds it over.
            let key = self.stream.key.get().cloned();
            state.readers.clear();
            let written = state.written.take();
            if let Some(written) = &written {
                self.tees.budget.release(written.len());
            }
            // Kept after its end, out of the budget of the answers that stream.
            match (written, self.tees.retention) {
                (Some(written), Some(retention)) if written.len() <= retention.bytes => {
                    state.written = Some(written);
                    state.ended = Some(Instant::now());
                    (true, key)
                }
                _ => (false, key),
            }
        };
        match key {
            Some(key) if kept => self.tees.keep(key, &self.stream),
            Some(key) => self.tees.remove(&key, &self.stream),
            // Not registered yet: `insert` keeps it, or nobody does.
            None => {}
        }
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use super::*;
    use crate::Identity;
    use crate::turns::TurnKey;
    use crate::turns::TurnKey as ChatKey;

    /// The answers of a server: its chats, and its Genkit streams, under one budget.
    struct Shared {
        chats: Arc<Tees<ChatKey>>,
        turns: Arc<Tees<TurnKey>>,
    }

    fn shared() -> Arc<Shared> {
        with_budget(KEPT_BYTES)
    }

    fn with_budget(budget: usize) -> Arc<Shared> {
        let budget = Arc::new(Budget::new(budget));
        Arc::new(Shared {
            chats: Arc::new(Tees::new(Arc::clone(&budget))),
            turns: Arc::new(Tees::new(budget)),
        })
    }

    fn key(chat: &str) -> ChatKey {
        ChatKey::new(None, "helper", chat)
    }

    /// A registered answer of `chat`, and its first reader.
    fn answer(shared: &Arc<Shared>, chat: &str) -> (Tee<ChatKey>, Reader) {
        let (tee, reader) = Tee::new(Arc::clone(&shared.chats), None);
        shared.chats.insert(key(chat), &tee.stream);
        (tee, reader)
    }

    fn read_all(mut reader: Reader) -> tokio::task::JoinHandle<Vec<u8>> {
        tokio::spawn(async move {
            let mut all = Vec::new();
            while let Some(bytes) = reader.recv().await {
                all.extend_from_slice(&bytes);
            }
            all
        })
    }

    fn attach(shared: &Shared, chat: &str) -> (Vec<u8>, Reader) {
        match shared.chats.attach(&key(chat)) {
            Attached::Reader(written, reader) => (written.to_vec(), reader),
            other => panic!("{other:?}"),
        }
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_resumed_answer_is_what_was_written_then_the_rest_and_is_forgotten_at_its_end() {
        let shared = shared();
        let (tee, mut first) = answer(&shared, "c");
        assert!(matches!(
            shared.chats.attach(&key("other")),
            Attached::Nothing
        ));
        tee.send(Bytes::from_static(b"one ")).await.unwrap();
        assert_eq!(first.recv().await.unwrap(), "one ");
        tee.send(Bytes::from_static(b"two ")).await.unwrap();
        assert_eq!(first.recv().await.unwrap(), "two ");
        let (written, rest) = attach(&shared, "c");
        let (written2, rest2) = attach(&shared, "c");
        assert_eq!(written, b"one two ");
        assert_eq!(written2, b"one two ");
        let (first, rest, rest2) = (read_all(first), read_all(rest), read_all(rest2));
        tee.send(Bytes::from_static(b"three ")).await.unwrap();
        tee.send(Bytes::from_static(b"four")).await.unwrap();
        drop(tee);
        assert_eq!(first.await.unwrap(), b"three four");
        assert_eq!(rest.await.unwrap(), b"three four");
        assert_eq!(rest2.await.unwrap(), b"three four");
        assert_eq!(shared.chats.len(), 0, "the answer is forgotten");
        assert!(matches!(shared.chats.attach(&key("c")), Attached::Nothing));
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn an_answer_nobody_reads_runs_on_for_a_client_that_comes_back() {
        let shared = shared();
        let (tee, mut first) = answer(&shared, "c");
        tee.send(Bytes::from_static(b"a")).await.unwrap();
        assert_eq!(first.recv().await.unwrap(), "a");
        drop(first);
        // Nobody reads: the answer goes on, kept for whoever comes back.
        tee.send(Bytes::from_static(b"b")).await.unwrap();
        let closed = tokio::time::timeout(std::time::Duration::from_millis(50), tee.closed());
        assert!(
            closed.await.is_err(),
            "nobody reading does not end the answer"
        );
        let (written, mut back) = attach(&shared, "c");
        assert_eq!(written, b"ab");
        tee.send(Bytes::from_static(b"c")).await.unwrap();
        assert_eq!(back.recv().await.unwrap(), "c");
        drop(tee);
        assert!(
            back.recv().await.is_none(),
            "the answer's end ends the body"
        );
        assert_eq!(shared.chats.len(), 0);
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn an_answer_runs_on_while_a_resuming_client_reads() {
        let shared = shared();
        let (tee, mut first) = answer(&shared, "c");
        tee.send(Bytes::from_static(b"a")).await.unwrap();
        assert_eq!(first.recv().await.unwrap(), "a");
        let (written, mut second) = attach(&shared, "c");
        assert_eq!(written, b"a");
        drop(first);
        tee.send(Bytes::from_static(b"b")).await.unwrap();
        assert_eq!(second.recv().await.unwrap(), "b");
        drop(tee);
        assert_eq!(shared.chats.len(), 0);
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn an_answer_over_the_kept_bytes_streams_on_but_is_not_resumed() {
        let shared = shared();
        let (tee, mut first) = answer(&shared, "c");
        tee.send(Bytes::from(vec![b'x'; RESUME_BYTES]))
            .await
            .unwrap();
        assert_eq!(first.recv().await.unwrap().len(), RESUME_BYTES);
        drop(attach(&shared, "c"));
        tee.send(Bytes::from_static(b"y")).await.unwrap();
        assert_eq!(first.recv().await.unwrap(), "y");
        assert!(matches!(shared.chats.attach(&key("c")), Attached::TooLong));
        let first = read_all(first);
        tee.send(Bytes::from_static(b"z")).await.unwrap();
        drop(tee);
        assert_eq!(first.await.unwrap(), b"z");
        assert_eq!(shared.chats.len(), 0);
    }

    /// A slow answer's many small writes are kept as one buffer for resuming clients: what
    /// it holds grows with the text, not with the number of writes.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn an_answer_of_many_small_writes_is_kept_in_one_buffer() {
        let shared = shared();
        let (tee, asker) = answer(&shared, "c");
        let asker = read_all(asker);
        for _ in 0..10_000 {
            tee.send(Bytes::from_static(b"token")).await.unwrap();
        }
        let kept = lock(&tee.stream.state)
            .written
            .as_ref()
            .map_or(0, Vec::capacity);
        assert!(kept <= 2 * 50_000, "{kept} bytes kept for 50,000 written");
        let (written, _) = attach(&shared, "c");
        assert_eq!(written.len(), 50_000);
        drop(tee);
        assert_eq!(asker.await.unwrap().len(), 50_000);
    }

    /// A resuming client that never reads falls a window behind and is dropped: the asker
    /// gets every write without waiting for it.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_reader_that_never_reads_holds_nobody_back() {
        let shared = shared();
        let (tee, asker) = answer(&shared, "c");
        let (_, stalled) = attach(&shared, "c");
        let asker = read_all(asker);
        let writes = READER_WINDOW * 4;
        let sent = tokio::time::timeout(std::time::Duration::from_secs(30), async {
            for _ in 0..writes {
                tee.send(Bytes::from_static(b"x")).await.unwrap();
            }
        })
        .await;
        assert!(
            sent.is_ok(),
            "a reader that never reads held the answer back"
        );
        drop(tee);
        assert_eq!(asker.await.unwrap().len(), writes);
        // The stalled reader got what fit in its window, then its body ends.
        let mut stalled = stalled;
        let mut got = 0;
        while stalled.recv().await.is_some() {
            got += 1;
        }
        assert_eq!(got, READER_WINDOW);
    }

    /// An answer whose client does not read waits: it does not queue a window of writes
    /// (up to 64 of 16 KiB) for that client.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn an_answer_runs_one_write_ahead_of_its_fastest_reader() {
        use futures_util::FutureExt as _;
        let shared = shared();
        let (tee, mut asker) = answer(&shared, "c");
        let mut taken = 0;
        while taken < READER_WINDOW {
            if tee.send(Bytes::from_static(b"x")).now_or_never().is_none() {
                break;
            }
            taken += 1;
        }
        // One write is queued and taken at once, the second waits for the client (queued,
        // its send pending).
        assert_eq!(taken, AHEAD, "writes taken with nobody reading");
        assert_eq!(queued(&lock(&tee.stream.state).readers[0]), AHEAD + 1);
        // The client reads one: the answer goes on.
        assert_eq!(asker.recv().await.unwrap(), "x");
        assert!(tee.send(Bytes::from_static(b"y")).now_or_never().is_none());
        drop(tee);
    }

    /// What all the answers keep for resuming clients is bounded: an answer that would take
    /// them over the budget is no longer kept (but streams on), and its bytes count again once
    /// it ends.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn the_answers_streaming_at_once_keep_at_most_the_budget() {
        let shared = with_budget(10);
        let (first, one) = answer(&shared, "one");
        let (second, two) = answer(&shared, "two");
        let (one, two) = (read_all(one), read_all(two));
        first.send(Bytes::from_static(b"123456")).await.unwrap();
        second.send(Bytes::from_static(b"abc")).await.unwrap();
        assert_eq!(shared.chats.budget.kept.load(Ordering::Acquire), 9);
        // Over the budget: `two` is no longer kept, and what it kept is counted no more.
        second.send(Bytes::from_static(b"def")).await.unwrap();
        assert!(matches!(
            shared.chats.attach(&key("two")),
            Attached::TooLong
        ));
        assert_eq!(shared.chats.budget.kept.load(Ordering::Acquire), 6);
        let (written, _) = attach(&shared, "one");
        assert_eq!(written, b"123456");
        drop((first, second));
        assert_eq!(shared.chats.budget.kept.load(Ordering::Acquire), 0);
        assert_eq!(one.await.unwrap(), b"123456");
        assert_eq!(two.await.unwrap(), b"abcdef");
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_new_answer_of_the_chat_is_not_forgotten_with_the_old_one() {
        let shared = shared();
        let (old, _old_reader) = answer(&shared, "c");
        let (new, _new_reader) = answer(&shared, "c");
        drop(old);
        assert_eq!(shared.chats.len(), 1);
        drop(attach(&shared, "c"));
        drop(new);
        assert_eq!(shared.chats.len(), 0);
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn an_answer_over_before_it_is_registered_is_not() {
        let shared = shared();
        let (tee, _reader) = Tee::new(Arc::clone(&shared.chats), None);
        let stream = Arc::clone(&tee.stream);
        drop(tee);
        shared.chats.insert(key("c"), &stream);
        assert_eq!(shared.chats.len(), 0);
    }

    /// A Genkit stream, keyed by its stream id in its identity's scope and its agent: found
    /// by that key alone, never by another identity, another agent, or as a chat.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_stream_keyed_by_stream_id_is_found_in_its_scope_only() {
        let shared = shared();
        let alice = Identity::new("alice");
        let stream = |who: Option<&Identity>, agent: &str| TurnKey::new(who, agent, "s-1");
        let (tee, mut first) = Tee::new(Arc::clone(&shared.turns), None);
        shared
            .turns
            .insert(stream(Some(&alice), "helper"), &tee.stream);
        tee.send(Bytes::from_static(b"data: 1\n\n")).await.unwrap();
        assert_eq!(first.recv().await.unwrap(), "data: 1\n\n");
        let bob = Identity::new("bob");
        for other in [stream(Some(&bob), "helper"), stream(None, "helper")] {
            assert!(matches!(shared.turns.attach(&other), Attached::Nothing));
        }
        let elsewhere = stream(Some(&alice), "other");
        assert!(matches!(shared.turns.attach(&elsewhere), Attached::Nothing));
        let chat = ChatKey::new(Some(&alice), "helper", "s-1");
        assert!(matches!(shared.chats.attach(&chat), Attached::Nothing));
        let Attached::Reader(written, rest) = shared.turns.attach(&stream(Some(&alice), "helper"))
        else {
            panic!("alice's stream is not found");
        };
        assert_eq!(written, "data: 1\n\n");
        let rest = read_all(rest);
        tee.send(Bytes::from_static(b"data: 2\n\n")).await.unwrap();
        drop(tee);
        assert_eq!(rest.await.unwrap(), b"data: 2\n\n");
        assert_eq!(shared.turns.len(), 0, "the stream is forgotten at its end");
        let gone = shared.turns.attach(&stream(Some(&alice), "helper"));
        assert!(matches!(gone, Attached::Nothing));
    }

    /// A chat, keyed by its chat id in its identity's scope: another identity's chat of the
    /// same id is another chat.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_chat_keyed_by_chat_id_is_found_in_its_scope_only() {
        let shared = shared();
        let alice = Identity::new("alice");
        let (tee, _first) = Tee::new(Arc::clone(&shared.chats), None);
        shared
            .chats
            .insert(ChatKey::new(Some(&alice), "helper", "c"), &tee.stream);
        tee.send(Bytes::from_static(b"a")).await.unwrap();
        assert!(matches!(shared.chats.attach(&key("c")), Attached::Nothing));
        let bob = ChatKey::new(Some(&Identity::new("bob")), "helper", "c");
        assert!(matches!(shared.chats.attach(&bob), Attached::Nothing));
        let own = shared
            .chats
            .attach(&ChatKey::new(Some(&alice), "helper", "c"));
        assert!(matches!(own, Attached::Reader(written, _) if written == "a"));
    }

    /// Chats and Genkit streams keep their bytes in one budget: what one wire keeps leaves
    /// less for the other.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn both_wires_keep_their_answers_in_one_budget() {
        let shared = with_budget(10);
        let (chat, one) = answer(&shared, "c");
        let (stream, two) = Tee::new(Arc::clone(&shared.turns), None);
        let id = TurnKey::new(None, "helper", "s");
        shared.turns.insert(id.clone(), &stream.stream);
        let (one, two) = (read_all(one), read_all(two));
        chat.send(Bytes::from_static(b"123456")).await.unwrap();
        stream.send(Bytes::from_static(b"abcdef")).await.unwrap();
        assert!(matches!(shared.turns.attach(&id), Attached::TooLong));
        assert_eq!(shared.chats.budget.kept.load(Ordering::Acquire), 6);
        drop((chat, stream));
        assert_eq!(shared.turns.budget.kept.load(Ordering::Acquire), 0);
        assert_eq!(one.await.unwrap(), b"123456");
        assert_eq!(two.await.unwrap(), b"abcdef");
    }

    /// Genkit streams with a retention of `time` and `bytes`, under a roomy budget.
    fn retained(time: Duration, bytes: usize) -> Arc<Tees<TurnKey>> {
        let retention = Retention { time, bytes };
        Arc::new(Tees::with_retention(
            Arc::new(Budget::new(KEPT_BYTES)),
            retention,
        ))
    }

    /// A registered Genkit stream `id` of `tees` that wrote `bytes` and ended.
    async fn ended(tees: &Arc<Tees<TurnKey>>, id: &str, bytes: &'static [u8]) {
        let (tee, first) = Tee::new(Arc::clone(tees), None);
        tees.insert(TurnKey::new(None, "helper", id), &tee.stream);
        let first = read_all(first);
        tee.send(Bytes::from_static(bytes)).await.unwrap();
        drop(tee);
        assert_eq!(first.await.unwrap(), bytes);
    }

    /// What a client coming back to stream `id` reads: all of it, and its end, or `None`.
    async fn replayed(tees: &Tees<TurnKey>, id: &str) -> Option<Vec<u8>> {
        match tees.attach(&TurnKey::new(None, "helper", id)) {
            Attached::Reader(written, rest) => {
                let mut all = written.to_vec();
                all.extend(read_all(rest).await.unwrap());
                Some(all)
            }
            Attached::Nothing => None,
            Attached::TooLong => panic!("too long"),
        }
    }

    /// A stream that ended is read again whole, for its retention's time; then it is
    /// forgotten.
    #[tokio::test(start_paused = true)]
    async fn an_ended_stream_is_replayed_for_its_time_then_forgotten() {
        let tees = retained(Duration::from_secs(60), 1024);
        ended(&tees, "s-1", b"data: 1\n\n").await;
        assert_eq!(replayed(&tees, "s-1").await.unwrap(), b"data: 1\n\n");
        assert_eq!(replayed(&tees, "s-1").await.unwrap(), b"data: 1\n\n");
        tokio::time::advance(Duration::from_secs(61)).await;
        assert_eq!(
            replayed(&tees, "s-1").await,
            None,
            "forgotten past its time"
        );
        assert_eq!(tees.len(), 0);
        assert_eq!(lock(&tees.ended).bytes, 0);
    }

    /// The streams kept after their end hold at most the retention's bytes: the oldest are
    /// forgotten first. A stream larger than that is not kept at all.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn ended_streams_keep_at_most_the_retention_bytes_the_oldest_forgotten_first() {
        let tees = retained(Duration::from_secs(3600), 10);
        ended(&tees, "one", b"1234").await;
        ended(&tees, "two", b"5678").await;
        assert_eq!(lock(&tees.ended).bytes, 8);
        ended(&tees, "three", b"90").await;
        assert_eq!(lock(&tees.ended).bytes, 10);
        ended(&tees, "four", b"ab").await;
        assert_eq!(
            replayed(&tees, "one").await,
            None,
            "the oldest is forgotten"
        );
        assert_eq!(replayed(&tees, "two").await.unwrap(), b"5678");
        assert_eq!(replayed(&tees, "four").await.unwrap(), b"ab");
        assert_eq!(lock(&tees.ended).bytes, 8);
        ended(&tees, "huge", b"01234567890").await;
        assert_eq!(
            replayed(&tees, "huge").await,
            None,
            "over the bytes: not kept"
        );
        assert_eq!(replayed(&tees, "two").await.unwrap(), b"5678");
    }

    /// A stream that ended before it was registered (a turn over at once) is kept too.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_stream_over_before_it_is_registered_is_kept() {
        let tees = retained(Duration::from_secs(3600), 1024);
        let (tee, first) = Tee::new(Arc::clone(&tees), None);
        let first = read_all(first);
        tee.send(Bytes::from_static(b"all")).await.unwrap();
        let stream = Arc::clone(&tee.stream);
        drop(tee);
        assert_eq!(first.await.unwrap(), b"all");
        tees.insert(TurnKey::new(None, "helper", "late"), &stream);
        assert_eq!(replayed(&tees, "late").await.unwrap(), b"all");
    }

    /// Without a retention (the chats'), or with a zero one, a stream is forgotten at its end.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn without_a_retention_an_ended_stream_is_forgotten() {
        let tees = retained(Duration::ZERO, 1024);
        ended(&tees, "s", b"x").await;
        assert_eq!(replayed(&tees, "s").await, None);
        assert_eq!(tees.len(), 0);
    }
}
