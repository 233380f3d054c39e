use std::io::BufRead;
fn main() {
    for line in std::io::stdin().lock().lines() {
        let line = line.unwrap();
        let (pat, name) = line.split_once('\t').unwrap();
        let pat = pat.replace("\\n", "\n"); let name = name.replace("\\n", "\n");
        println!("{}", if halite_target::fnmatch::fnmatch(&name, &pat) { "T" } else { "F" });
    }
}
