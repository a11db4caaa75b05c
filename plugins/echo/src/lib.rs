//! `echo`: returns its params and inputs unchanged.

use dagr_sdk::{Context, Inputs, Task, TaskError, Value, json};

pub struct Echo;

impl Task for Echo {
    type Params = Value;
    type Output = Value;

    fn run(_ctx: &Context, params: Value, inputs: &Inputs) -> Result<Value, TaskError> {
        Ok(json!({ "params": params, "inputs": inputs.as_map() }))
    }
}

dagr_sdk::export!(Echo);

#[cfg(test)]
mod tests {
    use super::*;
    use dagr_sdk::testing::TestRun;

    #[test]
    fn echoes_params_and_inputs() {
        let outcome = TestRun::new().input("up", json!(1)).run::<Echo>(json!({"a": [1, 2]}));
        assert_eq!(outcome.output(), Some(&json!({"params": {"a": [1, 2]}, "inputs": {"up": 1}})));
    }
}
