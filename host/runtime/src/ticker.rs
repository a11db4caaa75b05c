//! The epoch thread's clock: it ticks only while a guest's store lives.

use std::sync::{Arc, Mutex};

/// Drives the epoch thread: it ticks while any store exists (an attempt, or
/// a `describe` call while loading) and for a moment after the last one
/// ends, then sleeps until the next store, so that an idle process does not
/// wake up a thousand times a second (and a busy one does not wake the
/// thread for every attempt).
#[derive(Default)]
pub(crate) struct Ticker {
    state: Mutex<TickerState>,
    wake: std::sync::Condvar,
}

#[derive(Default)]
pub(crate) struct TickerState {
    /// Stores alive.
    stores: usize,
    /// The epoch thread waits for a store.
    parked: bool,
    /// The runtime is gone.
    stopped: bool,
}

/// Ticks without any store before the epoch thread sleeps.
pub(crate) const IDLE_TICKS: u32 = 100;

impl Ticker {
    /// Called by the epoch thread before each tick: blocks once no store
    /// has needed ticks for a while; false once the runtime is gone.
    pub(crate) fn wait_for_work(&self, idle_ticks: &mut u32) -> bool {
        let mut state = self.state.lock().unwrap_or_else(|e| e.into_inner());
        if state.stores > 0 {
            *idle_ticks = 0;
        } else {
            *idle_ticks += 1;
        }
        while *idle_ticks > IDLE_TICKS && state.stores == 0 && !state.stopped {
            state.parked = true;
            state = self.wake.wait(state).unwrap_or_else(|e| e.into_inner());
        }
        state.parked = false;
        !state.stopped
    }

    pub(crate) fn stop(&self) {
        self.state.lock().unwrap_or_else(|e| e.into_inner()).stopped = true;
        self.wake.notify_all();
    }
}

/// Keeps the epoch thread ticking while it lives (one per store).
pub(crate) struct Ticking(Arc<Ticker>);

impl Ticking {
    pub(crate) fn new(ticker: &Arc<Ticker>) -> Ticking {
        let mut state = ticker.state.lock().unwrap_or_else(|e| e.into_inner());
        state.stores += 1;
        if state.parked {
            ticker.wake.notify_all();
        }
        drop(state);
        Ticking(ticker.clone())
    }
}

impl Drop for Ticking {
    fn drop(&mut self) {
        let mut state = self.0.state.lock().unwrap_or_else(|e| e.into_inner());
        state.stores = state.stores.saturating_sub(1);
    }
}
