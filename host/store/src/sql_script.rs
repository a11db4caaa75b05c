//! How statements reach the database: bind values ([`Arg`]), placeholders
//! for multi-row statements, a [`Script`] of statements that travel
//! together, and the hand-opened write transaction ([`Writer`]).

use std::borrow::Cow;

use sqlx::any::{AnyArguments, AnyTypeInfoKind};
use sqlx::pool::PoolConnection;
use sqlx::query::Query;
use sqlx::{Any, AnyPool};
use sqlx_core::any::{AnyArgumentBuffer, AnyValueKind};

use crate::sql::{Backend, MAX_STATEMENT_PARAMS, SMALL_STATEMENT_PARAMS};
use crate::*;

/// A bind value; lets one helper build multi-row statements.
#[derive(Debug, Clone)]
pub(crate) enum Arg {
    I64(i64),
    OptI64(Option<i64>),
    Text(String),
    OptText(Option<String>),
    Bytes(Vec<u8>),
}

/// `sql` with `args` bound in order.
///
/// The values move into sqlx's argument buffer as they are: binding them
/// one by one through `Query::bind` copied every string (sqlx's `Any`
/// encodes a `String` by reference), a tenth of the engine's thread in a
/// fan-out. What `Query::bind` would push is pushed directly: the buffer's
/// field and `AnyValueKind` are public but hidden from sqlx's docs, so a
/// sqlx release that changes them fails to compile here (see
/// `bound_values_are_what_sqlx_binds` for the values' equivalence).
pub(crate) fn bind_all(sql: &str, args: Vec<Arg>) -> Query<'_, Any, AnyArguments<'_>> {
    let values = args.into_iter().map(any_value).collect();
    sqlx::query_with(sql, AnyArguments { values: AnyArgumentBuffer(values) })
}

fn any_value(arg: Arg) -> AnyValueKind<'static> {
    match arg {
        Arg::I64(v) | Arg::OptI64(Some(v)) => AnyValueKind::BigInt(v),
        Arg::OptI64(None) => AnyValueKind::Null(AnyTypeInfoKind::BigInt),
        Arg::Text(v) | Arg::OptText(Some(v)) => AnyValueKind::Text(Cow::Owned(v)),
        Arg::OptText(None) => AnyValueKind::Null(AnyTypeInfoKind::Text),
        Arg::Bytes(v) => AnyValueKind::Blob(Cow::Owned(v)),
    }
}

/// `(?,?),(?,?)` for `rows` rows of `cols` columns. SQLite gets anonymous
/// parameters: it resolves `$N` names by a linear search while parsing,
/// which makes big statements quadratic.
pub(crate) fn placeholders(rows: usize, cols: usize) -> String {
    let mut sql = String::with_capacity(rows * (cols * 2 + 2));
    for r in 0..rows {
        if r > 0 {
            sql.push(',');
        }
        sql.push('(');
        for c in 0..cols {
            if c > 0 {
                sql.push(',');
            }
            sql.push('?');
        }
        sql.push(')');
    }
    sql
}

/// `sql` with its anonymous parameters numbered `$1`, `$2`, … (PostgreSQL
/// knows only those). The statements given to it have no other `?`.
pub(crate) fn numbered(sql: &str) -> String {
    let mut out = String::with_capacity(sql.len() + sql.len() / 2);
    let mut n = 0;
    for c in sql.chars() {
        if c == '?' {
            n += 1;
            out.push('$');
            out.push_str(&n.to_string());
        } else {
            out.push(c);
        }
    }
    out
}

/// `sql` with `?` placeholders as `backend` wants them: numbered for
/// PostgreSQL, as it is for SQLite.
pub(crate) fn numbered_for(backend: Backend, sql: &str) -> String {
    match backend {
        Backend::Sqlite => sql.to_owned(),
        Backend::Postgres => numbered(sql),
    }
}

/// `(?,?),(?,?)` (SQLite) or `($1,$2),($3,$4)` (PostgreSQL).
pub(crate) fn values(backend: Backend, rows: usize, cols: usize) -> String {
    match backend {
        Backend::Sqlite => placeholders(rows, cols),
        Backend::Postgres => numbered(&placeholders(rows, cols)),
    }
}

/// Rows per multi-row statement: powers of two, so that a handful of
/// statement texts cover every batch size (and stay prepared).
pub(crate) fn chunk_rows(remaining: usize, cols: usize) -> usize {
    chunk_of(remaining, (MAX_STATEMENT_PARAMS / cols).clamp(1, 512))
}

/// The largest power of two at most `remaining` and `most` (both ≥ 1):
/// the next chunk of a list cut into power-of-two chunks.
pub(crate) fn chunk_of(remaining: usize, most: usize) -> usize {
    let cap = remaining.min(most).max(1);
    1 << (usize::BITS - 1 - cap.leading_zeros())
}

/// Statements that run one after another on one connection (in its
/// transaction), written with anonymous `?` parameters.
///
/// On SQLite they go as one multi-statement query: sqlx runs SQLite on a
/// thread of its own, and every query is a round trip to that thread
/// (two thread wake-ups, ~100 µs each on a small VM), which made a
/// handful of statements most of an engine step. On PostgreSQL, whose
/// extended protocol takes one statement at a time, they go one by one.
pub(crate) struct Script {
    backend: Backend,
    statements: Vec<(String, Vec<Arg>)>,
}

impl Script {
    pub(crate) fn new(backend: Backend) -> Script {
        Script { backend, statements: Vec::new() }
    }

    pub(crate) fn push(&mut self, sql: impl Into<String>, args: Vec<Arg>) {
        self.statements.push((sql.into(), args));
    }

    /// `head VALUES (...) tail` over `rows`, in chunks.
    pub(crate) fn rows(&mut self, head: &str, tail: &str, cols: usize, rows: Vec<Vec<Arg>>) {
        let mut rows = rows.into_iter().peekable();
        let mut remaining = rows.len();
        while rows.peek().is_some() {
            let n = chunk_rows(remaining, cols);
            remaining -= n;
            // Sized up front: collecting a flattened iterator grows the
            // vector a step at a time (its length is not known).
            let mut args = Vec::with_capacity(n * cols);
            rows.by_ref().take(n).for_each(|row| args.extend(row));
            let sql = format!("{head} VALUES {} {tail}", placeholders(n, cols));
            self.push(sql, args);
        }
    }

    /// `UPDATE table SET column = CASE key WHEN … THEN … END, … WHERE key IN
    /// (…)` over `rows` (each a key and a value per entry of `sets`), in
    /// statements of a power of two of rows (at most
    /// [`KEYED_UPDATE_ROWS`]). Each of `sets` assigns one column, `{}`
    /// standing for its `CASE` (e.g. `started_at = COALESCE({},
    /// started_at)`). One statement for many rows, whose texts recur, planned as
    /// the one-row update is (by the key's index), where PostgreSQL may
    /// plan a join to a `VALUES` list as a hash join over the whole table.
    /// A key must appear once in `rows`.
    pub(crate) fn keyed_updates(&mut self, table: &str, key: &str, sets: &[&str], rows: Vec<(Arg, Vec<Arg>)>) {
        let mut rows = rows.into_iter();
        let mut remaining = rows.len();
        while remaining > 0 {
            let n = chunk_of(remaining, KEYED_UPDATE_ROWS);
            remaining -= n;
            let chunk: Vec<(Arg, Vec<Arg>)> = rows.by_ref().take(n).collect();
            let case = format!("CASE {key} {} END", vec!["WHEN ? THEN ?"; n].join(" "));
            let set: Vec<String> = sets.iter().map(|s| s.replace("{}", &case)).collect();
            let sql = format!("UPDATE {table} SET {} WHERE {key} IN ({})", set.join(", "), vec!["?"; n].join(","));
            let mut args = Vec::with_capacity(n * (2 * sets.len() + 1));
            for column in 0..sets.len() {
                for (k, values) in &chunk {
                    args.push(k.clone());
                    args.push(values[column].clone());
                }
            }
            args.extend(chunk.into_iter().map(|(k, _)| k));
            self.push(sql, args);
        }
    }

    /// `DELETE FROM table WHERE key IN (…)` over `keys`, in statements of a
    /// power of two of them (at most [`KEYED_UPDATE_ROWS`] times 8).
    pub(crate) fn keyed_deletes(&mut self, table: &str, key: &str, keys: Vec<Arg>) {
        let mut keys = keys.into_iter();
        let mut remaining = keys.len();
        while remaining > 0 {
            let n = chunk_of(remaining, KEYED_UPDATE_ROWS * 8);
            remaining -= n;
            let sql = format!("DELETE FROM {table} WHERE {key} IN ({})", vec!["?"; n].join(","));
            self.push(sql, keys.by_ref().take(n).collect());
        }
    }

    /// Runs the statements in a transaction of their own on a connection
    /// of `pool` (on SQLite, BEGIN and COMMIT travel with them: one round
    /// trip); nothing is left behind if one fails.
    pub(crate) async fn commit(mut self, pool: &AnyPool) -> Result<()> {
        let begin = match self.backend {
            Backend::Sqlite => "BEGIN IMMEDIATE",
            Backend::Postgres => "BEGIN",
        };
        self.statements.insert(0, (begin.to_owned(), Vec::new()));
        self.push("COMMIT", Vec::new());
        let mut writer = Writer::acquire(pool).await?;
        self.run(writer.get()).await?;
        writer.release();
        Ok(())
    }

    pub(crate) async fn run(self, conn: &mut sqlx::AnyConnection) -> Result<()> {
        match self.backend {
            Backend::Sqlite => {
                // Small statements travel together; sqlx binds anonymous
                // parameters across the statements of one query in order,
                // so their arguments simply follow each other. A big one
                // (a chunk of a multi-row insert) goes alone: its text
                // stays the same from batch to batch and so stays
                // prepared, where a text joined from varying neighbours
                // would be parsed again every time.
                let mut sql = String::new();
                let mut args = Vec::new();
                for (text, mut more) in self.statements {
                    if more.len() > SMALL_STATEMENT_PARAMS {
                        if !sql.is_empty() {
                            bind_all(&sql, std::mem::take(&mut args)).execute(&mut *conn).await?;
                            sql.clear();
                        }
                        bind_all(&text, more).execute(&mut *conn).await?;
                        continue;
                    }
                    sql.push_str(&text);
                    sql.push_str(";\n");
                    args.append(&mut more);
                }
                if !sql.is_empty() {
                    bind_all(&sql, args).execute(&mut *conn).await?;
                }
            }
            Backend::Postgres => {
                for (text, args) in self.statements {
                    bind_all(&numbered(&text), args).execute(&mut *conn).await?;
                }
            }
        }
        Ok(())
    }
}

/// Runs `head VALUES (...) tail` over `rows`, in chunks.
pub(crate) async fn insert_rows(
    conn: &mut sqlx::AnyConnection,
    backend: Backend,
    head: &str,
    tail: &str,
    cols: usize,
    rows: Vec<Vec<Arg>>,
) -> Result<()> {
    let mut script = Script::new(backend);
    script.rows(head, tail, cols, rows);
    script.run(conn).await
}

/// The write connection of a transaction that is opened and committed by
/// hand: unless [`Writer::release`]d after its COMMIT, it is closed rather
/// than returned to the pool, and closing rolls back whatever it had begun.
pub(crate) struct Writer {
    conn: PoolConnection<Any>,
    committed: bool,
}

impl Writer {
    pub(crate) async fn acquire(pool: &AnyPool) -> Result<Writer> {
        Ok(Writer { conn: pool.acquire().await?, committed: false })
    }

    pub(crate) fn get(&mut self) -> &mut sqlx::AnyConnection {
        &mut self.conn
    }

    /// The transaction was committed: the connection goes back to the pool.
    pub(crate) fn release(mut self) {
        self.committed = true;
    }
}

impl Drop for Writer {
    fn drop(&mut self) {
        if !self.committed {
            self.conn.close_on_drop();
        }
    }
}

/// `$start,$start+1,…` for an IN list.
pub(crate) fn in_list(start: usize, n: usize) -> String {
    (start..start + n).map(|i| format!("${i}")).collect::<Vec<_>>().join(",")
}

/// Most rows of one statement of [`Script::keyed_updates`].
pub(crate) const KEYED_UPDATE_ROWS: usize = 64;

/// Most values of an IN list that [`padded_in_list`] fills (a power of two).
pub(crate) const PADDED_IN_LIST: usize = 1 << 13;

/// An IN list for `values` (at most [`PADDED_IN_LIST`]), its parameters
/// from `$start`, filled to a power of two by repeating the last value:
/// a handful of statement texts then serve every count of values and stay
/// prepared (SQLite parses again a text it has not kept, and sqlx keeps
/// 100 per connection; a burst of releases read and claimed runs in lists
/// of every length). `IN` does not mind the repeats.
pub(crate) fn padded_in_list(start: usize, values: impl IntoIterator<Item = Arg>, args: &mut Vec<Arg>) -> String {
    let first = args.len();
    args.extend(values);
    let n = args.len() - first;
    if let Some(last) = args.last().cloned().filter(|_| n > 0) {
        args.resize(first + n.next_power_of_two(), last);
    }
    in_list(start, args.len() - first)
}

#[cfg(test)]
mod tests {
    use sqlx::Execute;

    use super::*;

    fn values<'q>(mut query: Query<'q, Any, AnyArguments<'q>>) -> String {
        let arguments = query.take_arguments().expect("no bind error").expect("arguments");
        format!("{:?}", arguments.values.0)
    }

    #[test]
    fn bound_values_are_what_sqlx_binds() {
        let args = vec![
            Arg::I64(-7),
            Arg::OptI64(Some(3)),
            Arg::OptI64(None),
            Arg::Text("a \"text\" ✓".into()),
            Arg::OptText(Some(String::new())),
            Arg::OptText(None),
            Arg::Bytes(vec![0, 1, 255]),
        ];
        let by_sqlx = sqlx::query("")
            .bind(-7i64)
            .bind(Some(3i64))
            .bind(None::<i64>)
            .bind("a \"text\" ✓".to_owned())
            .bind(Some(String::new()))
            .bind(None::<String>)
            .bind(vec![0u8, 1, 255]);
        assert_eq!(values(bind_all("", args)), values(by_sqlx));
    }

    #[test]
    fn an_in_list_is_filled_to_a_power_of_two_with_its_last_value() {
        let text = |v: &[Arg]| v.iter().map(|a| format!("{a:?}")).collect::<Vec<_>>().join(" ");
        let mut args = vec![Arg::Text("owner".into())];
        let list = padded_in_list(2, (1..=5).map(Arg::I64), &mut args);
        assert_eq!(list, "$2,$3,$4,$5,$6,$7,$8,$9");
        assert_eq!(text(&args), "Text(\"owner\") I64(1) I64(2) I64(3) I64(4) I64(5) I64(5) I64(5) I64(5)");
        let mut one = Vec::new();
        assert_eq!(padded_in_list(1, [Arg::I64(9)], &mut one), "$1");
        assert_eq!(text(&one), "I64(9)");
        let mut four = Vec::new();
        assert_eq!(padded_in_list(1, (0..4).map(Arg::I64), &mut four), "$1,$2,$3,$4");
        let mut none = Vec::new();
        assert_eq!(padded_in_list(1, std::iter::empty(), &mut none), "");
    }

    #[test]
    fn keyed_updates_pair_each_key_with_its_values_in_power_of_two_statements() {
        let mut script = Script::new(Backend::Postgres);
        let rows = (1..=3).map(|k| (Arg::I64(k), vec![Arg::Text(format!("s{k}")), Arg::I64(k * 10)])).collect();
        script.keyed_updates("t", "id", &["state = {}", "n = COALESCE(n, {})"], rows);
        let text = |v: &[Arg]| v.iter().map(|a| format!("{a:?}")).collect::<Vec<_>>().join(" ");
        let [(first, first_args), (second, second_args)] = &script.statements[..] else {
            panic!("two statements: {:?}", script.statements)
        };
        assert_eq!(
            first,
            "UPDATE t SET state = CASE id WHEN ? THEN ? WHEN ? THEN ? END, \
             n = COALESCE(n, CASE id WHEN ? THEN ? WHEN ? THEN ? END) WHERE id IN (?,?)"
        );
        assert_eq!(
            text(first_args),
            "I64(1) Text(\"s1\") I64(2) Text(\"s2\") I64(1) I64(10) I64(2) I64(20) I64(1) I64(2)"
        );
        assert_eq!(
            second,
            "UPDATE t SET state = CASE id WHEN ? THEN ? END, n = COALESCE(n, CASE id WHEN ? THEN ? END) WHERE id IN (?)"
        );
        assert_eq!(text(second_args), "I64(3) Text(\"s3\") I64(3) I64(30) I64(3)");

        let mut deletes = Script::new(Backend::Postgres);
        deletes.keyed_deletes("w", "run_id", (0..5).map(Arg::I64).collect());
        let texts: Vec<&str> = deletes.statements.iter().map(|(sql, _)| sql.as_str()).collect();
        assert_eq!(texts, ["DELETE FROM w WHERE run_id IN (?,?,?,?)", "DELETE FROM w WHERE run_id IN (?)"]);
    }
}
