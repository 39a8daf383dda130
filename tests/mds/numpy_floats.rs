//! Needs a Python with numpy (`tests/run.sh` prepares one; `SHARDFS_PYTHON` names it): float text against numpy's own Dragon4
//! for every float16 and for random float32/float64 bit patterns. numpy's `str()` changed its
//! notation thresholds after 2.1, so this compares with the version-stable
//! `format_float_positional`/`format_float_scientific(unique=True)` in the notation numpy 2.1
//! chose (positional for 0 and 1e-4 <= |x| < 1e16).

use shardfs::mds::{render, Encoding};

struct Lcg(u64);

impl Lcg {
    fn next(&mut self) -> u64 {
        self.0 = self
            .0
            .wrapping_mul(6364136223846793005)
            .wrapping_add(1442695040888963407);
        self.0
    }
}

#[test]
fn float_text_matches_numpy_dragon4() {
    let python = crate::common::python_with_numpy();
    let mut lines = String::new();
    let text = |enc: &str, raw: &[u8]| {
        let e: Encoding = enc.parse().unwrap();
        String::from_utf8(render(&e, raw).unwrap().into_owned()).unwrap()
    };
    for bits in 0..=u16::MAX {
        lines.push_str(&format!(
            "float16 {bits} {}\n",
            text("float16", &bits.to_le_bytes())
        ));
    }
    let mut rng = Lcg(7);
    for _ in 0..20_000 {
        let b32 = rng.next() as u32;
        lines.push_str(&format!(
            "float32 {b32} {}\n",
            text("float32", &b32.to_le_bytes())
        ));
        let b64 = rng.next();
        lines.push_str(&format!(
            "float64 {b64} {}\n",
            text("float64", &b64.to_le_bytes())
        ));
        // Short-mantissa values make ties between shortest candidates likely.
        let tie32 = (rng.next() as u32) & 0xffff_f000;
        lines.push_str(&format!(
            "float32 {tie32} {}\n",
            text("float32", &tie32.to_le_bytes())
        ));
    }
    let tmp = tempfile::tempdir().unwrap();
    let path = tmp.path().join("floats.txt");
    std::fs::write(&path, lines).unwrap();
    let script = r#"
import sys
import numpy as np
bad = 0
n = 0
for line in open(sys.argv[1]):
    dtype, bits, ours = line.split()
    int_type = {"float16": np.uint16, "float32": np.uint32, "float64": np.uint64}[dtype]
    v = np.array([int(bits)], int_type).view(dtype)[0]
    if np.isnan(v):
        want = "nan"
    elif np.isinf(v):
        want = "inf" if v > 0 else "-inf"
    elif v == 0 or 1e-4 <= abs(float(v)) < 1e16:
        want = np.format_float_positional(v, unique=True, trim="0")
    else:
        want = np.format_float_scientific(v, unique=True, trim="-", exp_digits=2)
    n += 1
    if want != ours:
        bad += 1
        if bad <= 10:
            print(dtype, bits, "numpy", want, "ours", ours, file=sys.stderr)
print(n, bad)
sys.exit(1 if bad else 0)
"#;
    let out = std::process::Command::new(python)
        .arg("-c")
        .arg(script)
        .arg(&path)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "numpy disagrees: {}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
}
