//! Which events a subscriber wants by kind: a list of kinds, each exact or
//! a prefix ending in `*` (`run.*`); none means every kind.

/// The most kinds a filter may name.
pub const MAX_KINDS: usize = 32;
/// The longest kind a filter may name.
pub const MAX_KIND_BYTES: usize = 64;

#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct KindFilter(Vec<String>);

impl KindFilter {
    /// Parses a comma-separated list; the error says what is wrong.
    pub fn parse(list: &str) -> Result<KindFilter, String> {
        let kinds: Vec<String> = list.split(',').map(|k| k.trim().to_owned()).filter(|k| !k.is_empty()).collect();
        if let Some(bad) =
            kinds.iter().find(|k| k.len() > MAX_KIND_BYTES || k.strip_suffix('*').unwrap_or(k).contains('*'))
        {
            return Err(format!(
                "`{bad}` is not a kind: a kind, or a prefix ending in `*` (e.g. `run.*`), at most {MAX_KIND_BYTES} bytes"
            ));
        }
        if kinds.len() > MAX_KINDS {
            return Err(format!("at most {MAX_KINDS} kinds"));
        }
        Ok(KindFilter(kinds))
    }

    pub fn wants(&self, kind: &str) -> bool {
        self.0.is_empty()
            || self.0.iter().any(|k| match k.strip_suffix('*') {
                Some(prefix) => kind.starts_with(prefix),
                None => kind == k,
            })
    }

    /// The list as it is stored: comma-separated.
    pub fn to_list(&self) -> String {
        self.0.join(",")
    }

    pub fn kinds(&self) -> &[String] {
        &self.0
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn kinds_are_exact_or_prefixes() {
        let filter = KindFilter::parse("run.*, task.state").unwrap();
        assert!(filter.wants("run.state") && filter.wants("run.released") && filter.wants("task.state"));
        assert!(!filter.wants("task.stateful"));
        assert!(KindFilter::parse("").unwrap().wants("anything"));
        assert!(KindFilter::parse("r*n").unwrap_err().contains("r*n"));
        assert!(KindFilter::parse("é*").is_ok(), "a multi-byte kind is cut on a character");
        assert_eq!(filter.to_list(), "run.*,task.state");
    }
}
