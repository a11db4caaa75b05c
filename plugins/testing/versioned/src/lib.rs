//! Test component: returns its own version (and its params), so that a test
//! can tell which version of a plugin ran. The registry tests make a second
//! version by patching the version string in the component's bytes.

use dagr_sdk::{Context, Inputs, Task, TaskError, Value, json};

pub struct Versioned;

impl Task for Versioned {
    type Params = Value;
    type Output = Value;

    fn run(_: &Context, params: Value, _: &Inputs) -> Result<Value, TaskError> {
        Ok(json!({"version": env!("CARGO_PKG_VERSION"), "params": params}))
    }
}

dagr_sdk::export!(Versioned);
