//! `halite-docgen BIN_DIR OUT_DIR`: writes the shell completions and man pages of the
//! programs in `BIN_DIR` under `OUT_DIR` (laid out as `/usr/share`), for the package.

use std::path::PathBuf;
use std::process::ExitCode;

fn main() -> ExitCode {
    let args: Vec<PathBuf> = std::env::args_os().skip(1).map(PathBuf::from).collect();
    let [bin_dir, out] = args.as_slice() else {
        eprintln!("usage: halite-docgen BIN_DIR OUT_DIR");
        return ExitCode::from(2);
    };
    match halite_packaging::generate(bin_dir, out) {
        Ok(files) => {
            println!(
                "halite-docgen: {} files under {}",
                files.len(),
                out.display()
            );
            ExitCode::SUCCESS
        }
        Err(e) => {
            eprintln!("halite-docgen: {e}");
            ExitCode::FAILURE
        }
    }
}
