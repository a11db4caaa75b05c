//! Hostile: allocates (and touches) memory until something stops it.

use dagr_sdk::{Context, Inputs, Task, TaskError, Value, json};

pub struct Membomb;

impl Task for Membomb {
    type Params = Value;
    type Output = Value;

    fn run(_: &Context, _: Value, _: &Inputs) -> Result<Value, TaskError> {
        let mut hoard: Vec<Vec<u8>> = Vec::new();
        loop {
            hoard.push(vec![0xA5; 1 << 20]);
            if hoard.len() > 1 << 16 {
                return Ok(json!({"allocated_mib": hoard.len()}));
            }
        }
    }
}

dagr_sdk::export!(Membomb);
