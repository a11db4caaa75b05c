//! The dispatch requests a master has sent and not yet seen answered, by
//! worker. A step's dispatches go out without the next step waiting for
//! them; a later step's cancellation or probe of an attempt on the same
//! worker must still not overtake the request that carries it (a worker
//! ignores a cancellation of an attempt it does not know, and would then
//! run it; a probe would find nothing and call it lost), so each waits
//! for the requests in flight to its worker when it was decided.

use std::collections::HashMap;

use futures::FutureExt;
use futures::future::Shared;
use tokio::sync::oneshot;

/// Answered when its sender is dropped (the request's task ends).
type Done = Shared<oneshot::Receiver<()>>;

/// Requests in flight, by worker.
#[derive(Default)]
pub(crate) struct InFlight {
    by_worker: HashMap<String, Vec<Done>>,
}

/// Held by a request's task until the worker answered.
pub(crate) struct Sending {
    _done: oneshot::Sender<()>,
}

impl InFlight {
    /// A request to `worker` is about to go out; it is in flight until the
    /// returned value is dropped.
    pub(crate) fn send(&mut self, worker: &str) -> Sending {
        let (tx, rx) = oneshot::channel();
        self.by_worker.entry(worker.to_owned()).or_default().push(rx.shared());
        Sending { _done: tx }
    }

    /// Resolves once every request in flight to `worker` now was answered.
    pub(crate) fn answered(&self, worker: &str) -> impl Future<Output = ()> + Send + 'static {
        let waits: Vec<Done> =
            self.by_worker.get(worker).into_iter().flatten().filter(|d| d.peek().is_none()).cloned().collect();
        async move {
            for done in waits {
                let _ = done.await;
            }
        }
    }

    /// Forgets what was answered (the shell calls it before each step's
    /// requests).
    pub(crate) fn tidy(&mut self) {
        self.by_worker.retain(|_, list| {
            list.retain(|done| done.peek().is_none());
            !list.is_empty()
        });
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    #[tokio::test]
    async fn a_later_message_waits_for_the_requests_in_flight_to_its_worker_only() {
        let mut in_flight = InFlight::default();
        let first = in_flight.send("w1");
        let second = in_flight.send("w1");
        let other = in_flight.send("w2");
        let mut after_w1 = Box::pin(in_flight.answered("w1"));
        let quick = Duration::from_millis(20);
        assert!(tokio::time::timeout(quick, &mut after_w1).await.is_err(), "both w1 requests in flight");
        drop(first);
        assert!(tokio::time::timeout(quick, &mut after_w1).await.is_err(), "the second is still in flight");
        drop(second);
        tokio::time::timeout(quick, after_w1).await.expect("every w1 request answered");
        // w2's request does not hold w1's messages, nor a worker never sent to.
        tokio::time::timeout(quick, in_flight.answered("w1")).await.unwrap();
        tokio::time::timeout(quick, in_flight.answered("w3")).await.unwrap();
        let after_w2 = in_flight.answered("w2");
        // A request sent after the message was decided does not hold it.
        let _later = in_flight.send("w2");
        drop(other);
        tokio::time::timeout(quick, after_w2).await.expect("only the requests in flight when it was decided");
        in_flight.tidy();
        assert_eq!(in_flight.by_worker.keys().collect::<Vec<_>>(), ["w2"], "w1 had nothing left in flight");
    }
}
