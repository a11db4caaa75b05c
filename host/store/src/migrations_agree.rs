//! The SQLite and PostgreSQL migrations are two copies of one schema: they
//! may differ only where the dialects do (an auto-increment key, a byte
//! column). This test holds them to that, so a change made to one folder
//! and forgotten in the other fails CI.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::path::Path;

/// A migration as both dialects should read it: comments dropped,
/// whitespace collapsed, the dialects' spellings made one.
fn normalised(text: &str) -> Vec<String> {
    text.lines()
        .map(|line| line.split("--").next().unwrap_or_default())
        .map(|line| line.split_whitespace().collect::<Vec<_>>().join(" "))
        .filter(|line| !line.is_empty())
        .map(|line| {
            line.replace("INTEGER PRIMARY KEY AUTOINCREMENT", "<serial key>")
                .replace("BIGSERIAL PRIMARY KEY", "<serial key>")
                .replace(" BLOB ", " <bytes> ")
                .replace(" BYTEA ", " <bytes> ")
        })
        .collect()
}

/// Migrations that change how SQLite stores a table (not its columns,
/// keys or indexes): PostgreSQL's file is comments only.
const SQLITE_STORAGE_ONLY: &[&str] = &["0019_clustered_tasks.sql"];

/// Migrations that change how PostgreSQL stores a table (a storage
/// parameter SQLite does not have): SQLite's file is comments only.
const POSTGRES_STORAGE_ONLY: &[&str] = &["0020_tasks_fillfactor.sql"];

#[test]
fn sqlite_and_postgres_migrations_agree() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("migrations");
    let names = |dir: &str| {
        let mut names: Vec<String> = std::fs::read_dir(root.join(dir))
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .collect();
        names.sort();
        names
    };
    let (sqlite, postgres) = (names("sqlite"), names("postgres"));
    assert_eq!(sqlite, postgres, "both backends have the same migrations");
    for name in sqlite {
        let read = |dir: &str| std::fs::read_to_string(root.join(dir).join(&name)).unwrap();
        let (a, b) = (normalised(&read("sqlite")), normalised(&read("postgres")));
        if SQLITE_STORAGE_ONLY.contains(&name.as_str()) {
            assert!(b.is_empty(), "{name}: a change of SQLite's storage alone has nothing for PostgreSQL to do");
            assert!(!a.is_empty(), "{name}: SQLite's side is empty");
            continue;
        }
        if POSTGRES_STORAGE_ONLY.contains(&name.as_str()) {
            assert!(a.is_empty(), "{name}: a change of PostgreSQL's storage alone has nothing for SQLite to do");
            assert!(
                b.iter().all(|l| l.starts_with("ALTER TABLE") && l.contains(" SET (")),
                "{name}: storage only: {b:?}"
            );
            continue;
        }
        for (i, (x, y)) in a.iter().zip(&b).enumerate() {
            assert_eq!(x, y, "{name}, statement line {}: the backends differ beyond their dialects", i + 1);
        }
        assert_eq!(a.len(), b.len(), "{name}: one backend has more lines");
    }
}
