//! How one published event reaches every subscriber: a queue per subscriber.
//!
//! Publishing (serialised by the bus's publish lock) appends the same `Arc<Event>` to the
//! queue of every subscriber, in publish order; each subscriber takes what is queued for it
//! in batches, so its cost per event is a pointer move (and, for a pub-socket subscriber, a
//! copy of the frame into its write buffer), never a lock or a system call of its own.
//!
//! Every queue is bounded by its *budget*: each event held counts its frame's length plus
//! [`EVENT_OVERHEAD`] bytes (the memory the shared event itself takes, roughly). Two kinds:
//! - **raw** (pub-socket subscribers): over the budget, the oldest events are dropped and
//!   counted; the reader learns the count before the next event it takes;
//! - **lossless** (in-process subscribers, [`Subscription`]): the budget is a semaphore.
//!   A pull-socket sender reserves its batch's charge before the batch is published and
//!   waits while the subscriber is a budget behind (back-pressure to that sender's
//!   connection only; other subscribers keep being served). An in-process `fire` never
//!   waits: its charge is taken from the budget when there is room, else admitted as debt
//!   up to one more budget; only past that is an event refused for this subscriber, and
//!   the refusal is queued in its place ([`RecvError::Lagged`]).

use crate::event::Event;
use std::collections::VecDeque;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use tokio::sync::{Notify, Semaphore};

/// Bytes each queued event counts against a subscriber's budget on top of its frame: the
/// shared event's own memory (tag, decoded data, bookkeeping), roughly.
pub const EVENT_OVERHEAD: usize = 512;

/// Items an in-process [`Subscription`] takes from its queue at once.
const TAKE_AT_ONCE: usize = 1024;

/// What `event` counts against a budget.
pub(crate) fn cost(event: &Event) -> usize {
    event.frame().len() + EVENT_OVERHEAD
}

/// One queued item: an event, or (lossless queues) a run of events refused at that place.
enum Item {
    Event(Arc<Event>),
    Lost(u64),
}

struct State {
    items: VecDeque<Item>,
    /// Raw queues: the charge of the events held.
    charged: usize,
    /// Raw queues: events dropped from the front since the reader last took any.
    dropped: u64,
    /// Lossless queues: charge admitted beyond the semaphore (in-process fires).
    debt: usize,
    /// Nothing more will be queued (the bus is gone, or the subscriber left).
    closed: bool,
}

/// One subscriber's queue (see the module docs).
pub(crate) struct Queue {
    state: Mutex<State>,
    /// Wakes the subscriber when its queue becomes non-empty or closes.
    ready: Notify,
    /// Lossless queues: the budget not yet charged.
    room: Option<Semaphore>,
    budget: usize,
    /// The subscriber left: publishing skips and forgets the queue.
    left: AtomicBool,
    /// Events dropped or refused and not yet logged by the subscriber's task.
    unlogged: AtomicU64,
}

impl Queue {
    fn new(budget: usize, lossless: bool) -> Arc<Queue> {
        Arc::new(Queue {
            state: Mutex::new(State {
                items: VecDeque::new(),
                charged: 0,
                dropped: 0,
                debt: 0,
                closed: false,
            }),
            ready: Notify::new(),
            room: lossless.then(|| Semaphore::new(budget)),
            budget,
            left: AtomicBool::new(false),
            unlogged: AtomicU64::new(0),
        })
    }

    /// A queue that drops its oldest events beyond `budget`.
    pub(crate) fn raw(budget: usize) -> Arc<Queue> {
        Queue::new(budget, false)
    }

    /// A queue whose pull-socket publishers wait for room (see the module docs).
    pub(crate) fn lossless(budget: usize) -> Arc<Queue> {
        Queue::new(budget, true)
    }

    fn lock(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }

    pub(crate) fn is_lossless(&self) -> bool {
        self.room.is_some()
    }

    pub(crate) fn has_left(&self) -> bool {
        self.left.load(Ordering::Relaxed)
    }

    /// Events dropped or refused since the last call.
    pub(crate) fn take_unlogged(&self) -> u64 {
        self.unlogged.swap(0, Ordering::Relaxed)
    }

    /// Reserves `charge` of a lossless queue's budget (at most the whole budget) for a batch
    /// about to be published, waiting while it is not free. Returns what was reserved, to
    /// pass to [`push`](Self::push); 0 for a raw queue or one that closed.
    pub(crate) async fn reserve(&self, charge: usize) -> usize {
        let Some(room) = &self.room else { return 0 };
        let n = charge.min(self.budget);
        let Ok(permits) = u32::try_from(n) else {
            return 0;
        };
        match room.acquire_many(permits).await {
            Ok(p) => {
                p.forget();
                n
            }
            Err(_) => 0,
        }
    }

    /// Appends `events` in order. `prepaid` is what [`reserve`](Self::reserve) took for
    /// them. Returns how many events this subscriber lost to it (dropped or refused).
    pub(crate) fn push(&self, events: &[Arc<Event>], prepaid: usize) -> u64 {
        let mut st = self.lock();
        let lost = if st.closed {
            0
        } else {
            let was_empty = st.items.is_empty();
            let lost = match &self.room {
                None => self.push_raw(&mut st, events),
                Some(room) => self.push_lossless(&mut st, room, events, prepaid),
            };
            if was_empty && !st.items.is_empty() {
                self.ready.notify_one();
            }
            lost
        };
        drop(st);
        if lost > 0 {
            self.unlogged.fetch_add(lost, Ordering::Relaxed);
        }
        lost
    }

    fn push_raw(&self, st: &mut State, events: &[Arc<Event>]) -> u64 {
        for e in events {
            st.charged += cost(e);
            st.items.push_back(Item::Event(e.clone()));
        }
        let mut dropped = 0;
        // The budget holds at least two of the largest events: the newest always stays.
        while st.charged > self.budget && st.items.len() > 1 {
            if let Some(Item::Event(e)) = st.items.pop_front() {
                st.charged -= cost(&e);
                dropped += 1;
            }
        }
        st.dropped += dropped;
        dropped
    }

    fn push_lossless(
        &self,
        st: &mut State,
        room: &Semaphore,
        events: &[Arc<Event>],
        mut prepaid: usize,
    ) -> u64 {
        let mut refused = 0;
        for e in events {
            let c = cost(e);
            let need = c.saturating_sub(prepaid);
            let paid = need == 0
                || u32::try_from(need)
                    .ok()
                    .and_then(|n| room.try_acquire_many(n).ok())
                    .map(|p| p.forget())
                    .is_some()
                || (st.debt + need <= self.budget && {
                    st.debt += need;
                    true
                });
            if paid {
                prepaid -= c.min(prepaid);
                st.items.push_back(Item::Event(e.clone()));
            } else {
                refused += 1;
                match st.items.back_mut() {
                    Some(Item::Lost(n)) => *n += 1,
                    _ => st.items.push_back(Item::Lost(1)),
                }
            }
        }
        if prepaid > 0 {
            room.add_permits(prepaid);
        }
        refused
    }

    /// Raw queues: waits until something is queued, then moves events into `out` (at least
    /// one, then while their frames total less than `max_bytes`). Returns how many events
    /// were dropped right before them; `None` once the queue is closed and empty.
    pub(crate) async fn take_frames(
        &self,
        out: &mut Vec<Arc<Event>>,
        max_bytes: usize,
    ) -> Option<u64> {
        loop {
            {
                let mut st = self.lock();
                if !st.items.is_empty() {
                    let mut bytes = 0;
                    while bytes < max_bytes {
                        match st.items.pop_front() {
                            Some(Item::Event(e)) => {
                                bytes += e.frame().len();
                                st.charged -= cost(&e);
                                out.push(e);
                            }
                            // Raw queues hold no refusals.
                            Some(Item::Lost(_)) => {}
                            None => break,
                        }
                    }
                    return Some(std::mem::take(&mut st.dropped));
                }
                if st.closed {
                    return None;
                }
            }
            self.ready.notified().await;
        }
    }

    /// Lossless queues: moves up to `max` items into `out` without waiting and gives their
    /// charge back to the budget. Returns whether the queue is closed.
    fn take_items(&self, out: &mut VecDeque<Item>, max: usize) -> bool {
        let mut st = self.lock();
        let mut release = 0;
        for _ in 0..max {
            match st.items.pop_front() {
                Some(item) => {
                    if let Item::Event(e) = &item {
                        release += cost(e);
                    }
                    out.push_back(item);
                }
                None => break,
            }
        }
        let repaid = release.min(st.debt);
        st.debt -= repaid;
        if let Some(room) = &self.room {
            room.add_permits(release - repaid);
        }
        st.closed
    }

    /// Waits until something is queued or the queue is closed.
    async fn wait(&self) {
        loop {
            {
                let st = self.lock();
                if !st.items.is_empty() || st.closed {
                    return;
                }
            }
            self.ready.notified().await;
        }
    }

    /// The bus is gone: nothing more will be queued; the subscriber takes what is left.
    pub(crate) fn close(&self) {
        self.lock().closed = true;
        self.ready.notify_one();
        if let Some(room) = &self.room {
            room.close();
        }
    }

    /// The subscriber left: publishing skips the queue from now on, and publishers waiting
    /// for its room stop waiting.
    pub(crate) fn leave(&self) {
        self.left.store(true, Ordering::Relaxed);
        self.close();
    }
}

/// Why [`Subscription::recv`] returned no event.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RecvError {
    /// This many events were refused to this subscriber here: it was more than twice its
    /// budget behind while the daemon itself fired them (see [`Subscription`]).
    Lagged(u64),
    /// The bus is gone (or the subscription was [closed](Subscription::close)) and every
    /// event queued before was received.
    Closed,
}

/// Why [`Subscription::try_recv`] returned no event.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TryRecvError {
    /// Nothing is queued now.
    Empty,
    /// As [`RecvError::Lagged`].
    Lagged(u64),
    /// As [`RecvError::Closed`].
    Closed,
}

/// An in-process subscription to a bus ([`BusHandle::subscribe`](crate::BusHandle::subscribe)):
/// every event published after it was made, in order, none dropped.
///
/// Its queue holds at most [`SUBSCRIBER_BACKLOG_BYTES`](crate::SUBSCRIBER_BACKLOG_BYTES)
/// (each event counting its frame plus [`EVENT_OVERHEAD`]) of what pull-socket senders
/// send: beyond that they wait for this subscriber to take events. The daemon's own
/// in-process fires never wait; they are admitted up to one more such budget, and only past
/// that (a subscriber stuck for that long) are events refused, reported in their place as
/// [`RecvError::Lagged`]. So a subscription must be read or dropped: one that is held but
/// never read holds pull-socket senders back. (It also holds the up to 1,024 events it last
/// took from its queue, which no longer count against the budget.)
pub struct Subscription {
    queue: Arc<Queue>,
    local: VecDeque<Item>,
}

impl Subscription {
    pub(crate) fn new(queue: Arc<Queue>) -> Subscription {
        Subscription {
            queue,
            local: VecDeque::new(),
        }
    }

    /// The next event, waiting for one. Cancel-safe.
    pub async fn recv(&mut self) -> Result<Arc<Event>, RecvError> {
        loop {
            match self.try_recv() {
                Ok(e) => return Ok(e),
                Err(TryRecvError::Lagged(n)) => return Err(RecvError::Lagged(n)),
                Err(TryRecvError::Closed) => return Err(RecvError::Closed),
                Err(TryRecvError::Empty) => self.queue.wait().await,
            }
        }
    }

    /// The next event if one is queued.
    pub fn try_recv(&mut self) -> Result<Arc<Event>, TryRecvError> {
        if self.local.is_empty() {
            let closed = self.queue.take_items(&mut self.local, TAKE_AT_ONCE);
            if self.local.is_empty() {
                return Err(if closed {
                    TryRecvError::Closed
                } else {
                    TryRecvError::Empty
                });
            }
        }
        match self.local.pop_front() {
            Some(Item::Event(e)) => Ok(e),
            Some(Item::Lost(n)) => Err(TryRecvError::Lagged(n)),
            None => Err(TryRecvError::Empty),
        }
    }

    /// Stops taking new events (the bus forgets this subscriber); the events already queued
    /// can still be received, then [`RecvError::Closed`].
    pub fn close(&mut self) {
        self.queue.leave();
    }
}

impl Drop for Subscription {
    fn drop(&mut self) {
        self.queue.leave();
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::event::prepare;
    use halite_proto::value::map;
    use halite_proto::Value;

    fn events(range: std::ops::Range<u64>) -> Vec<Arc<Event>> {
        range
            .map(|i| {
                let data = map([("i", Value::from(i))]);
                Arc::new(prepare("t", data, chrono::Utc::now(), 1 << 20).unwrap())
            })
            .collect()
    }

    fn i_of(e: &Event) -> u64 {
        halite_proto::value::get_i64(e.data(), "i").unwrap() as u64
    }

    #[tokio::test]
    async fn a_raw_queue_over_its_budget_drops_its_oldest_and_says_how_many() {
        let evs = events(0..10);
        let budget = 4 * cost(&evs[0]);
        let q = Queue::raw(budget);
        assert_eq!(q.push(&evs[..3], 0), 0);
        let mut out = Vec::new();
        // One batch of at most one frame's bytes: the first event alone.
        assert_eq!(q.take_frames(&mut out, 1).await, Some(0));
        assert_eq!(out.iter().map(|e| i_of(e)).collect::<Vec<_>>(), [0]);
        assert_eq!(q.push(&evs[3..10], 0), 5);
        out.clear();
        assert_eq!(q.take_frames(&mut out, usize::MAX).await, Some(5));
        assert_eq!(
            out.iter().map(|e| i_of(e)).collect::<Vec<_>>(),
            [6, 7, 8, 9]
        );
        assert_eq!(q.take_unlogged(), 5);
        q.close();
        assert_eq!(q.take_frames(&mut out, usize::MAX).await, None);
    }

    #[tokio::test]
    async fn a_lossless_queue_admits_fires_as_debt_then_refuses_them_in_place() {
        let evs = events(0..10);
        let c = cost(&evs[0]);
        let q = Queue::lossless(2 * c);
        let mut sub = Subscription::new(q.clone());
        // Two fit the budget, two more the debt, the rest are refused.
        for e in &evs[..6] {
            q.push(std::slice::from_ref(e), 0);
        }
        for want in 0..4 {
            assert_eq!(sub.try_recv().map(|e| i_of(&e)), Ok(want));
        }
        assert_eq!(sub.try_recv(), Err(TryRecvError::Lagged(2)));
        assert_eq!(sub.try_recv(), Err(TryRecvError::Empty));
        // Taking them paid the debt and gave the budget back.
        q.push(&evs[6..8], 0);
        assert_eq!(sub.try_recv().map(|e| i_of(&e)), Ok(6));
        assert_eq!(sub.try_recv().map(|e| i_of(&e)), Ok(7));
        sub.close();
        assert_eq!(q.push(&evs[8..], 0), 0);
        assert_eq!(sub.try_recv(), Err(TryRecvError::Closed));
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_reserving_publisher_waits_until_the_subscriber_takes_events() {
        let evs = events(0..4);
        let c = cost(&evs[0]);
        let q = Queue::lossless(2 * c);
        let mut sub = Subscription::new(q.clone());
        assert_eq!(q.reserve(2 * c).await, 2 * c);
        q.push(&evs[..2], 2 * c);
        let publisher = {
            let (q, evs) = (q.clone(), evs.clone());
            tokio::spawn(async move {
                let paid = q.reserve(2 * c).await;
                q.push(&evs[2..], paid)
            })
        };
        tokio::time::sleep(std::time::Duration::from_millis(100)).await;
        assert!(!publisher.is_finished(), "published over a full budget");
        for want in 0..4 {
            assert_eq!(sub.recv().await.map(|e| i_of(&e)), Ok(want));
        }
        assert_eq!(publisher.await.unwrap(), 0);
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_publisher_waiting_for_a_subscriber_that_leaves_goes_on() {
        let evs = events(0..1);
        let c = cost(&evs[0]);
        let q = Queue::lossless(c);
        let sub = Subscription::new(q.clone());
        assert_eq!(q.reserve(c).await, c);
        let waiting = {
            let q = q.clone();
            tokio::spawn(async move { q.reserve(c).await })
        };
        drop(sub);
        assert_eq!(waiting.await.unwrap(), 0);
        assert!(q.has_left());
    }
}
