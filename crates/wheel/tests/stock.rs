//! `specs.rs` is what `tools/gen_specs.py` makes of the stock Salt 3008.3 sources.

use std::path::Path;

#[test]
fn specs_match_stock_salt() {
    halite_testkit::assert_generated_from_stock(
        &Path::new(env!("CARGO_MANIFEST_DIR")).join("tools/gen_specs.py"),
        include_str!("../src/specs.rs"),
    );
}
