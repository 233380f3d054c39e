fn main() {
    for p in std::env::args().skip(1) {
        println!("{p}: {:?}", fancy_regex::Regex::new(&p).map(|r| r.is_match("ab").unwrap()));
    }
}
