//! The loopback S3 server's write side (the testkit's PutObject, multipart upload and
//! DeleteObject, which `bench/pack.py --s3` packs into): a pack to it stores what MDSWriter
//! wrote, uploads are checked as S3 checks them, and they pay the emulated link as downloads do.

use super::{ok, reference, s};
use crate::common::{files_under, shardfs_bin, FakeS3Options};
use object_store::multipart::MultipartStore;
use object_store::path::Path as ObjPath;
use object_store::{ObjectStoreExt, PutPayload};
use shardfs::store::put::{list_recursive, DestStore, PutStore, MULTIPART_THRESHOLD};
use shardfs_testkit::s3::{EtagMode, FakeS3, ACCESS_KEY, SECRET_KEY};
use std::process::Command;
use std::time::{Duration, Instant};

/// An object_store client of `bucket` on `fake`.
fn client(fake: &FakeS3, bucket: &str) -> object_store::aws::AmazonS3 {
    // rustls's provider, as shardfs's store layer installs it before its first client.
    let _ = rustls::crypto::ring::default_provider().install_default();
    object_store::aws::AmazonS3Builder::new()
        .with_endpoint(&fake.endpoint)
        .with_allow_http(true)
        .with_bucket_name(bucket)
        .with_region("us-east-1")
        .with_access_key_id(ACCESS_KEY)
        .with_secret_access_key(SECRET_KEY)
        .build()
        .unwrap()
}

/// `shardfs pack ARGS --endpoint-url FAKE` with the test server's credentials.
fn pack_on(fake: &FakeS3, args: &[&str]) -> std::process::Output {
    Command::new(shardfs_bin())
        .arg("pack")
        .args(args)
        .args(["--endpoint-url", &fake.endpoint])
        .env("AWS_ACCESS_KEY_ID", ACCESS_KEY)
        .env("AWS_SECRET_ACCESS_KEY", SECRET_KEY)
        .env("AWS_REGION", "us-east-1")
        .output()
        .unwrap()
}

#[test]
fn a_pack_to_the_test_s3_server_stores_what_mdswriter_wrote() {
    let fake = FakeS3::start();
    // What an interrupted run left: the pack must delete it.
    fake.put("packw", "ds/shard.09999.mds", &b"stale"[..]);
    let jsonl = super::input("jsonl");
    let args = [s(&jsonl), "s3://packw/ds", "--size-limit", "8192"];
    ok(&pack_on(
        &fake,
        &[&args[..], &["--hashes", "sha1,xxh3_64"]].concat(),
    ));
    let source = shardfs::store::Source::parse("s3://packw/ds").unwrap();
    let store = DestStore::open(&source, &fake.options()).unwrap();
    let theirs = reference("jsonl");
    let names: Vec<String> = list_recursive(&store)
        .unwrap()
        .into_iter()
        .map(|(n, _)| n)
        .collect();
    assert_eq!(
        names,
        files_under(&theirs),
        "the stale shard was not deleted"
    );
    for n in &names {
        assert!(
            store.get(n).unwrap() == std::fs::read(theirs.join(n)).unwrap(),
            "{n} differs from MDSWriter's"
        );
    }
    // Every file went up with a CRC64NVME of its body, which the server checked.
    let checked = fake.checked_puts();
    assert!(
        checked >= names.len() as u64,
        "{checked} checked uploads for {} files",
        names.len()
    );
    // Above the threshold a shard goes up as a multipart upload (each part with its checksum)
    // and reads back whole.
    let big: Vec<u8> = (0..MULTIPART_THRESHOLD + 3_000_000)
        .map(|i| (i % 251) as u8)
        .collect();
    store.put("shard.00000.mds", &big).unwrap();
    assert!(store.get("shard.00000.mds").unwrap() == big);
    let parts = big.len().div_ceil(shardfs::store::put::PART_SIZE) as u64;
    assert_eq!(fake.checked_puts(), checked + parts);
}

/// The status line and body of a PUT of `body` to a presigned `url` with
/// `x-amz-checksum-crc64nvme: crc`.
fn put_with_crc(url: &url::Url, body: &[u8], crc: &str) -> String {
    use std::io::{Read, Write};
    let host = format!("{}:{}", url.host_str().unwrap(), url.port().unwrap());
    let mut conn = std::net::TcpStream::connect(&host).unwrap();
    let target = format!("{}?{}", url.path(), url.query().unwrap_or(""));
    let head = format!(
        "PUT {target} HTTP/1.1\r\nHost: {host}\r\nContent-Length: {}\r\n\
         x-amz-checksum-crc64nvme: {crc}\r\nConnection: close\r\n\r\n",
        body.len()
    );
    conn.write_all(head.as_bytes()).unwrap();
    conn.write_all(body).unwrap();
    let mut answer = String::new();
    conn.read_to_string(&mut answer).unwrap();
    answer
}

#[test]
fn an_upload_whose_crc64nvme_does_not_match_its_body_is_refused() {
    use base64::Engine;
    use object_store::signer::Signer;
    let fake = FakeS3::start();
    fake.put("crc", "seed", &b""[..]);
    let s3 = client(&fake, "crc");
    let rt = tokio::runtime::Runtime::new().unwrap();
    let crc_of = |data: &[u8]| {
        let crc = crc_fast::checksum(crc_fast::CrcAlgorithm::Crc64Nvme, data);
        base64::engine::general_purpose::STANDARD.encode(crc.to_be_bytes())
    };
    let path = ObjPath::from("obj");
    let url = rt
        .block_on(s3.signed_url(http::Method::PUT, &path, Duration::from_secs(300)))
        .unwrap();
    // The checksum of other bytes: refused, nothing stored.
    let answer = put_with_crc(&url, b"the body", &crc_of(b"another body"));
    assert!(answer.contains("BadDigest"), "{answer}");
    assert!(rt.block_on(s3.get(&path)).is_err(), "a refused PUT stored");
    assert_eq!(fake.checked_puts(), 0);
    // The body's own checksum: stored.
    let answer = put_with_crc(&url, b"the body", &crc_of(b"the body"));
    assert!(answer.starts_with("HTTP/1.1 200"), "{answer}");
    let got = rt.block_on(async { s3.get(&path).await.unwrap().bytes().await.unwrap() });
    assert_eq!(&got[..], b"the body");
    assert_eq!(fake.checked_puts(), 1);
}

#[test]
fn the_test_s3_server_checks_multipart_uploads_as_s3_does() {
    let fake = FakeS3::start();
    fake.put("multi", "seed", &b""[..]);
    let s3 = client(&fake, "multi");
    let rt = tokio::runtime::Runtime::new().unwrap();
    rt.block_on(async {
        let path = ObjPath::from("a/obj");
        let five_mib: Vec<u8> = (0..5 << 20).map(|i| (i % 253) as u8).collect();
        // Parts in order, each but the last at least 5 MiB: the object is their bytes.
        let id = s3.create_multipart(&path).await.unwrap();
        let p1 = s3
            .put_part(&path, &id, 0, PutPayload::from(five_mib.clone()))
            .await
            .unwrap();
        let p2 = s3
            .put_part(&path, &id, 1, PutPayload::from(b"tail".to_vec()))
            .await
            .unwrap();
        assert!(
            s3.get(&path).await.is_err(),
            "an object appeared before its upload completed"
        );
        s3.complete_multipart(&path, &id, vec![p1, p2])
            .await
            .unwrap();
        let got = s3.get(&path).await.unwrap().bytes().await.unwrap();
        assert_eq!(got.len(), five_mib.len() + 4);
        assert!(got[..five_mib.len()] == five_mib[..] && &got[five_mib.len()..] == b"tail");

        // A small part that is not the last: refused, nothing stored.
        let small = ObjPath::from("small");
        let id = s3.create_multipart(&small).await.unwrap();
        let mut parts = Vec::new();
        for i in 0..2 {
            let part = PutPayload::from(vec![7u8; 1024]);
            parts.push(s3.put_part(&small, &id, i, part).await.unwrap());
        }
        let err = s3.complete_multipart(&small, &id, parts).await.unwrap_err();
        assert!(err.to_string().contains("EntityTooSmall"), "{err}");
        assert!(s3.get(&small).await.is_err());

        // An aborted upload takes no more parts and leaves no object.
        let gone = ObjPath::from("gone");
        let id = s3.create_multipart(&gone).await.unwrap();
        let part = PutPayload::from(vec![1u8; 10]);
        s3.put_part(&gone, &id, 0, part).await.unwrap();
        s3.abort_multipart(&gone, &id).await.unwrap();
        let part = PutPayload::from(vec![1u8; 10]);
        let err = s3.put_part(&gone, &id, 1, part).await.unwrap_err();
        assert!(err.to_string().contains("NoSuchUpload"), "{err}");
        assert!(s3.get(&gone).await.is_err());

        // A PUT replaces an object; a delete removes it (and a second one is no error).
        let err = s3
            .put(&ObjPath::from("a/obj"), PutPayload::from(b"new".to_vec()))
            .await
            .map(|_| ());
        assert!(err.is_ok(), "a PUT over an object failed: {err:?}");
        let got = s3.get(&path).await.unwrap().bytes().await.unwrap();
        assert_eq!(&got[..], b"new");
        s3.delete(&path).await.unwrap();
        assert!(s3.get(&path).await.is_err());
        s3.delete(&path).await.unwrap();
    });
}

#[test]
fn uploads_pay_the_emulated_link_as_downloads_do() {
    // 8 MB/s per connection: 2 MB takes at least ~0.25 s each way, whatever the load (a lower
    // bound only: a loaded machine may be slower).
    let link = shardfs_testkit::s3::serve::Link {
        bytes_per_sec: Some(8e6),
        ..Default::default()
    };
    let fake = FakeS3::start_linked("127.0.0.1", EtagMode::Opaque, link);
    fake.put("linked", "seed", &b""[..]);
    let s3 = client(&fake, "linked");
    let rt = tokio::runtime::Runtime::new().unwrap();
    rt.block_on(async {
        let data = vec![3u8; 2_000_000];
        let path = ObjPath::from("obj");
        let t = Instant::now();
        s3.put(&path, PutPayload::from(data.clone())).await.unwrap();
        let up = t.elapsed();
        let t = Instant::now();
        let got = s3.get(&path).await.unwrap().bytes().await.unwrap();
        let down = t.elapsed();
        assert!(got == data);
        let floor = Duration::from_millis(220);
        assert!(up >= floor, "a 2 MB upload at 8 MB/s took {up:?}");
        assert!(down >= floor, "a 2 MB download at 8 MB/s took {down:?}");
    });
}

#[test]
fn an_s3_to_s3_pack_of_objects_of_many_ranges_matches_the_local_pack() {
    // Objects of several read-ahead ranges (1 MiB first, then 8 MiB), read as one chain whose
    // read-ahead crosses from one object into the next; whole and as a part that starts inside
    // the second object.
    let tmp = tempfile::tempdir().unwrap();
    let rows = tmp.path().join("rows");
    std::fs::create_dir_all(&rows).unwrap();
    let row = |i: usize| format!("{{\"id\": {i}, \"t\": \"{}\"}}\n", "xy".repeat(20 + i % 50));
    let a: String = (0..30_000).map(row).collect();
    let b: String = (30_000..140_000).map(row).collect();
    std::fs::write(rows.join("a.jsonl"), &a).unwrap();
    std::fs::write(rows.join("b.jsonl"), &b).unwrap();
    assert!(
        b.len() > (8 << 20) && a.len() > (1 << 20),
        "b.jsonl should span several ranges"
    );
    let fake = FakeS3::start();
    fake.put_dir("chain", "rows", &rows);
    let store = |url: &str| {
        let source = shardfs::store::Source::parse(url).unwrap();
        DestStore::open(&source, &fake.options()).unwrap()
    };
    for (name, extra) in [("whole", &[][..]), ("part", &["--part", "1/3"][..])] {
        let url = format!("s3://chain/out-{name}");
        let args = [
            "s3://chain/rows",
            &url,
            "--size-limit",
            "1MiB",
            "--threads",
            "2",
        ];
        ok(&pack_on(&fake, &[&args[..], extra].concat()));
        let local = tmp.path().join(format!("local-{name}"));
        let mut args = vec![s(&rows), s(&local), "--size-limit", "1MiB"];
        args.extend_from_slice(extra);
        ok(&super::pack(&args));
        let (local, remote) = match extra.is_empty() {
            true => (local, store(&url)),
            false => (
                local.join("part-00001"),
                store(&format!("{url}/part-00001")),
            ),
        };
        let names: Vec<String> = list_recursive(&remote)
            .unwrap()
            .into_iter()
            .map(|(n, _)| n)
            .collect();
        assert_eq!(names, files_under(&local), "{name}");
        for n in &names {
            assert!(
                remote.get(n).unwrap() == std::fs::read(local.join(n)).unwrap(),
                "{name}: {n} differs from the local pack's"
            );
        }
    }
}
