//! The processes a benchmark phase is charged to (the API, the master, the swarm): the sum
//! of `VmRSS` (from `/proc/<pid>/status`, every 100 ms) and of `Pss` (from `smaps_rollup`,
//! every second: the kernel walks every page table for it) over each one's process tree,
//! keeping the peaks of the phase; at the
//! end of a phase, CPU-seconds used and the sum of `VmHWM` (each process's own peak since
//! it started).

use crate::bench::{cpu_secs, memory_kib, process_tree};
use serde_json::{json, Value as Json};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

/// A `NAME=PID` option.
pub fn parse_watch(text: &str) -> Result<(String, u32), String> {
    let (name, pid) = text
        .split_once('=')
        .ok_or_else(|| format!("--watch {text:?}: expected NAME=PID"))?;
    let pid = pid
        .parse::<u32>()
        .ok()
        .filter(|p| *p > 0)
        .ok_or_else(|| format!("--watch {text:?}: PID must be a process id"))?;
    if name.is_empty() {
        return Err(format!("--watch {text:?}: empty name"));
    }
    Ok((name.to_owned(), pid))
}

/// A field of `/proc/<pid>/status` in KiB (`VmRSS`, `VmHWM`); 0 when unreadable.
pub fn status_kib(pid: u32, field: &str) -> u64 {
    std::fs::read_to_string(format!("/proc/{pid}/status"))
        .ok()
        .and_then(|t| {
            t.lines()
                .find_map(|l| l.strip_prefix(field)?.strip_prefix(':'))
                .and_then(|v| v.split_whitespace().next()?.parse().ok())
        })
        .unwrap_or(0)
}

struct Peaks {
    rss_kib: AtomicU64,
    pss_kib: AtomicU64,
}

/// Samples the watched process trees on a thread until dropped.
pub struct Watch {
    procs: Vec<(String, u32)>,
    peaks: Arc<Vec<Peaks>>,
    stop: Arc<AtomicBool>,
    thread: Option<std::thread::JoinHandle<()>>,
}

/// CPU-seconds at the start of a phase.
pub struct Mark {
    cpu: Vec<f64>,
    own_cpu: f64,
}

fn rss_kib(tree: &[u32]) -> u64 {
    tree.iter().map(|p| status_kib(*p, "VmRSS")).sum()
}

fn sample(pid: u32) -> (u64, u64) {
    let tree = process_tree(pid);
    (rss_kib(&tree), memory_kib(&tree).1)
}

impl Watch {
    /// Starts sampling `procs` (name, root pid).
    pub fn start(procs: Vec<(String, u32)>) -> Watch {
        let peaks: Arc<Vec<Peaks>> = Arc::new(
            procs
                .iter()
                .map(|_| Peaks {
                    rss_kib: AtomicU64::new(0),
                    pss_kib: AtomicU64::new(0),
                })
                .collect(),
        );
        let stop = Arc::new(AtomicBool::new(false));
        let (pids, p, halt) = (
            procs.iter().map(|(_, pid)| *pid).collect::<Vec<_>>(),
            peaks.clone(),
            stop.clone(),
        );
        let thread = std::thread::spawn(move || {
            let mut round = 0u64;
            while !halt.load(Ordering::Relaxed) {
                for (pid, peak) in pids.iter().zip(p.iter()) {
                    let tree = process_tree(*pid);
                    peak.rss_kib.fetch_max(rss_kib(&tree), Ordering::Relaxed);
                    if round.is_multiple_of(10) {
                        peak.pss_kib
                            .fetch_max(memory_kib(&tree).1, Ordering::Relaxed);
                    }
                }
                round += 1;
                std::thread::sleep(Duration::from_millis(100));
            }
        });
        Watch {
            procs,
            peaks,
            stop,
            thread: Some(thread),
        }
    }

    /// Starts a phase: CPU now, and the peaks start again from the current sizes.
    pub fn begin(&self) -> Mark {
        for ((_, pid), peak) in self.procs.iter().zip(self.peaks.iter()) {
            let (rss, pss) = sample(*pid);
            peak.rss_kib.store(rss, Ordering::Relaxed);
            peak.pss_kib.store(pss, Ordering::Relaxed);
        }
        Mark {
            cpu: self
                .procs
                .iter()
                .map(|(_, pid)| cpu_secs(&process_tree(*pid)))
                .collect(),
            own_cpu: cpu_secs(&[std::process::id()]),
        }
    }

    /// Ends a phase: `{name: {cpu_secs, rss_peak_mib, pss_peak_mib, hwm_mib}}`, plus
    /// `generator: {cpu_secs}` (this process).
    pub fn end(&self, mark: &Mark) -> Json {
        let mib = |kib: u64| kib as f64 / 1024.0;
        let mut out = serde_json::Map::new();
        for (((name, pid), peak), cpu0) in self
            .procs
            .iter()
            .zip(self.peaks.iter())
            .zip(mark.cpu.iter())
        {
            let tree = process_tree(*pid);
            let (rss, pss) = sample(*pid);
            let hwm: u64 = tree.iter().map(|p| status_kib(*p, "VmHWM")).sum();
            out.insert(
                name.clone(),
                json!({
                    "cpu_secs": cpu_secs(&tree) - cpu0,
                    "rss_peak_mib": mib(peak.rss_kib.load(Ordering::Relaxed).max(rss)),
                    "pss_peak_mib": mib(peak.pss_kib.load(Ordering::Relaxed).max(pss)),
                    "hwm_mib": mib(hwm),
                    "processes": tree.len(),
                }),
            );
        }
        out.insert(
            "generator".into(),
            json!({"cpu_secs": cpu_secs(&[std::process::id()]) - mark.own_cpu}),
        );
        Json::Object(out)
    }
}

impl Drop for Watch {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn watch_options_name_a_process() {
        assert_eq!(parse_watch("api=42"), Ok(("api".into(), 42)));
        for bad in ["api", "api=", "=42", "api=x", "api=0"] {
            assert!(parse_watch(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn this_process_is_measured() {
        let me = std::process::id();
        assert!(status_kib(me, "VmRSS") > 0);
        assert!(status_kib(me, "VmHWM") >= status_kib(me, "VmRSS"));
        assert_eq!(status_kib(me, "NoSuchField"), 0);
        let w = Watch::start(vec![("me".into(), me)]);
        let mark = w.begin();
        let burn: u64 = (0..2_000_000u64).map(|i| i % 7).sum();
        assert!(burn > 0);
        let r = w.end(&mark);
        assert!(r["me"]["rss_peak_mib"].as_f64().unwrap() > 0.0, "{r}");
        assert!(r["me"]["hwm_mib"].as_f64().unwrap() > 0.0, "{r}");
        assert!(r["me"]["cpu_secs"].as_f64().unwrap() >= 0.0, "{r}");
        assert!(r["generator"]["cpu_secs"].as_f64().is_some(), "{r}");
    }
}
