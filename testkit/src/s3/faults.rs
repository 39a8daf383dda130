//! Fault injection. At random, for the soak harness (`bench/soak.sh`): with `--fault-rate P`,
//! each GET is hit by one fault with probability P, chosen among `--faults` (default all):
//!
//! - `503`: an S3 `SlowDown` error (HTTP 503), as S3 sends under load;
//! - `reset`: the connection is dropped before the first body byte;
//! - `truncate`: the body stops (connection dropped) halfway through;
//! - `corrupt`: one byte of the body is flipped, the length unchanged;
//! - `stall`: the answer waits `--stall-ms` first (a slow or stuck connection).
//!
//! Choices come from a seeded counter-based generator (`--fault-seed`), so a run can be
//! repeated. Every injected fault is counted in `GET /__bench/stats` under `faults`.
//!
//! And by rule, for the tests ([`Rules`]): a [`ServerFault`] on the requests for one key (or
//! any), a given number of times or for good.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Mutex;
use std::time::Duration;

/// One kind of fault.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FaultKind {
    /// HTTP 503 SlowDown.
    SlowDown,
    /// Connection dropped before the body.
    Reset,
    /// Body cut halfway.
    Truncate,
    /// One body byte flipped.
    Corrupt,
    /// Answer delayed.
    Stall,
}

impl FaultKind {
    const ALL: [FaultKind; 5] = [
        FaultKind::SlowDown,
        FaultKind::Reset,
        FaultKind::Truncate,
        FaultKind::Corrupt,
        FaultKind::Stall,
    ];

    fn name(self) -> &'static str {
        match self {
            FaultKind::SlowDown => "503",
            FaultKind::Reset => "reset",
            FaultKind::Truncate => "truncate",
            FaultKind::Corrupt => "corrupt",
            FaultKind::Stall => "stall",
        }
    }

    fn index(self) -> usize {
        FaultKind::ALL.iter().position(|k| *k == self).unwrap_or(0)
    }
}

/// Parses `--faults 503,reset,...`.
pub fn parse_kinds(list: &str) -> Result<Vec<FaultKind>, String> {
    list.split(',')
        .filter(|s| !s.trim().is_empty())
        .map(|s| {
            FaultKind::ALL
                .iter()
                .copied()
                .find(|k| k.name() == s.trim())
                .ok_or_else(|| {
                    format!("unknown fault {s:?} (503, reset, truncate, corrupt, stall)")
                })
        })
        .collect()
}

/// The fault plan of one server and what it injected.
#[derive(Debug)]
pub struct Faults {
    rate: f64,
    kinds: Vec<FaultKind>,
    /// How long a stalled answer waits.
    pub stall: Duration,
    seed: u64,
    draws: AtomicU64,
    injected: [AtomicU64; 5],
}

/// splitmix64: a good 64-bit mix of a counter (Steele, Lea, Flood 2014).
fn mix(mut z: u64) -> u64 {
    z = z.wrapping_add(0x9e37_79b9_7f4a_7c15);
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^ (z >> 31)
}

impl Faults {
    /// A plan injecting `kinds` (all when empty) into a `rate` share of GETs.
    pub fn new(rate: f64, kinds: Vec<FaultKind>, stall: Duration, seed: u64) -> Faults {
        Faults {
            rate: rate.clamp(0.0, 1.0),
            kinds: if kinds.is_empty() {
                FaultKind::ALL.to_vec()
            } else {
                kinds
            },
            stall,
            seed,
            draws: AtomicU64::new(0),
            injected: Default::default(),
        }
    }

    /// A fresh pseudo-random number.
    pub fn draw(&self) -> u64 {
        mix(self.seed ^ mix(self.draws.fetch_add(1, Ordering::Relaxed)))
    }

    /// The fault for the next GET, if any (counted as injected).
    pub fn pick(&self) -> Option<FaultKind> {
        if self.rate <= 0.0 {
            return None;
        }
        let u = (self.draw() >> 11) as f64 / (1u64 << 53) as f64;
        if u >= self.rate {
            return None;
        }
        let k = self.kinds[(self.draw() % self.kinds.len() as u64) as usize];
        self.injected[k.index()].fetch_add(1, Ordering::Relaxed);
        Some(k)
    }

    /// `{"503": n, "reset": n, ...}`.
    pub fn to_json(&self) -> String {
        let parts: Vec<String> = FaultKind::ALL
            .iter()
            .map(|k| {
                format!(
                    "\"{}\":{}",
                    k.name(),
                    self.injected[k.index()].load(Ordering::Relaxed)
                )
            })
            .collect();
        format!("{{{}}}", parts.join(","))
    }
}

/// A fault a test asks for ([`Rules::add`]), on GetObject and HeadObject.
#[derive(Debug, Clone, PartialEq)]
pub enum ServerFault {
    /// 503 SlowDown.
    SlowDown,
    /// 500 InternalError.
    InternalError,
    /// 403 AccessDenied (as a bucket policy that refuses some keys answers).
    AccessDenied,
    /// Close the connection without answering.
    Reset,
    /// Send half of the body, then fail the stream (Content-Length unmet).
    Truncate,
    /// Flip the byte in the middle of the body.
    Corrupt,
    /// Wait before answering (rules add up).
    Latency(Duration),
    /// Stream the body at this many bytes per second.
    Bandwidth(u64),
}

#[derive(Debug)]
struct Rule {
    fault: ServerFault,
    key: Option<String>,
    remaining: Option<u64>,
}

/// What the rules decided for one request.
#[derive(Debug, Default)]
pub struct Decision {
    /// Time to wait before answering.
    pub delay: Duration,
    /// Body bytes per second, when capped.
    pub bandwidth: Option<u64>,
    /// The first matching fault that is neither a delay nor a bandwidth cap.
    pub fault: Option<ServerFault>,
}

/// The faults tests asked for, each on one key or any, some a given number of times.
#[derive(Debug, Default)]
pub struct Rules(Mutex<Vec<Rule>>);

impl Rules {
    fn lock(&self) -> std::sync::MutexGuard<'_, Vec<Rule>> {
        self.0.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Injects `fault` on requests for `key` (any key when `None`), `times` times (for good
    /// when `None`).
    pub fn add(&self, fault: ServerFault, key: Option<&str>, times: Option<u64>) {
        self.lock().push(Rule {
            fault,
            key: key.map(str::to_string),
            remaining: times,
        });
    }

    /// Removes every rule.
    pub fn clear(&self) {
        self.lock().clear();
    }

    /// Consumes the rules that match a request for `key`.
    pub fn decide(&self, key: &str) -> Decision {
        let mut d = Decision::default();
        for r in self.lock().iter_mut() {
            if r.remaining == Some(0) || r.key.as_deref().is_some_and(|k| k != key) {
                continue;
            }
            match &r.fault {
                ServerFault::Latency(t) => d.delay += *t,
                ServerFault::Bandwidth(b) => d.bandwidth = Some(*b),
                f if d.fault.is_none() => d.fault = Some(f.clone()),
                _ => continue,
            }
            if let Some(n) = r.remaining.as_mut() {
                *n -= 1;
            }
        }
        d
    }
}
