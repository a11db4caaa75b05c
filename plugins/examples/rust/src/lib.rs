//! `csv-summary-rs`: summarises a numeric column of a small CSV given in
//! the params, overall and per group. The same task as `../python` and
//! `../js`, with the same params, output and errors.

use std::collections::BTreeMap;

use dagr_sdk::{Context, Inputs, Task, TaskError, Value, info, json};
use serde::{Deserialize, Serialize};

pub struct CsvSummary;

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Params {
    csv: String,
    column: String,
    #[serde(default)]
    group_by: Option<String>,
    #[serde(default = "comma")]
    delimiter: String,
}

fn comma() -> String {
    ",".into()
}

#[derive(Serialize, Default)]
pub struct Group {
    count: u64,
    sum: f64,
}

#[derive(Serialize)]
pub struct Summary {
    rows: u64,
    columns: Vec<String>,
    column: String,
    sum: f64,
    min: Option<f64>,
    max: Option<f64>,
    mean: Option<f64>,
    groups: BTreeMap<String, Group>,
}

impl Task for CsvSummary {
    type Params = Params;
    type Output = Summary;

    fn params_schema() -> Option<Value> {
        Some(json!({
            "type": "object",
            "required": ["csv", "column"],
            "additionalProperties": false,
            "properties": {
                "csv": {"type": "string"},
                "column": {"type": "string"},
                "group_by": {"type": "string"},
                "delimiter": {"type": "string", "minLength": 1, "maxLength": 1}
            }
        }))
    }

    fn run(_ctx: &Context, params: Params, _inputs: &Inputs) -> Result<Summary, TaskError> {
        let delimiter = params.delimiter.as_str();
        let mut lines = params.csv.lines().enumerate().filter(|(_, l)| !l.trim().is_empty());
        let (_, header) = lines.next().ok_or_else(|| TaskError::fatal("the CSV is empty"))?;
        let columns: Vec<String> = header.split(delimiter).map(|c| c.trim().to_owned()).collect();
        let find = |name: &str| {
            columns
                .iter()
                .position(|c| c == name)
                .ok_or_else(|| TaskError::fatal(format!("no column `{name}` (the columns are {})", columns.join(", "))))
        };
        let value_at = find(&params.column)?;
        let group_at = params.group_by.as_deref().map(find).transpose()?;

        let mut summary = Summary {
            rows: 0,
            columns: columns.clone(),
            column: params.column.clone(),
            sum: 0.0,
            min: None,
            max: None,
            mean: None,
            groups: BTreeMap::new(),
        };
        for (index, line) in lines {
            let fields: Vec<&str> = line.split(delimiter).map(str::trim).collect();
            if fields.len() != columns.len() {
                return Err(TaskError::fatal(format!(
                    "line {}: {} fields, but the header has {}",
                    index + 1,
                    fields.len(),
                    columns.len()
                )));
            }
            let text = fields[value_at];
            let value: f64 = text.parse().ok().filter(|v: &f64| v.is_finite()).ok_or_else(|| {
                TaskError::fatal(format!("line {}: `{}` is not a number: {text:?}", index + 1, params.column))
            })?;
            summary.rows += 1;
            summary.sum += value;
            summary.min = Some(summary.min.map_or(value, |m| m.min(value)));
            summary.max = Some(summary.max.map_or(value, |m| m.max(value)));
            if let Some(at) = group_at {
                let group = summary.groups.entry(fields[at].to_owned()).or_default();
                group.count += 1;
                group.sum += value;
            }
        }
        if summary.rows > 0 {
            summary.mean = Some(summary.sum / summary.rows as f64);
        }
        info!("summarised {} rows of `{}`", summary.rows, params.column);
        Ok(summary)
    }
}

dagr_sdk::export!(CsvSummary);

#[cfg(test)]
mod tests {
    use dagr_sdk::testing::TestRun;

    use super::*;

    #[test]
    fn summarises_by_group() {
        let csv = "city,amount\nBerlin,10\nParis,5\n\nBerlin,2.5\n";
        let outcome = TestRun::new().run::<CsvSummary>(json!({"csv": csv, "column": "amount", "group_by": "city"}));
        let out = outcome.output().unwrap();
        assert_eq!(out["rows"], 3);
        assert_eq!(out["sum"], 17.5);
        assert_eq!(out["groups"]["Berlin"], json!({"count": 2, "sum": 12.5}));
        assert!(outcome.logged("summarised 3 rows"));
    }

    #[test]
    fn names_the_bad_line() {
        let outcome = TestRun::new().run::<CsvSummary>(json!({"csv": "a,b\n1,2\n3,x", "column": "b"}));
        assert_eq!(outcome.error().unwrap().message(), "line 3: `b` is not a number: \"x\"");
    }
}
