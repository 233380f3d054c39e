//! The functions a registry offers.

use std::collections::BTreeMap;

/// Entries by `module.function` name, sorted. `Debug` lists the names only.
pub struct Table<E> {
    entries: BTreeMap<&'static str, E>,
}

impl<E> Default for Table<E> {
    fn default() -> Self {
        Table {
            entries: BTreeMap::new(),
        }
    }
}

impl<E> std::fmt::Debug for Table<E> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_list().entries(self.entries.keys()).finish()
    }
}

impl<E> Table<E> {
    /// Offers `name` with `entry` (replacing an earlier entry of that name).
    pub fn insert(&mut self, name: &'static str, entry: E) {
        self.entries.insert(name, entry);
    }

    /// The entry of `name`.
    pub fn get(&self, name: &str) -> Option<&E> {
        self.entries.get(name)
    }

    /// Whether `name` is offered.
    pub fn contains(&self, name: &str) -> bool {
        self.entries.contains_key(name)
    }

    /// Every name, sorted.
    pub fn names(&self) -> Vec<String> {
        self.entries.keys().map(|k| (*k).to_owned()).collect()
    }

    /// Every `(name, entry)`, sorted by name.
    pub fn iter(&self) -> impl Iterator<Item = (&'static str, &E)> + '_ {
        self.entries.iter().map(|(k, v)| (*k, v))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_are_sorted_and_debug_shows_only_them() {
        let mut table = Table::default();
        table.insert("b.x", 3);
        table.insert("a.y", 1);
        table.insert("b.x", 2);
        assert_eq!(table.names(), ["a.y", "b.x"]);
        assert_eq!(table.get("b.x"), Some(&2));
        assert!(table.contains("a.y") && !table.contains("a"));
        assert_eq!(
            table.iter().map(|(k, _)| k).collect::<Vec<_>>(),
            ["a.y", "b.x"]
        );
        assert_eq!(format!("{table:?}"), r#"["a.y", "b.x"]"#);
    }
}
