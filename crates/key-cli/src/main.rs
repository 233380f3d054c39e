//! `halite-key`: salt-key 3008.3 for a Halite (or stock Salt) master's pki directory.
//!
//! Same options, output and exit codes as `salt-key`, working directly on the files
//! through `halite-keystore`, including `--gen-keys` and `--gen-signature` (the signed
//! master public key, `master_sign_pubkey`). What it does not do: external authentication
//! (`--eauth`, wheel `key.*`), Saltfiles, the key log file, passphrase-protected keys, and
//! firing `salt/key` events (the master notices key changes itself).

mod app;
mod cache;
mod display;
mod opts;
mod user;

fn main() {
    let argv: Vec<String> = std::env::args_os()
        .skip(1)
        .map(|a| a.to_string_lossy().into_owned())
        .collect();
    std::process::exit(app::run(&argv));
}
