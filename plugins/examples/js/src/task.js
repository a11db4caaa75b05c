// @ts-check
// csv-summary-js: summarises a numeric column of a small CSV given in the
// params, overall and per group. The same task as ../rust and ../python,
// with the same params, output and errors.
import * as dagr from '@dagr/sdk';
import pkg from '../package.json' with { type: 'json' };

/** @typedef {{ csv: string, column: string, group_by?: string, delimiter?: string }} Params */

export default dagr.defineTask({
  name: pkg.name,
  version: pkg.version,
  description: pkg.description,
  paramsSchema: {
    type: 'object',
    required: ['csv', 'column'],
    additionalProperties: false,
    properties: {
      csv: { type: 'string' },
      column: { type: 'string' },
      group_by: { type: 'string' },
      delimiter: { type: 'string', minLength: 1, maxLength: 1 },
    },
  },
  /** @param {Params} params */
  run(ctx, params) {
    const delimiter = params.delimiter ?? ',';
    const lines = params.csv
      .split(/\r?\n/)
      .map((line, i) => [i + 1, line])
      .filter(([, line]) => String(line).trim() !== '');
    if (lines.length === 0) throw new dagr.Fatal('the CSV is empty');
    const columns = String(lines[0][1]).split(delimiter).map((c) => c.trim());
    const find = (/** @type {string} */ name) => {
      const at = columns.indexOf(name);
      if (at < 0) throw new dagr.Fatal(`no column \`${name}\` (the columns are ${columns.join(', ')})`);
      return at;
    };
    const valueAt = find(params.column);
    const groupAt = params.group_by === undefined ? undefined : find(params.group_by);
    let rows = 0;
    let sum = 0;
    let min = null;
    let max = null;
    /** @type {Record<string, { count: number, sum: number }>} */
    const groups = {};
    for (const [number, line] of lines.slice(1)) {
      const fields = String(line).split(delimiter).map((f) => f.trim());
      if (fields.length !== columns.length) {
        throw new dagr.Fatal(`line ${number}: ${fields.length} fields, but the header has ${columns.length}`);
      }
      const text = fields[valueAt];
      const value = text === '' ? NaN : Number(text);
      if (!Number.isFinite(value)) throw new dagr.Fatal(`line ${number}: \`${params.column}\` is not a number: "${text}"`);
      rows += 1;
      sum += value;
      min = min === null ? value : Math.min(min, value);
      max = max === null ? value : Math.max(max, value);
      if (groupAt !== undefined) {
        const group = (groups[fields[groupAt]] ??= { count: 0, sum: 0 });
        group.count += 1;
        group.sum += value;
      }
    }
    dagr.info(`summarised ${rows} rows of \`${params.column}\``);
    const sorted = Object.fromEntries(Object.entries(groups).sort(([a], [b]) => (a < b ? -1 : a > b ? 1 : 0)));
    return { rows, columns, column: params.column, sum, min, max, mean: rows ? sum / rows : null, groups: sorted };
  },
});
