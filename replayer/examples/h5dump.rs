fn main() {
    let path = std::env::args().nth(1).unwrap();
    let filter = std::env::args().nth(2);
    let t = gpuless_replayer::replay::load(std::path::Path::new(&path)).unwrap();
    println!("arena {:#x} {:#x}", t.meta.arena_base, t.meta.arena_size);
    for c in &t.calls {
        let name = c.function.name();
        if let Some(f) = &filter {
            if !name.contains(f.as_str()) {
                continue;
            }
        }
        let args: Vec<String> = c
            .args
            .iter()
            .map(|a| {
                let s = format!("{a:?}");
                if s.len() > 300 {
                    format!("{}…", &s[..300])
                } else {
                    s
                }
            })
            .collect();
        let res: Vec<String> = c
            .results
            .iter()
            .map(|a| {
                let s = format!("{a:?}");
                if s.len() > 200 {
                    format!("{}…", &s[..200])
                } else {
                    s
                }
            })
            .collect();
        println!(
            "#{} {} v{} pt{} st={} parent={:?} args={:?} res={:?}",
            c.seq, name, c.variant.version, c.variant.per_thread, c.status, c.parent, args, res
        );
    }
}
