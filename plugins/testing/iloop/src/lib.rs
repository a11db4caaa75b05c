//! Hostile: spins forever. The deadline must stop it.

use dagr_sdk::{Context, Inputs, Task, TaskError, Value};

pub struct Iloop;

impl Task for Iloop {
    type Params = Value;
    type Output = Value;

    fn run(_: &Context, _: Value, _: &Inputs) -> Result<Value, TaskError> {
        let mut n: u64 = 0;
        loop {
            n = std::hint::black_box(n.wrapping_add(1));
        }
    }
}

dagr_sdk::export!(Iloop);
