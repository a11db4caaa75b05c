//! The engine's hash maps: keyed at random (as std's are) in production,
//! and with fixed keys for maps made on a thread while a simulation runs
//! there ([`fixed`]), so that the order in which the engine walks its maps
//! — and so every decision it makes — is the same each time a seed is
//! replayed.

use std::cell::Cell;
use std::collections::hash_map::{DefaultHasher, RandomState};
use std::hash::BuildHasher;

thread_local! {
    static FIXED: Cell<bool> = const { Cell::new(false) };
}

/// Random keys, or fixed ones under [`fixed`].
#[derive(Clone, Debug)]
pub struct EngineHasher(Option<RandomState>);

impl Default for EngineHasher {
    fn default() -> Self {
        EngineHasher((!FIXED.with(Cell::get)).then(RandomState::new))
    }
}

impl BuildHasher for EngineHasher {
    type Hasher = DefaultHasher;

    fn build_hasher(&self) -> DefaultHasher {
        match &self.0 {
            Some(random) => random.build_hasher(),
            None => DefaultHasher::new(),
        }
    }
}

pub type Map<K, V> = std::collections::HashMap<K, V, EngineHasher>;
pub type Set<T> = std::collections::HashSet<T, EngineHasher>;

/// Runs `f` with fixed keys for every engine map made on this thread.
pub fn fixed<T>(f: impl FnOnce() -> T) -> T {
    struct Reset(bool);
    impl Drop for Reset {
        fn drop(&mut self) {
            FIXED.with(|c| c.set(self.0));
        }
    }
    let _reset = Reset(FIXED.with(|c| c.replace(true)));
    f()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fixed_keys_walk_a_map_in_one_order() {
        let order = || {
            fixed(|| {
                let mut m: Map<String, u32> = Map::default();
                for i in 0..50 {
                    m.insert(format!("run-{i}"), i);
                }
                m.into_keys().collect::<Vec<_>>()
            })
        };
        assert_eq!(order(), order());
        assert!(EngineHasher::default().0.is_some(), "random keys outside a simulation");
    }
}
