use std::io::BufRead;
fn main() {
    // each line: pattern \t text (json strings)
    let cache = halite_target::pyre::RegexCache::default();
    for line in std::io::stdin().lock().lines() {
        let line = line.unwrap();
        let mut parts = line.split('\t');
        let pat: String = unjson(parts.next().unwrap());
        let text: String = unjson(parts.next().unwrap());
        let r = |x: Result<bool, halite_target::Error>| match x { Ok(true) => "T".to_string(), Ok(false) => "F".to_string(), Err(e) => match e { halite_target::Error::InvalidRegex{..} => "E".into(), other => format!("X:{other}") } };
        println!("{}{}{}", r(cache.re_match(&pat, &text)), r(cache.re_fullmatch(&pat, &text)), r(cache.re_search(&pat, &text)));
    }
}
fn unjson(s: &str) -> String {
    // minimal: python writes with \uXXXX escapes via ascii json
    let s = &s[1..s.len()-1];
    let mut out = String::new();
    let mut it = s.chars().peekable();
    let mut pending_high: Option<u32> = None;
    while let Some(c) = it.next() {
        if c == '\\' {
            match it.next().unwrap() {
                'n' => out.push('\n'), 't' => out.push('\t'), 'r' => out.push('\r'), 'b' => out.push('\x08'), 'f' => out.push('\x0c'),
                '"' => out.push('"'), '\\' => out.push('\\'), '/' => out.push('/'),
                'u' => { let h: String = (0..4).map(|_| it.next().unwrap()).collect(); let v = u32::from_str_radix(&h,16).unwrap();
                    if (0xD800..0xDC00).contains(&v) { pending_high = Some(v); } else if (0xDC00..0xE000).contains(&v) { let hi = pending_high.take().unwrap(); out.push(char::from_u32(0x10000 + ((hi-0xD800)<<10) + (v-0xDC00)).unwrap()); } else { out.push(char::from_u32(v).unwrap()); } }
                x => panic!("{x}"),
            }
        } else { out.push(c); }
    }
    out
}
