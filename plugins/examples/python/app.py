"""csv-summary-py: summarises a numeric column of a small CSV given in the
params, overall and per group. The same task as ../rust and ../js, with the
same params, output and errors."""

import math
from dataclasses import dataclass, field
from typing import Optional

import dagr_sdk as dagr


@dataclass
class Params:
    csv: str
    column: str
    group_by: Optional[str] = None
    delimiter: str = ","


class CsvSummary(dagr.Task):
    name = "csv-summary-py"
    version = "0.1.0"
    description = "Summarises a numeric column of a small CSV, overall and per group (the Python one of plugins/examples)"
    Params = Params
    # The dataclass gives the shape; the schema adds what types cannot say.
    params_schema = {
        **dagr.schema_of(Params),
        "properties": {
            "csv": {"type": "string"},
            "column": {"type": "string"},
            "group_by": {"type": "string"},
            "delimiter": {"type": "string", "minLength": 1, "maxLength": 1},
        },
    }

    def run(self, ctx, params: Params, inputs):
        lines = [(i + 1, line) for i, line in enumerate(params.csv.splitlines()) if line.strip()]
        if not lines:
            raise dagr.Fatal("the CSV is empty")
        columns = [c.strip() for c in lines[0][1].split(params.delimiter)]

        def find(name):
            if name not in columns:
                raise dagr.Fatal(f"no column `{name}` (the columns are {', '.join(columns)})")
            return columns.index(name)

        value_at = find(params.column)
        group_at = None if params.group_by is None else find(params.group_by)
        rows, total, low, high, groups = 0, 0.0, None, None, {}
        for number, line in lines[1:]:
            fields = [f.strip() for f in line.split(params.delimiter)]
            if len(fields) != len(columns):
                raise dagr.Fatal(f"line {number}: {len(fields)} fields, but the header has {len(columns)}")
            text = fields[value_at]
            try:
                value = float(text)
            except ValueError:
                value = math.nan
            if not math.isfinite(value):
                raise dagr.Fatal(f'line {number}: `{params.column}` is not a number: "{text}"')
            rows += 1
            total += value
            low = value if low is None else min(low, value)
            high = value if high is None else max(high, value)
            if group_at is not None:
                group = groups.setdefault(fields[group_at], {"count": 0, "sum": 0.0})
                group["count"] += 1
                group["sum"] += value
        dagr.info(f"summarised {rows} rows of `{params.column}`")
        return {
            "rows": rows,
            "columns": columns,
            "column": params.column,
            "sum": total,
            "min": low,
            "max": high,
            "mean": total / rows if rows else None,
            "groups": dict(sorted(groups.items())),
        }


Task = dagr.export(CsvSummary)
