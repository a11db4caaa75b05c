//! Hostile: recurses without end, to overflow the stack.

use dagr_sdk::{Context, Inputs, Task, TaskError, Value, json};

pub struct Recurse;

#[allow(unconditional_recursion)]
fn deeper(n: u64) -> u64 {
    std::hint::black_box(deeper(std::hint::black_box(n + 1))) + 1
}

impl Task for Recurse {
    type Params = Value;
    type Output = Value;

    fn run(_: &Context, _: Value, _: &Inputs) -> Result<Value, TaskError> {
        Ok(json!({"depth": deeper(0)}))
    }
}

dagr_sdk::export!(Recurse);
