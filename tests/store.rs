//! `store`: one conformance suite run against a local folder, `file://` and a real S3 server
//! (moto on loopback), plus error messages and fault handling.

use crate::common::emulators;
use crate::common::moto::{moto, s3_options};
use crate::common::{files_under, fixtures, mds_datasets};
use shardfs::store::{
    self, BlockingStore, CountingStore, Fault, FaultyStore, ObjectKey, ResilientStore, Store,
    StoreError, StoreOptions,
};
use std::path::Path;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

fn key(s: &str) -> ObjectKey {
    ObjectKey::new(s).unwrap()
}

/// Everything a store must do for a dataset root whose objects are the files under `dir`.
fn conformance(store: &BlockingStore, dir: &Path) {
    conformance_reads(store, dir);
    let files = files_under(dir);
    let mut listed: Vec<(String, u64)> = store
        .list(None)
        .unwrap()
        .into_iter()
        .map(|o| (o.key.to_string(), o.size))
        .collect();
    listed.sort();
    let want: Vec<(String, u64)> = files
        .iter()
        .map(|f| (f.clone(), std::fs::metadata(dir.join(f)).unwrap().len()))
        .collect();
    assert_eq!(listed, want);
}

/// Every file's whole-object GET carries the store's own checksum of it (GCS `x-goog-hash`,
/// Azure `Content-MD5`), and that checksum holds for the bytes and fails for damaged ones:
/// what protects datasets whose index.json lists no hashes.
fn store_checksums_hold(store: &BlockingStore, dir: &Path) {
    for f in files_under(dir) {
        let fetched = store.get_fetched(&key(&f)).unwrap();
        let sums = fetched.store_sums;
        assert!(!sums.is_empty(), "{f}: the store sent no checksum header");
        sums.check(&fetched.bytes).unwrap();
        let mut damaged = fetched.bytes.to_vec();
        if let Some(b) = damaged.first_mut() {
            *b ^= 1;
            assert!(sums.check(&damaged).is_err(), "{f}");
        }
    }
}

/// The read half of the conformance suite: head, get, ranged gets and not-found errors of every
/// file (stores without listing, such as plain HTTP, pass only this).
fn conformance_reads(store: &BlockingStore, dir: &Path) {
    let files = files_under(dir);
    assert!(!files.is_empty());
    for rel in &files {
        let k = key(rel);
        let want = std::fs::read(dir.join(rel)).unwrap();
        assert_eq!(
            store.head(&k).unwrap().size,
            want.len() as u64,
            "head {rel}"
        );
        let got = store.get(&k).unwrap();
        assert_eq!(&got[..], &want[..], "get {rel}");
        // Ranged reads: the MDS header pattern (4 bytes, then the offsets), a middle slice, the tail.
        let n = want.len() as u64;
        for r in [
            0..4.min(n),
            4.min(n)..(4 + 4 * 3).min(n),
            n / 3..(n / 2).max(n / 3),
            n.saturating_sub(7)..n,
        ] {
            let got = store.get_range(&k, r.clone()).unwrap();
            assert_eq!(
                &got[..],
                &want[r.start as usize..r.end as usize],
                "range {r:?} of {rel}"
            );
        }
        let e = store.get_range(&k, 0..n + 10).unwrap_err();
        assert!(e.to_string().contains(rel.as_ref() as &str), "{e}");
    }
    let missing = store.get(&key("no/such/shard.mds")).unwrap_err();
    assert!(missing.is_not_found(), "{missing:?}");
    let text = missing.to_string();
    assert!(
        text.contains("no/such/shard.mds") && text.contains("not found"),
        "{text}"
    );
    assert!(store.head(&key("nope.json")).unwrap_err().is_not_found());
}

fn blocking(store: Arc<dyn Store>) -> BlockingStore {
    BlockingStore::new(store, 2).unwrap()
}

#[test]
fn local_paths_and_file_urls_pass_the_conformance_suite() {
    for ds in mds_datasets() {
        conformance(
            &blocking(store::open(ds.to_str().unwrap(), &StoreOptions::default()).unwrap()),
            &ds,
        );
    }
    let ds = fixtures().join("mds/merged");
    let url = url::Url::from_file_path(&ds).unwrap();
    conformance(
        &blocking(store::open(url.as_str(), &StoreOptions::default()).unwrap()),
        &ds,
    );
}

#[test]
fn moto_s3_passes_the_conformance_suite_for_every_fixture() {
    let moto = moto();
    for ds in mds_datasets() {
        let name = ds.file_name().unwrap().to_str().unwrap();
        moto.upload_dir("conformance", &format!("datasets/{name}"), &ds);
        let src = format!("s3://conformance/datasets/{name}/");
        let store = store::open(&src, &s3_options(&moto.endpoint)).unwrap();
        conformance(&blocking(store), &ds);
    }
}

#[test]
fn plain_http_passes_the_conformance_suite_for_every_fixture() {
    // Public-read objects of the S3 server, fetched as plain http:// URLs (no signing).
    let moto = moto();
    for ds in mds_datasets() {
        let name = ds.file_name().unwrap().to_str().unwrap();
        moto.upload_dir_public("conformance-http", &format!("datasets/{name}"), &ds);
        let src = format!("{}/conformance-http/datasets/{name}/", moto.endpoint);
        let store = blocking(store::open(&src, &StoreOptions::default()).unwrap());
        conformance_reads(&store, &ds);
        // Plain HTTP has no listing (shardfs never needs one): a clear error, not a panic.
        let e = store.list(None).unwrap_err();
        assert!(e.to_string().contains("conformance-http"), "{e}");
    }
}

/// Every MDS fixture on the GCS emulator `gcs`, each with a store rooted at it.
fn gcs_fixture_stores(
    gcs: &emulators::Emulator,
) -> impl Iterator<Item = (std::path::PathBuf, BlockingStore)> + '_ {
    let opts = StoreOptions {
        endpoint_url: Some(gcs.endpoint.clone()),
        ..StoreOptions::default()
    };
    mds_datasets().into_iter().map(move |ds| {
        let src = format!(
            "gs://{}/{}/",
            emulators::BUCKET,
            emulators::dataset_prefix(&ds)
        );
        let store = blocking(store::open(&src, &opts).unwrap());
        (ds, store)
    })
}

#[test]
fn gcs_emulator_passes_the_conformance_suite_for_every_fixture() {
    for (ds, store) in gcs_fixture_stores(emulators::gcs()) {
        conformance(&store, &ds);
        store_checksums_hold(&store, &ds);
    }
}

#[test]
fn gcp_storage_emulator_without_dates_or_etags_passes_the_conformance_reads() {
    // gcp-storage-emulator sends neither Last-Modified nor ETag (object_store's GCS client
    // requires both), answers HEAD with 501 and has no XML listing.
    for (ds, store) in gcs_fixture_stores(emulators::gcs_stub()) {
        conformance_reads(&store, &ds);
        store_checksums_hold(&store, &ds);
        // No ETag is made up for it.
        assert_eq!(store.head(&key("index.json")).unwrap().e_tag, None);
        // Listing (only `shardfs pack` lists) fails at once with the reason, not retried.
        let started = std::time::Instant::now();
        let e = store.list(None).unwrap_err();
        assert!(e.to_string().contains("does not implement"), "{e}");
        assert!(started.elapsed() < std::time::Duration::from_secs(1), "{e}");
    }
}

#[test]
fn azurite_passes_the_conformance_suite_for_every_fixture() {
    let az = emulators::azurite();
    // object_store reads Azurite's settings from the environment; only az:// sources (this
    // test's) look at these variables.
    for (k, v) in az.azure_env() {
        std::env::set_var(k, v);
    }
    for ds in mds_datasets() {
        let src = format!(
            "az://{}/{}/",
            emulators::BUCKET,
            emulators::dataset_prefix(&ds)
        );
        let store = blocking(store::open(&src, &StoreOptions::default()).unwrap());
        conformance(&store, &ds);
        store_checksums_hold(&store, &ds);
    }
}

#[test]
fn gcs_and_azure_errors_name_their_own_settings_and_are_not_retried() {
    // An unknown host: one attempt, and the GCS settings in the message.
    let opts = StoreOptions {
        endpoint_url: Some("http://no-such-host.invalid:9".into()),
        ..StoreOptions::default()
    };
    let started = std::time::Instant::now();
    let s = blocking(store::open("gs://b/ds", &opts).unwrap());
    let text = s.get(&key("index.json")).unwrap_err().to_string();
    assert!(text.contains("unknown host"), "{text}");
    assert!(text.contains("STORAGE_EMULATOR_HOST"), "{text}");
    assert!(!text.contains("AWS_"), "{text}");
    assert!(!text.contains("gave up after"), "retried: {text}");
    assert!(started.elapsed() < std::time::Duration::from_secs(5));
    // A missing GCS object through the emulator is not found, not an S3 hint.
    let gcs = emulators::gcs();
    let opts = StoreOptions {
        endpoint_url: Some(gcs.endpoint.clone()),
        ..StoreOptions::default()
    };
    let s = blocking(store::open("gs://conformance/nothing-here", &opts).unwrap());
    assert!(s.get(&key("index.json")).unwrap_err().is_not_found());
    // Azure (through the CLI, to control the environment): an unknown account host names
    // Azure's settings, once.
    let out = std::process::Command::new(crate::mount::bin())
        .args(["inspect", "az://c/ds", "--endpoint-url"])
        .arg("http://no-such-host.invalid/devstoreaccount1")
        .env_remove("AZURE_STORAGE_USE_EMULATOR")
        .env("AZURE_STORAGE_ACCOUNT_NAME", "devstoreaccount1")
        .env("AZURE_STORAGE_ACCOUNT_KEY", "Eby8vdM02xNOcqFlqUwJPLlmEtlCDXJ1OUzFT50uSRZ6IFsuFq2UVErCz4I6tq/K1SZFPTOtr/KBHBeksoGMGw==")
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success());
    assert!(
        text.contains("unknown host") && text.contains("AZURE_STORAGE"),
        "{text}"
    );
    assert!(
        !text.contains("AWS_") && !text.contains("gave up after"),
        "{text}"
    );
    // Without an account at all: a configuration error naming Azure's setting.
    let out = std::process::Command::new(crate::mount::bin())
        .args(["inspect", "az://c/ds"])
        .env_remove("AZURE_STORAGE_USE_EMULATOR")
        .env_remove("AZURE_STORAGE_ACCOUNT_NAME")
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stderr);
    assert!(text.contains("AZURE_STORAGE_ACCOUNT_NAME"), "{text}");
}

#[test]
fn missing_bucket_and_key_and_wrong_endpoint_say_what_and_where() {
    let moto = moto();
    moto.put("errors-bucket", "ds/index.json", b"{}");
    let opts = s3_options(&moto.endpoint);

    let s = blocking(store::open("s3://no-such-bucket-here/ds", &opts).unwrap());
    let e = s.get(&key("index.json")).unwrap_err();
    let text = e.to_string();
    assert!(e.is_not_found(), "{e:?}");
    assert!(
        text.contains("s3://no-such-bucket-here/ds/index.json"),
        "{text}"
    );
    assert!(text.contains("bucket does not exist"), "{text}");

    let s = blocking(store::open("s3://errors-bucket/ds", &opts).unwrap());
    assert_eq!(&s.get(&key("index.json")).unwrap()[..], b"{}");
    let e = s.get(&key("missing.json")).unwrap_err();
    assert_eq!(
        e.to_string(),
        "s3://errors-bucket/ds/missing.json: not found"
    );

    // Nothing listens on a fresh port: connection refused, retried, then "unreachable".
    let dead = format!("http://127.0.0.1:{}", crate::common::moto::free_port());
    let s = blocking(store::open("s3://errors-bucket/ds", &s3_options(&dead)).unwrap());
    let e = s.get(&key("index.json")).unwrap_err();
    let text = e.to_string();
    assert!(
        matches!(e, StoreError::RetriesExhausted { attempts: 4, .. }),
        "{e:?}"
    );
    assert!(
        matches!(e.root_cause(), StoreError::Unreachable { .. }),
        "{e:?}"
    );
    assert!(
        text.contains("endpoint unreachable") && text.contains("--endpoint-url"),
        "{text}"
    );
    assert!(text.contains("s3://errors-bucket/ds/index.json"), "{text}");
}

#[test]
fn keys_cannot_escape_the_dataset_root() {
    for bad in ["../secret", "/etc/passwd", "a/../../b", "a//b"] {
        assert!(
            matches!(ObjectKey::new(bad), Err(StoreError::InvalidKey { .. })),
            "{bad}"
        );
    }
    // A sibling file next to the dataset root stays unreachable through the store.
    let tmp = tempfile::tempdir().unwrap();
    std::fs::create_dir(tmp.path().join("ds")).unwrap();
    std::fs::write(tmp.path().join("secret"), b"x").unwrap();
    std::fs::write(tmp.path().join("ds/index.json"), b"{}").unwrap();
    let s = blocking(
        store::open(
            tmp.path().join("ds").to_str().unwrap(),
            &StoreOptions::default(),
        )
        .unwrap(),
    );
    let listed: Vec<String> = s
        .list(None)
        .unwrap()
        .into_iter()
        .map(|o| o.key.to_string())
        .collect();
    assert_eq!(listed, vec!["index.json".to_string()]);
}

#[test]
fn bad_sources_are_rejected_with_the_reason() {
    let e = store::open("ftp://x/y", &StoreOptions::default()).unwrap_err();
    assert!(e.to_string().contains("unsupported scheme"), "{e}");
    let e = store::open("/definitely/not/here", &StoreOptions::default()).unwrap_err();
    assert!(
        e.to_string().contains("/definitely/not/here")
            && e.to_string().contains("no such directory"),
        "{e}"
    );
    let opts = StoreOptions {
        endpoint_url: Some("not a url".into()),
        ..Default::default()
    };
    let e = store::open("s3://b/p", &opts).unwrap_err();
    assert!(e.to_string().contains("endpoint URL"), "{e}");
}

/// A fixture dataset behind counting + fault injection + the retry layer, as `open` builds it.
fn faulty_stack(opts: &StoreOptions) -> (Arc<FaultyStore>, Arc<CountingStore>, BlockingStore) {
    let ds = fixtures().join("mds/basic");
    let backend =
        store::ObjectStoreBackend::open(&store::Source::parse(ds.to_str().unwrap()).unwrap(), opts)
            .unwrap();
    let counting = Arc::new(CountingStore::new(Arc::new(backend)));
    let faulty = Arc::new(FaultyStore::new(counting.clone()));
    let resilient = Arc::new(ResilientStore::new(faulty.clone(), opts));
    (faulty, counting, blocking(resilient))
}

fn fast_retries(max_retries: u32) -> StoreOptions {
    StoreOptions {
        max_retries,
        initial_backoff: std::time::Duration::from_millis(5),
        max_backoff: std::time::Duration::from_millis(50),
        ..Default::default()
    }
}

#[test]
fn transient_faults_are_retried_and_persistent_ones_are_typed() {
    let (faulty, counting, s) = faulty_stack(&fast_retries(4));
    let k = key("shard.00000.mds");
    let want = std::fs::read(fixtures().join("mds/basic/shard.00000.mds")).unwrap();
    faulty.inject(Fault::SlowDown, Some("shard.00000.mds"), Some(2));
    faulty.inject(Fault::ConnectionReset, Some("shard.00000.mds"), Some(1));
    faulty.inject(Fault::ServerError, Some("shard.00000.mds"), Some(1));
    assert_eq!(&s.get(&k).unwrap()[..], &want[..]);
    assert_eq!(faulty.fired(), 4);
    assert_eq!(
        counting.for_key("shard.00000.mds").gets,
        1,
        "faults fire before the inner store"
    );

    // A truncated ranged body is a short body: retried, and the right bytes come back.
    faulty.inject(Fault::Truncate, Some("shard.00000.mds"), Some(1));
    assert_eq!(&s.get_range(&k, 100..300).unwrap()[..], &want[100..300]);

    // Persistent throttling exhausts the retries with a typed error naming the object.
    faulty.inject(Fault::SlowDown, None, None);
    let e = s.get(&k).unwrap_err();
    match &e {
        StoreError::RetriesExhausted { attempts, last, .. } => {
            assert_eq!(*attempts, 5);
            assert!(matches!(
                **last,
                StoreError::Transient {
                    kind: store::TransientKind::Throttled,
                    ..
                }
            ));
        }
        other => panic!("unexpected {other:?}"),
    }
    assert!(
        e.to_string().contains("shard.00000.mds") && e.to_string().contains("throttled"),
        "{e}"
    );

    // Not-found is permanent: no retries.
    faulty.clear();
    counting.reset();
    assert!(s.get(&key("nope")).unwrap_err().is_not_found());
    assert_eq!(counting.for_key("nope").gets, 1);
}

#[test]
fn slow_requests_time_out_and_are_retried() {
    let opts = StoreOptions {
        request_timeout: std::time::Duration::from_millis(100),
        ..fast_retries(2)
    };
    let (faulty, counting, s) = faulty_stack(&opts);
    let k = key("index.json");
    faulty.inject(
        Fault::Latency(std::time::Duration::from_secs(5)),
        Some("index.json"),
        Some(1),
    );
    let start = std::time::Instant::now();
    assert!(s.get(&k).is_ok());
    assert!(
        start.elapsed() < std::time::Duration::from_secs(2),
        "{:?}",
        start.elapsed()
    );
    assert_eq!(counting.for_key("index.json").gets, 1);
    faulty.inject(
        Fault::Latency(std::time::Duration::from_secs(5)),
        None,
        None,
    );
    let e = s.get(&k).unwrap_err();
    assert!(
        matches!(
            e.root_cause(),
            StoreError::Transient {
                kind: store::TransientKind::Timeout,
                ..
            }
        ),
        "{e:?}"
    );
}

#[test]
fn concurrency_is_bounded() {
    let opts = StoreOptions {
        max_concurrency: 2,
        ..fast_retries(0)
    };
    let (faulty, _counting, s) = faulty_stack(&opts);
    faulty.inject(
        Fault::Latency(std::time::Duration::from_millis(200)),
        None,
        None,
    );
    let start = std::time::Instant::now();
    let handles: Vec<_> = (0..6)
        .map(|i| {
            let s = s.clone();
            std::thread::spawn(move || s.get(&key(&format!("shard.0000{i}.mds"))).unwrap().len())
        })
        .collect();
    for h in handles {
        assert!(h.join().unwrap() > 0);
    }
    // 6 requests of 200 ms with 2 at a time take at least 3 rounds.
    assert!(
        start.elapsed() >= std::time::Duration::from_millis(590),
        "{:?}",
        start.elapsed()
    );
}

mod sigv4_server {
    use super::*;
    use crate::common::FakeS3Options;
    use shardfs_testkit::s3::{FakeS3, ServerFault};

    fn dataset_on(server: &FakeS3) -> std::path::PathBuf {
        let ds = fixtures().join("mds/merged");
        server.put_dir("bkt", "sub/merged", &ds);
        ds
    }

    #[test]
    fn s3s_server_passes_the_conformance_suite_with_sigv4() {
        let server = FakeS3::start();
        let ds = dataset_on(&server);
        let s = blocking(store::open("s3://bkt/sub/merged", &server.options()).unwrap());
        conformance(&s, &ds);
        // Ranged reads are ranged on the wire.
        let before = server.seen("sub/merged/index.json");
        s.get_range(&key("index.json"), 0..10).unwrap();
        let after = server.seen("sub/merged/index.json");
        assert_eq!(after.range_gets, before.range_gets + 1);
        assert_eq!(after.bytes - before.bytes, 10);
    }

    /// Small bodies (a ranged sample the memory tier keeps) own a buffer of their size: a
    /// zero-copy slice of the HTTP client's read buffer would keep that whole buffer (hundreds
    /// of KiB) alive while the memory tier counts only the slice.
    #[test]
    fn bodies_own_a_buffer_of_their_size() {
        let server = FakeS3::start();
        server.put("bkt", "ds/shard.00000.mds", vec![7u8; 300_000]);
        let s = blocking(store::open("s3://bkt/ds", &server.options()).unwrap());
        let capacity = |b: bytes::Bytes| match b.try_into_mut() {
            Ok(m) => m.capacity(),
            Err(_) => usize::MAX, // still shared with another owner
        };
        for range in [0..10u64, 1000..21_000, 0..300_000] {
            let b = s.get_range(&key("shard.00000.mds"), range.clone()).unwrap();
            assert_eq!(b.len() as u64, range.end - range.start);
            let len = b.len();
            assert_eq!(
                capacity(b),
                len,
                "{range:?}: the body sits in a larger buffer"
            );
        }
        let whole = s.get(&key("shard.00000.mds")).unwrap();
        assert_eq!(capacity(whole), 300_000);
    }

    #[test]
    fn wrong_secret_is_access_denied_without_retries() {
        let server = FakeS3::start();
        dataset_on(&server);
        let mut opts = server.options();
        opts.credentials.as_mut().unwrap().secret_access_key = "wrong".into();
        let s = blocking(store::open("s3://bkt/sub/merged", &opts).unwrap());
        let e = s.get(&key("index.json")).unwrap_err();
        let text = e.to_string();
        assert!(matches!(e, StoreError::AccessDenied { .. }), "{e:?}");
        assert!(
            text.contains("SignatureDoesNotMatch")
                && text.contains("s3://bkt/sub/merged/index.json"),
            "{text}"
        );
        assert!(text.contains("credentials"), "{text}");

        let mut opts = server.options();
        opts.credentials.as_mut().unwrap().access_key_id = "nobody".into();
        let s = blocking(store::open("s3://bkt/sub/merged", &opts).unwrap());
        let e = s.head(&key("index.json")).unwrap_err();
        assert!(matches!(e, StoreError::AccessDenied { .. }), "{e:?}");
        assert_eq!(server.seen_total().gets, 0, "nothing was served");
    }

    #[test]
    fn protocol_faults_are_survived() {
        let server = FakeS3::start();
        let ds = dataset_on(&server);
        let s = blocking(store::open("s3://bkt/sub/merged", &server.options()).unwrap());
        let rel = "0/shard.00000.mds";
        let full = format!("sub/merged/{rel}");
        let want = std::fs::read(ds.join(rel)).unwrap();
        for fault in [
            ServerFault::SlowDown,
            ServerFault::InternalError,
            ServerFault::Reset,
            ServerFault::Truncate,
        ] {
            server.inject(fault.clone(), Some(&full), Some(1));
            let before = server.seen(&full).gets;
            assert_eq!(&s.get(&key(rel)).unwrap()[..], &want[..], "{fault:?}");
            assert_eq!(
                server.seen(&full).gets,
                before + 2,
                "{fault:?}: one failed attempt, one retry"
            );
        }
        // Truncated ranged bodies too.
        server.inject(ServerFault::Truncate, Some(&full), Some(2));
        assert_eq!(
            &s.get_range(&key(rel), 8..4000.min(want.len() as u64))
                .unwrap()[..],
            &want[8..4000.min(want.len())]
        );
        // Persistent 503s end in a typed error.
        server.inject(ServerFault::SlowDown, Some(&full), None);
        let e = s.get(&key(rel)).unwrap_err();
        assert!(matches!(e, StoreError::RetriesExhausted { .. }), "{e:?}");
        assert!(
            matches!(
                e.root_cause(),
                StoreError::Transient {
                    kind: store::TransientKind::Throttled,
                    ..
                }
            ),
            "{e:?}"
        );
        assert!(
            e.to_string()
                .contains(&format!("s3://bkt/sub/merged/{rel}")),
            "{e}"
        );
    }
}

mod cli {
    //! `shardfs inspect` and `shardfs cat` on remote sources (the binary, as a user runs it).
    use super::*;
    use crate::common::shardfs_bin;
    use base64::Engine;
    use shardfs_testkit::s3::{FakeS3, ACCESS_KEY, SECRET_KEY};
    use std::process::{Command, Output};

    fn shardfs(args: &[&str], key: &str, secret: &str) -> Output {
        Command::new(shardfs_bin())
            .args(args)
            .env("AWS_ACCESS_KEY_ID", key)
            .env("AWS_SECRET_ACCESS_KEY", secret)
            .env("AWS_REGION", "us-east-1")
            .env_remove("AWS_ENDPOINT_URL")
            .env_remove("S3_ENDPOINT_URL")
            .env_remove("AWS_PROFILE")
            .output()
            .unwrap()
    }

    fn inspect_json(args: &[&str], key: &str, secret: &str) -> serde_json::Value {
        let o = shardfs(args, key, secret);
        assert!(
            o.status.success(),
            "{args:?}: {}",
            String::from_utf8_lossy(&o.stderr)
        );
        let mut v: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
        v.as_object_mut().unwrap().remove("source");
        v
    }

    /// (column name, raw bytes) of sample `g` from expected.jsonl.
    fn expected_raw(ds: &Path, g: usize) -> Vec<(String, Vec<u8>)> {
        let text = std::fs::read_to_string(ds.join("expected.jsonl")).unwrap();
        let v: serde_json::Value = serde_json::from_str(text.lines().nth(g).unwrap()).unwrap();
        v.as_object()
            .unwrap()
            .iter()
            .map(|(k, c)| {
                (
                    k.clone(),
                    base64::engine::general_purpose::STANDARD
                        .decode(c["raw"].as_str().unwrap())
                        .unwrap(),
                )
            })
            .collect()
    }

    #[test]
    fn inspect_and_cat_work_on_s3_and_http_sources() {
        let moto = moto();
        for ds in mds_datasets() {
            let name = ds.file_name().unwrap().to_str().unwrap();
            moto.upload_dir_public("cli-fixtures", name, &ds);
            let local = inspect_json(&["inspect", ds.to_str().unwrap(), "--json"], "test", "test");
            let s3 = format!("s3://cli-fixtures/{name}");
            let http = format!("{}/cli-fixtures/{name}", moto.endpoint);
            let remote = inspect_json(
                &["inspect", &s3, "--json", "--endpoint-url", &moto.endpoint],
                "test",
                "test",
            );
            assert_eq!(local, remote, "{name}");
            let over_http = inspect_json(&["inspect", &http, "--json"], "test", "test");
            assert_eq!(local, over_http, "{name}");
            let unsigned = inspect_json(
                &[
                    "inspect",
                    &s3,
                    "--json",
                    "--endpoint-url",
                    &moto.endpoint,
                    "--no-sign-request",
                ],
                "",
                "",
            );
            assert_eq!(local, unsigned, "{name}");
            let samples = local["samples"].as_u64().unwrap() as usize;
            for g in [0, samples / 2, samples - 1] {
                for (col, want) in expected_raw(&ds, g) {
                    let gs = g.to_string();
                    for src in [s3.as_str(), http.as_str()] {
                        let args = [
                            "cat",
                            src,
                            &gs,
                            "--column",
                            &col,
                            "--raw",
                            "--endpoint-url",
                            &moto.endpoint,
                        ];
                        let o = shardfs(&args, "test", "test");
                        assert!(
                            o.status.success(),
                            "{args:?}: {}",
                            String::from_utf8_lossy(&o.stderr)
                        );
                        assert_eq!(o.stdout, want, "{name} sample {g} column {col} via {src}");
                    }
                }
            }
        }
    }

    #[test]
    fn cat_of_an_uncompressed_remote_shard_reads_only_header_and_sample_ranges() {
        let server = FakeS3::start();
        let ds = fixtures().join("mds/basic");
        server.put_dir("bkt", "basic", &ds);
        // Sample 250 lives in shard 2 or 3 of "basic"; find which through the index.
        let index =
            shardfs::mds::Index::parse(&std::fs::read(ds.join("index.json")).unwrap()).unwrap();
        let (shard, i) = index.locate(250).unwrap();
        let basename = &index.shards()[shard].raw.basename;
        let want = &expected_raw(&ds, 250)
            .into_iter()
            .find(|(c, _)| c == "text")
            .unwrap()
            .1;
        let o = shardfs(
            &[
                "cat",
                "s3://bkt/basic",
                "250",
                "--column",
                "text",
                "--raw",
                "--endpoint-url",
                &server.endpoint,
            ],
            ACCESS_KEY,
            SECRET_KEY,
        );
        assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
        assert_eq!(&o.stdout, want);
        let seen = server.seen(&format!("basic/{basename}"));
        // The header twice at once (compared: no checksum covers a range), then the sample
        // twice at once.
        assert_eq!(
            (seen.gets, seen.range_gets),
            (0, 4),
            "sample {i} of {basename}: {seen:?}"
        );
        let header = shardfs::mds::header_len(index.shards()[shard].samples);
        assert!(
            seen.bytes < 2 * header + 2 * 4096,
            "only header and one sample were read: {seen:?}"
        );
        let total = server.seen_total();
        assert_eq!(total.gets, 1, "only index.json is fetched whole: {total:?}");
    }

    #[test]
    fn bad_credentials_and_missing_datasets_are_one_line_errors() {
        let server = FakeS3::start();
        server.put_dir("bkt", "basic", &fixtures().join("mds/basic"));
        let o = shardfs(
            &[
                "inspect",
                "s3://bkt/basic",
                "--endpoint-url",
                &server.endpoint,
            ],
            ACCESS_KEY,
            "wrong",
        );
        assert!(!o.status.success());
        let e = String::from_utf8_lossy(&o.stderr);
        assert_eq!(e.trim_end().lines().count(), 1, "{e}");
        assert!(
            e.contains("access denied") && e.contains("s3://bkt/basic/index.json"),
            "{e}"
        );
        let o = shardfs(
            &[
                "inspect",
                "s3://bkt/nothing-here",
                "--endpoint-url",
                &server.endpoint,
            ],
            ACCESS_KEY,
            SECRET_KEY,
        );
        let e = String::from_utf8_lossy(&o.stderr);
        assert!(
            !o.status.success() && e.contains("s3://bkt/nothing-here/index.json: not found"),
            "{e}"
        );
    }
}

/// A loopback HTTP server whose connections misbehave in turn: the first never answers, the
/// second sends the headers and a few body bytes and then goes silent, later ones answer
/// `body` whole. Returns its endpoint and the number of requests it has seen.
fn stalling_server(body: &'static [u8]) -> (String, Arc<AtomicUsize>) {
    use std::io::{BufRead, BufReader, Write};
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let endpoint = format!("http://{}", listener.local_addr().unwrap());
    let seen = Arc::new(AtomicUsize::new(0));
    let counter = seen.clone();
    std::thread::spawn(move || {
        for conn in listener.incoming() {
            let Ok(mut conn) = conn else { return };
            let counter = counter.clone();
            std::thread::spawn(move || {
                let mut reader = BufReader::new(conn.try_clone().unwrap());
                loop {
                    let mut line = String::new();
                    // The request head (a GET has no body).
                    loop {
                        line.clear();
                        if reader.read_line(&mut line).unwrap_or(0) == 0 {
                            return;
                        }
                        if line == "\r\n" {
                            break;
                        }
                    }
                    let n = counter.fetch_add(1, Ordering::SeqCst);
                    let head = format!(
                        "HTTP/1.1 200 OK\r\nContent-Length: {}\r\nETag: \"0123\"\r\n\
                         Last-Modified: Wed, 25 Nov 2026 00:00:00 GMT\r\n\r\n",
                        body.len()
                    );
                    match n {
                        0 => std::thread::sleep(std::time::Duration::from_secs(3600)),
                        1 => {
                            let _ = conn.write_all(head.as_bytes());
                            let _ = conn.write_all(&body[..4]);
                            std::thread::sleep(std::time::Duration::from_secs(3600));
                        }
                        _ => {
                            let _ = conn.write_all(head.as_bytes());
                            let _ = conn.write_all(body);
                        }
                    }
                }
            });
        }
    });
    (endpoint, seen)
}

/// A connection that goes silent (before the answer, or in the middle of the body) is given up
/// after `stall_timeout` and the request retried, long before the per-request timeout.
#[test]
fn stalled_connections_are_abandoned_and_retried() {
    const BODY: &[u8] = b"the bytes of a shard, served on the third try";
    let (endpoint, seen) = stalling_server(BODY);
    let opts = StoreOptions {
        // Without the stall timeout the first attempt would wait for an hour.
        request_timeout: std::time::Duration::from_secs(3600),
        stall_timeout: std::time::Duration::from_millis(300),
        ..fast_retries(3)
    };
    let s = store::open("s3://bucket/data", &s3_options_with(&endpoint, opts)).unwrap();
    let s = blocking(s);
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let _ = tx.send(s.get(&key("shard.00000.mds")).map(|b| b.to_vec()));
    });
    let got = rx
        .recv_timeout(std::time::Duration::from_secs(60))
        .expect("a stalled GET was not abandoned");
    assert_eq!(got.unwrap(), BODY);
    assert_eq!(seen.load(Ordering::SeqCst), 3);
}

/// `opts` with the loopback S3 endpoint and the test credentials of [`s3_options`].
fn s3_options_with(endpoint: &str, opts: StoreOptions) -> StoreOptions {
    let base = s3_options(endpoint);
    StoreOptions {
        endpoint_url: base.endpoint_url,
        region: base.region,
        credentials: base.credentials,
        ..opts
    }
}

/// A TLS server on loopback with the certificate of `tests/tls/` (signed by a CA nobody
/// trusts unless told to) that answers every request 404, and how many TLS connections and
/// HTTP requests it has seen.
fn tls_server() -> (String, Arc<AtomicUsize>, Arc<AtomicUsize>) {
    use rustls::pki_types::{CertificateDer, PrivateKeyDer, PrivatePkcs8KeyDer};
    use std::io::{Read, Write};
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/tls");
    let cert = CertificateDer::from(std::fs::read(dir.join("cert.der")).unwrap());
    let key = PrivateKeyDer::Pkcs8(PrivatePkcs8KeyDer::from(
        std::fs::read(dir.join("key.pk8.der")).unwrap(),
    ));
    let config = Arc::new(
        rustls::ServerConfig::builder_with_provider(Arc::new(
            rustls::crypto::ring::default_provider(),
        ))
        .with_safe_default_protocol_versions()
        .unwrap()
        .with_no_client_auth()
        .with_single_cert(vec![cert], key)
        .unwrap(),
    );
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port();
    let (connections, requests) = (Arc::new(AtomicUsize::new(0)), Arc::new(AtomicUsize::new(0)));
    let (c, r) = (Arc::clone(&connections), Arc::clone(&requests));
    std::thread::spawn(move || {
        for tcp in listener.incoming().flatten() {
            c.fetch_add(1, Ordering::SeqCst);
            let (config, r) = (Arc::clone(&config), Arc::clone(&r));
            std::thread::spawn(move || {
                let conn = rustls::ServerConnection::new(config).unwrap();
                let mut tls = rustls::StreamOwned::new(conn, tcp);
                let mut head = Vec::new();
                let mut byte = [0u8; 1];
                // The handshake happens on the first read; a client that refuses the
                // certificate ends the connection there.
                while !head.ends_with(b"\r\n\r\n") {
                    match tls.read(&mut byte) {
                        Ok(1) => head.push(byte[0]),
                        _ => return,
                    }
                }
                r.fetch_add(1, Ordering::SeqCst);
                let _ = tls.write_all(
                    b"HTTP/1.1 404 Not Found\r\ncontent-length: 0\r\nconnection: close\r\n\r\n",
                );
                let _ = tls.flush();
            });
        }
    });
    (format!("https://localhost:{port}"), connections, requests)
}

#[test]
fn an_untrusted_tls_certificate_fails_at_once_and_a_trusted_ca_file_fixes_it() {
    let (endpoint, connections, requests) = tls_server();
    let opts = StoreOptions {
        endpoint_url: Some(endpoint.clone()),
        no_sign_request: true,
        ..StoreOptions::default()
    };
    let started = std::time::Instant::now();
    let s = blocking(store::open("s3://b/ds", &opts).unwrap());
    let err = s.get(&key("index.json")).unwrap_err();
    let text = err.to_string();
    assert!(
        matches!(err.root_cause(), StoreError::UntrustedCertificate { .. }),
        "{err:?}"
    );
    assert!(
        text.contains("TLS certificate is not trusted") && text.contains("SSL_CERT_FILE"),
        "{text}"
    );
    assert!(!text.contains("gave up after"), "retried: {text}");
    assert_eq!(connections.load(Ordering::SeqCst), 1, "{text}");
    assert_eq!(requests.load(Ordering::SeqCst), 0);
    assert!(started.elapsed() < std::time::Duration::from_secs(5));

    // The CLI with the test CA in SSL_CERT_FILE: the handshake succeeds and the request
    // reaches the server (which has no dataset: a not-found error, not a certificate one).
    let out = std::process::Command::new(crate::mount::bin())
        .args([
            "inspect",
            "s3://b/ds",
            "--no-sign-request",
            "--endpoint-url",
        ])
        .arg(&endpoint)
        .env(
            "SSL_CERT_FILE",
            Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/tls/ca.pem"),
        )
        .env_remove("SSL_CERT_DIR")
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success());
    assert!(!text.contains("certificate"), "{text}");
    assert!(requests.load(Ordering::SeqCst) >= 1, "{text}");
}

#[test]
fn a_system_without_ca_certificates_is_named_as_the_cause() {
    // /etc/ssl hidden behind an empty tmpfs in a mount namespace of its own (root, as the
    // tests run): what a bare container or a host without ca-certificates looks like. The
    // client cannot be built even for plain http, and the error must say why.
    let out = std::process::Command::new("unshare")
        .args([
            "-m",
            "sh",
            "-c",
            // No /etc/ssl at all is a system without CA certificates already.
            "if [ -d /etc/ssl ]; then mount -t tmpfs none /etc/ssl || exit 1; fi; \
             exec \"$0\" \"$@\"",
        ])
        .arg(crate::mount::bin())
        .args([
            "inspect",
            "s3://b/ds",
            "--no-sign-request",
            "--endpoint-url",
        ])
        .arg("http://127.0.0.1:9")
        .env_remove("SSL_CERT_FILE")
        .env_remove("SSL_CERT_DIR")
        .output()
        .expect("unshare (util-linux) runs");
    let text = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "{text}");
    assert!(
        text.contains("without CA certificates") && text.contains("ca-certificates"),
        "{text}"
    );
}
