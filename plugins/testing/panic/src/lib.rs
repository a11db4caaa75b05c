//! Hostile: panics, or traps in another way. Params: `{"mode": "panic" |
//! "unreachable" | "oob"}`.

use dagr_sdk::{Context, Inputs, Task, TaskError, Value};

pub struct Panic;

impl Task for Panic {
    type Params = Value;
    type Output = Value;

    fn run(_: &Context, params: Value, _: &Inputs) -> Result<Value, TaskError> {
        match params["mode"].as_str().unwrap_or("panic") {
            "unreachable" => std::process::abort(),
            "oob" => {
                let v: Vec<u8> = Vec::new();
                let i = std::hint::black_box(10);
                Ok(Value::from(v[i]))
            }
            _ => panic!("the plugin panicked on purpose"),
        }
    }
}

dagr_sdk::export!(Panic);
