//! `shardfs pack` through the real binary, against datasets the real mosaicml-streaming
//! 0.13.0 `MDSWriter` wrote from the same inputs (`tests/pack/reference/`, written by
//! `tests/pack/make_reference.py` from `tests/pack/inputs/`).

mod s3_writes;

use crate::common::{files_under, shardfs_bin};
use shardfs::mds::{decompress, Index, ShardView};
use std::path::{Path, PathBuf};
use std::process::{Command, Output};

fn here() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/pack")
}

fn input(name: &str) -> PathBuf {
    here().join("inputs").join(name)
}

fn reference(name: &str) -> PathBuf {
    here().join("reference").join(name)
}

fn pack(args: &[&str]) -> Output {
    Command::new(shardfs_bin())
        .arg("pack")
        .args(args)
        .output()
        .unwrap()
}

fn ok(o: &Output) -> String {
    let err = String::from_utf8_lossy(&o.stderr).to_string();
    assert!(o.status.success(), "pack failed: {err}");
    err
}

fn failed(o: &Output) -> String {
    let err = String::from_utf8_lossy(&o.stderr).to_string();
    assert!(!o.status.success(), "pack should have failed: {err}");
    err
}

fn s(p: &Path) -> &str {
    p.to_str().unwrap()
}

/// Every file of `a` and `b` is the same, byte for byte.
fn assert_same_tree(ours: &Path, theirs: &Path) {
    let (fa, fb) = (files_under(ours), files_under(theirs));
    assert_eq!(
        fa,
        fb,
        "{} and {} hold different files",
        ours.display(),
        theirs.display()
    );
    for f in &fa {
        let (a, b) = (
            std::fs::read(ours.join(f)).unwrap(),
            std::fs::read(theirs.join(f)).unwrap(),
        );
        assert!(
            a == b,
            "{f} differs from MDSWriter's ({} vs {} bytes)",
            a.len(),
            b.len()
        );
    }
}

/// Every sample of a dataset, as its column byte strings, in index order.
fn samples(dir: &Path) -> Vec<Vec<Vec<u8>>> {
    let index = Index::parse(&std::fs::read(dir.join("index.json")).unwrap()).unwrap();
    let mut out = Vec::new();
    for entry in index.shards() {
        let stored = std::fs::read(dir.join(&entry.stored_file().basename)).unwrap();
        let raw = match entry.compression {
            Some(c) => decompress(&c, &stored, Some(entry.raw.bytes)).unwrap(),
            None => stored,
        };
        let view = ShardView::new(entry, &raw).unwrap();
        for i in 0..entry.samples {
            out.push(
                view.columns(i)
                    .unwrap()
                    .into_iter()
                    .map(<[u8]>::to_vec)
                    .collect(),
            );
        }
    }
    out
}

#[test]
fn each_format_is_byte_identical_to_mdswriter() {
    let tmp = tempfile::tempdir().unwrap();
    let cases: [(&str, &str, &[&str]); 4] = [
        (
            "jsonl",
            "jsonl",
            &["--size-limit", "8192", "--hashes", "xxh3_64,sha1"],
        ),
        ("imagefolder", "imagefolder", &["--size-limit", "2KiB"]),
        (
            "webdataset",
            "webdataset",
            &["--size-limit", "4096", "--threads", "3"],
        ),
        (
            "parquet",
            "parquet",
            &["--size-limit", "4096", "--threads", "2"],
        ),
    ];
    for (inp, reference_name, extra) in cases {
        let dest = tmp.path().join(reference_name);
        let mut args = vec![s(&input(inp)).to_string(), s(&dest).to_string()];
        args.extend(extra.iter().map(|a| a.to_string()));
        let refs: Vec<&str> = args.iter().map(String::as_str).collect();
        let err = ok(&pack(&refs));
        // Not a terminal: one summary line, no progress bar.
        assert_eq!(err.lines().count(), 1, "{err}");
        assert!(err.starts_with("packed "), "{err}");
        assert_same_tree(&dest, &reference(reference_name));
    }
}

#[test]
fn compressed_pack_matches_apart_from_compressed_bytes() {
    let tmp = tempfile::tempdir().unwrap();
    let dest = tmp.path().join("z");
    ok(&pack(&[
        s(&input("jsonl")),
        s(&dest),
        "--size-limit",
        "8192",
        "--compression",
        "zstd:7",
        "--hashes",
        "sha1",
    ]));
    let theirs = reference("jsonl-zstd");
    let strip = |dir: &Path| {
        let mut v: serde_json::Value =
            serde_json::from_slice(&std::fs::read(dir.join("index.json")).unwrap()).unwrap();
        for e in v["shards"].as_array_mut().unwrap() {
            let z = e["zip_data"].as_object_mut().unwrap();
            z.remove("bytes");
            z.remove("hashes");
        }
        v
    };
    assert_eq!(strip(&dest), strip(&theirs));
    assert_eq!(files_under(&dest), files_under(&theirs));
    assert_eq!(samples(&dest), samples(&theirs));
    assert_eq!(samples(&dest), samples(&reference("jsonl")));
}

#[test]
fn three_parts_merge_as_merge_index_and_read_as_one_pack() {
    let tmp = tempfile::tempdir().unwrap();
    let dest = tmp.path().join("parts");
    // Parts finish in any order.
    for k in [2, 0, 1] {
        let part = format!("{k}/3");
        ok(&pack(&[
            s(&input("jsonl")),
            s(&dest),
            "--size-limit",
            "8192",
            "--part",
            &part,
        ]));
    }
    ok(&pack(&["--merge", s(&dest)]));
    // Parts and the merged index.json are what MDSWriter + merge_index wrote.
    assert_same_tree(&dest, &reference("jsonl-parts"));
    assert_eq!(samples(&dest), samples(&reference("jsonl")));
}

#[test]
fn parquet_parts_split_rows_and_read_as_one_pack() {
    let tmp = tempfile::tempdir().unwrap();
    let dest = tmp.path().join("parts");
    // 90 rows in row groups of 16 and 25: the cuts at rows 22, 45 and 67 fall inside row groups.
    for k in 0..4 {
        let part = format!("{k}/4");
        ok(&pack(&[
            s(&input("parquet")),
            s(&dest),
            "--size-limit",
            "4096",
            "--part",
            &part,
        ]));
    }
    ok(&pack(&["--merge", s(&dest)]));
    assert_eq!(samples(&dest), samples(&reference("parquet")));
}

#[test]
fn merge_refuses_a_missing_part() {
    let tmp = tempfile::tempdir().unwrap();
    let dest = tmp.path().join("parts");
    ok(&pack(&[s(&input("jsonl")), s(&dest), "--part", "1/2"]));
    let err = failed(&pack(&["--merge", s(&dest)]));
    assert!(err.contains("part-00000 is missing"), "{err}");
    assert!(!dest.join("index.json").exists());
}

/// A JSON Lines input big enough that a pack takes a moment: `rows` rows.
fn big_jsonl(dir: &Path, rows: usize) -> PathBuf {
    use std::fmt::Write;
    let mut text = String::new();
    for i in 0..rows {
        let _ = writeln!(
            text,
            r#"{{"id": {i}, "x": {}, "text": "{}"}}"#,
            i as f64 / 7.0,
            "lorem ipsum ".repeat(12)
        );
    }
    let p = dir.join("big.jsonl");
    std::fs::write(&p, text).unwrap();
    p
}

#[test]
fn a_killed_pack_leaves_no_index_and_a_rerun_is_correct() {
    let tmp = tempfile::tempdir().unwrap();
    let data = big_jsonl(tmp.path(), 150_000);
    let dest = tmp.path().join("dest");
    let mut child = Command::new(shardfs_bin())
        .args([
            "pack",
            s(&data),
            s(&dest),
            "--size-limit",
            "64KiB",
            "--threads",
            "1",
        ])
        .stderr(std::process::Stdio::null())
        .spawn()
        .unwrap();
    // Kill it once some shards are written, well before the end.
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(60);
    loop {
        let n = std::fs::read_dir(&dest).map(|d| d.count()).unwrap_or(0);
        if n >= 20 {
            break;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "the pack wrote no shards"
        );
        assert!(
            child.try_wait().unwrap().is_none(),
            "the pack ended before it was killed"
        );
        std::thread::sleep(std::time::Duration::from_millis(5));
    }
    child.kill().unwrap();
    child.wait().unwrap();
    assert!(
        !dest.join("index.json").exists(),
        "a killed pack left an index"
    );
    // Leftovers of another, longer run: a re-run must not keep them.
    std::fs::write(dest.join("shard.09999.mds"), b"stale").unwrap();
    ok(&pack(&[s(&data), s(&dest), "--size-limit", "64KiB"]));
    let clean = tmp.path().join("clean");
    ok(&pack(&[s(&data), s(&clean), "--size-limit", "64KiB"]));
    assert_same_tree(&dest, &clean);
}

#[test]
fn bad_input_names_the_file_and_line_or_member_and_writes_no_index() {
    let tmp = tempfile::tempdir().unwrap();
    let t = tmp.path();
    // A line that is not JSON.
    std::fs::write(t.join("a.jsonl"), "{\"a\": 1}\n{\"a\": 2}\n{\"a\": 3,}\n").unwrap();
    // A column whose type changes (after the lines columns are inferred from).
    let mut rows: String = (0..1500).map(|i| format!("{{\"a\": {i}}}\n")).collect();
    rows.push_str("{\"a\": \"x\"}\n");
    std::fs::write(t.join("b.jsonl"), rows).unwrap();
    // An image that is not one.
    let images = t.join("images");
    std::fs::create_dir_all(images.join("cls")).unwrap();
    std::fs::copy(input("imagefolder/cat/c1.jpg"), images.join("cls/a.jpg")).unwrap();
    std::fs::write(images.join("cls/b.jpg"), b"GIF89a not a jpeg").unwrap();
    // A tar that ends in the middle of a member.
    let tar = std::fs::read(input("webdataset/shard-00.tar")).unwrap();
    std::fs::write(t.join("cut.tar"), &tar[..612]).unwrap();
    // Parquet: a file cut short, one with a type pack does not convert, a null in an int.
    let parquet = std::fs::read(input("parquet/a.parquet")).unwrap();
    std::fs::write(t.join("cut.parquet"), &parquet[..parquet.len() / 2]).unwrap();
    let odd = input("parquet-odd");
    let cases: [(PathBuf, &[&str], &str); 7] = [
        (t.join("a.jsonl"), &[], "a.jsonl:3: not JSON"),
        (
            t.join("b.jsonl"),
            &[],
            "b.jsonl:1501: field \"a\" (int): expected an integer for int, found str",
        ),
        (images.clone(), &[], "cls/b.jpg: not a JPEG file"),
        (
            t.join("cut.tar"),
            &[],
            "cut.tar (member sample0000.jpg): the tar ends in the middle of this member",
        ),
        (
            t.join("cut.parquet"),
            &[],
            "cut.parquet: Parquet: Invalid Parquet file. Corrupt footer",
        ),
        (
            odd.join("timestamp.parquet"),
            &[],
            "timestamp.parquet: Parquet: field \"when\" has the Parquet type Timestamp",
        ),
        (
            odd.join("null_int.parquet"),
            &[],
            "null_int.parquet (row 2): field \"id\" (int): expected an integer for int, found null",
        ),
    ];
    for (k, (inp, extra, want)) in cases.iter().enumerate() {
        let dest = t.join(format!("out{k}"));
        let mut args = vec![s(inp), s(&dest)];
        args.extend_from_slice(extra);
        let err = failed(&pack(&args));
        assert!(err.contains(want), "want {want:?} in: {err}");
        assert_eq!(err.lines().count(), 1, "{err}");
        assert!(!dest.join("index.json").exists(), "{err}");
    }
}

#[test]
fn refuses_a_dest_holding_a_dataset_or_other_files() {
    let tmp = tempfile::tempdir().unwrap();
    let dest = tmp.path().join("d");
    ok(&pack(&[s(&input("jsonl")), s(&dest)]));
    let err = failed(&pack(&[s(&input("jsonl")), s(&dest)]));
    assert!(err.contains("already holds a dataset"), "{err}");
    let other = tmp.path().join("o");
    std::fs::create_dir_all(&other).unwrap();
    std::fs::write(other.join("notes.txt"), b"mine").unwrap();
    let err = failed(&pack(&[s(&input("jsonl")), s(&other)]));
    assert!(err.contains("notes.txt"), "{err}");
    assert_eq!(std::fs::read(other.join("notes.txt")).unwrap(), b"mine");
}

#[test]
fn given_columns_choose_fields_and_encodings() {
    let tmp = tempfile::tempdir().unwrap();
    let dest = tmp.path().join("d");
    ok(&pack(&[
        s(&input("jsonl")),
        s(&dest),
        "--columns",
        "id:str_int,score:float32,meta:json",
    ]));
    let index = Index::parse(&std::fs::read(dest.join("index.json")).unwrap()).unwrap();
    let cols: Vec<String> = index
        .columns()
        .iter()
        .map(|c| format!("{}:{}", c.name, c.encoding))
        .collect();
    assert_eq!(cols, ["id:str_int", "meta:json", "score:float32"]);
    let first = &samples(&dest)[0];
    assert_eq!(first[0], b"-7");
    let score: f64 = "2.2250738585072011e-308".parse().unwrap();
    assert_eq!(first[2], (score as f32).to_le_bytes());
}

#[test]
fn packs_to_s3_through_moto() {
    let moto = crate::common::moto::moto();
    moto.put("pack39", "unrelated/x", b"x");
    let out = Command::new(shardfs_bin())
        .args([
            "pack",
            s(&input("jsonl")),
            "s3://pack39/ds",
            "--size-limit",
            "8192",
            "--hashes",
            "sha1,xxh3_64",
            "--endpoint-url",
            &moto.endpoint,
        ])
        .env("AWS_ACCESS_KEY_ID", "test")
        .env("AWS_SECRET_ACCESS_KEY", "test")
        .env("AWS_REGION", "us-east-1")
        .output()
        .unwrap();
    ok(&out);
    let store = shardfs::store::put::DestStore::open(
        &shardfs::store::Source::parse("s3://pack39/ds").unwrap(),
        &crate::common::moto::s3_options(&moto.endpoint),
    )
    .unwrap();
    let theirs = reference("jsonl");
    let names: Vec<String> = shardfs::store::put::list_recursive(&store)
        .unwrap()
        .into_iter()
        .map(|(n, _)| n)
        .collect();
    assert_eq!(names, files_under(&theirs));
    for n in &names {
        assert!(
            store.get(n).unwrap() == std::fs::read(theirs.join(n)).unwrap(),
            "s3 {n} differs from MDSWriter's"
        );
    }
    // A shard above the multipart threshold goes up in parts and reads back whole.
    use shardfs::store::put::PutStore;
    let big: Vec<u8> = (0..shardfs::store::put::MULTIPART_THRESHOLD + 3_000_000)
        .map(|i| (i % 251) as u8)
        .collect();
    store.put("shard.00000.mds", &big).unwrap();
    assert!(store.get("shard.00000.mds").unwrap() == big);
}

/// `pack s3://… DEST` with moto's credentials: the command line of a pack from moto.
fn pack_from_moto(endpoint: &str, args: &[&str]) -> Output {
    Command::new(shardfs_bin())
        .arg("pack")
        .args(args)
        .args(["--endpoint-url", endpoint])
        .env("AWS_ACCESS_KEY_ID", "test")
        .env("AWS_SECRET_ACCESS_KEY", "test")
        .env("AWS_REGION", "us-east-1")
        .output()
        .unwrap()
}

#[test]
fn packs_each_format_from_s3_through_moto() {
    let moto = crate::common::moto::moto();
    moto.upload_dir("pack39in", "in", &here().join("inputs"));
    let tmp = tempfile::tempdir().unwrap();
    // The same flags as the local packs: the same bytes as MDSWriter's.
    let cases: [(&str, &[&str]); 4] = [
        (
            "jsonl",
            &["--size-limit", "8192", "--hashes", "xxh3_64,sha1"],
        ),
        ("imagefolder", &["--size-limit", "2KiB"]),
        ("webdataset", &["--size-limit", "4096", "--threads", "3"]),
        ("parquet", &["--size-limit", "4096", "--threads", "2"]),
    ];
    for (name, extra) in cases {
        let dest = tmp.path().join(name);
        let url = format!("s3://pack39in/in/{name}");
        let mut args = vec![url.as_str(), s(&dest)];
        args.extend_from_slice(extra);
        ok(&pack_from_moto(&moto.endpoint, &args));
        assert_same_tree(&dest, &reference(name));
    }
    // Parts read byte ranges of the objects: three of them merge as merge_index did.
    let parts = tmp.path().join("parts");
    for k in 0..3 {
        let part = format!("{k}/3");
        ok(&pack_from_moto(
            &moto.endpoint,
            &[
                "s3://pack39in/in/jsonl",
                s(&parts),
                "--size-limit",
                "8192",
                "--part",
                &part,
            ],
        ));
    }
    ok(&pack(&["--merge", s(&parts)]));
    assert_same_tree(&parts, &reference("jsonl-parts"));
    // One object as INPUT reads as the same file does locally.
    let one = tmp.path().join("one");
    ok(&pack_from_moto(
        &moto.endpoint,
        &["s3://pack39in/in/parquet/b.parquet", s(&one)],
    ));
    let local = tmp.path().join("local");
    ok(&pack(&[s(&input("parquet/b.parquet")), s(&local)]));
    assert_eq!(samples(&one), samples(&local));
    // Nothing there: one clear error, nothing written.
    let none = tmp.path().join("none");
    let err = failed(&pack_from_moto(
        &moto.endpoint,
        &["s3://pack39in/nothing", s(&none)],
    ));
    assert!(
        err.contains("s3://pack39in/nothing: no object there"),
        "{err}"
    );
    assert!(!none.exists());
    let err = failed(&pack_from_moto(
        &moto.endpoint,
        &["s3://pack39in/in/jsonl", s(&none), "--format", "parquet"],
    ));
    assert!(
        err.contains("s3://pack39in/in/jsonl: no input object of this format"),
        "{err}"
    );
}

#[test]
fn jsonl_parsed_on_several_threads_keeps_line_order_and_line_numbers() {
    // Two files of many 1 MiB parse batches each: samples must come in file and line order
    // whatever worker parsed them, and an error deep in the second file names its line.
    let tmp = tempfile::tempdir().unwrap();
    let t = tmp.path();
    let good = t.join("good");
    std::fs::create_dir_all(&good).unwrap();
    let row = |i: usize| format!("{{\"id\": {i}, \"text\": \"{}\"}}\n", "ab".repeat(i % 97));
    let (a, b): (String, String) = (
        (0..40_000).map(row).collect(),
        (40_000..70_000).map(row).collect(),
    );
    std::fs::write(good.join("a.jsonl"), &a).unwrap();
    std::fs::write(good.join("b.jsonl"), &b).unwrap();
    let dest = t.join("out");
    ok(&pack(&[
        s(&good),
        s(&dest),
        "--threads",
        "3",
        "--size-limit",
        "256KiB",
    ]));
    let ids: Vec<i64> = samples(&dest)
        .iter()
        .map(|cols| i64::from_le_bytes(cols[0][..8].try_into().unwrap()))
        .collect();
    assert_eq!(ids, (0..70_000).collect::<Vec<i64>>());
    let one = t.join("one");
    ok(&pack(&[
        s(&good),
        s(&one),
        "--threads",
        "1",
        "--size-limit",
        "256KiB",
    ]));
    assert_same_tree(&dest, &one);

    let bad = t.join("bad");
    std::fs::create_dir_all(&bad).unwrap();
    std::fs::write(bad.join("a.jsonl"), &a).unwrap();
    let mut lines: Vec<String> = b.lines().map(str::to_string).collect();
    lines[25_000] = "{\"id\": 1,".into();
    std::fs::write(bad.join("b.jsonl"), lines.join("\n")).unwrap();
    let out = t.join("bad-out");
    let err = failed(&pack(&[s(&bad), s(&out), "--threads", "3"]));
    assert!(err.contains("b.jsonl:25001: not JSON"), "{err}");
    assert!(!out.join("index.json").exists());
}
