//! Hostile: tries to read files outside its scratch directory.
//!
//! Params: `{"paths": ["../../etc/passwd", "/etc/passwd", "link", ...]}`.
//! Output: for each path, whether reading it worked, and what it read or
//! the error. It also writes and reads back a file in the scratch directory,
//! to show that the directory itself works.

use dagr_sdk::{Context, Inputs, Task, TaskError, json};
use serde::Deserialize;
use serde_json::Value;

pub struct Escape;

#[derive(Deserialize)]
pub struct Params {
    paths: Vec<String>,
}

impl Task for Escape {
    type Params = Params;
    type Output = Value;

    fn run(_: &Context, params: Params, _: &Inputs) -> Result<Value, TaskError> {
        std::fs::write("own-file.txt", b"mine").map_err(|e| TaskError::fatal(format!("cannot write scratch: {e}")))?;
        let own = std::fs::read_to_string("/scratch/own-file.txt")
            .map_err(|e| TaskError::fatal(format!("cannot read scratch: {e}")))?;
        let attempts: Vec<Value> = params
            .paths
            .iter()
            .map(|path| match std::fs::read_to_string(path) {
                Ok(text) => json!({"path": path, "read": true, "content": text}),
                Err(e) => json!({"path": path, "read": false, "error": e.to_string()}),
            })
            .collect();
        let listing: Vec<String> = match std::fs::read_dir("/") {
            Ok(dir) => dir.filter_map(|e| e.ok()).map(|e| e.file_name().to_string_lossy().into_owned()).collect(),
            Err(e) => vec![format!("error: {e}")],
        };
        Ok(json!({"own": own, "attempts": attempts, "root_listing": listing}))
    }
}

dagr_sdk::export!(Escape);
