//! The schema's migrations, embedded in the binary (by `build.rs`), and the
//! [`MigrationSource`] that hands them to sqlx's migrator.
//!
//! sqlx's `migrate!` macro does the same at compile time, but it needs sqlx's
//! macros, which build sqlx's drivers a second time for the compiler (about
//! two minutes of a cold build). The migrations it makes are the same:
//! version and description from the file name, the checksum (SHA-384 of the
//! text) from [`Migration::new`], so databases migrated by either agree (a
//! unit test compares them with sqlx's own reading of the folders).

use std::borrow::Cow;
use std::pin::Pin;

use sqlx::error::BoxDynError;
use sqlx::migrate::{Migration, MigrationSource, MigrationType, Migrator};

mod embedded {
    include!(concat!(env!("OUT_DIR"), "/migrations.rs"));
}

/// One dialect's migrations: (file name, text), in file-name order.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Embedded(&'static [(&'static str, &'static str)]);

pub(crate) const SQLITE: Embedded = Embedded(embedded::SQLITE);
pub(crate) const POSTGRES: Embedded = Embedded(embedded::POSTGRES);

impl Embedded {
    /// The migrations as sqlx reads a folder of them: `<VERSION>_<DESCRIPTION>.sql`,
    /// sorted by version.
    fn migrations(self) -> Result<Vec<Migration>, String> {
        let mut migrations = Vec::with_capacity(self.0.len());
        for &(name, sql) in self.0 {
            let Some((version, rest)) = name.split_once('_') else {
                return Err(format!("migration {name}: expected <VERSION>_<DESCRIPTION>.sql"));
            };
            let version: i64 =
                version.parse().map_err(|_| format!("migration {name}: `{version}` is not an integer version"))?;
            let kind = MigrationType::from_filename(rest);
            let description = rest.trim_end_matches(kind.suffix()).replace('_', " ");
            let no_tx = sql.starts_with("-- no-transaction");
            migrations.push(Migration::new(version, Cow::Owned(description), kind, Cow::Borrowed(sql), no_tx));
        }
        migrations.sort_by_key(|m| m.version);
        Ok(migrations)
    }

    /// A migrator of these migrations.
    pub(crate) async fn migrator(self) -> Result<Migrator, sqlx::migrate::MigrateError> {
        Migrator::new(self).await
    }
}

impl MigrationSource<'static> for Embedded {
    fn resolve(self) -> Pin<Box<dyn Future<Output = Result<Vec<Migration>, BoxDynError>> + Send + 'static>> {
        Box::pin(async move { self.migrations().map_err(BoxDynError::from) })
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    /// The embedded migrations are what sqlx reads from the folders (and
    /// what its `migrate!` macro embedded before): same versions,
    /// descriptions, kinds, checksums and texts.
    #[tokio::test]
    async fn embedded_migrations_are_sqlx_s_reading_of_the_folders() {
        let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("migrations");
        for (dialect, embedded) in [("sqlite", SQLITE), ("postgres", POSTGRES)] {
            let ours = embedded.migrator().await.unwrap();
            let theirs = Migrator::new(root.join(dialect)).await.unwrap();
            let view = |m: &Migrator| {
                m.iter()
                    .map(|m| {
                        (
                            m.version,
                            m.description.to_string(),
                            m.migration_type,
                            m.checksum.to_vec(),
                            m.no_tx,
                            m.sql.to_string(),
                        )
                    })
                    .collect::<Vec<_>>()
            };
            assert!(!view(&theirs).is_empty(), "{dialect}: no migrations found");
            assert_eq!(view(&ours), view(&theirs), "{dialect}");
        }
    }
}
