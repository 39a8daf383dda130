//! The Kubernetes manifests in packaging/kubernetes validate against the API schemas
//! (kubernetes-validate, strict), and every CSI volume in them is one the plugin accepts.

use std::collections::HashMap;
use std::path::PathBuf;
use std::process::Command;

#[test]
fn manifests_validate_and_their_volumes_are_accepted_by_the_plugin() {
    let root = PathBuf::from(env!("CARGO_MANIFEST_DIR"));
    let mut files: Vec<PathBuf> = Vec::new();
    for dir in ["packaging/kubernetes", "packaging/kubernetes/examples"] {
        for e in std::fs::read_dir(root.join(dir)).unwrap() {
            let p = e.unwrap().path();
            if p.extension().is_some_and(|x| x == "yaml") {
                files.push(p);
            }
        }
    }
    files.sort();
    assert!(files.len() >= 6, "{files:?}");
    let python = crate::common::python_with_numpy();
    let out = Command::new(&python)
        .arg(root.join("tests/kubernetes/validate.py"))
        .arg("1.30.0")
        .args(&files)
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        out.status.success(),
        "manifests do not validate (kubernetes-validate comes with `bash tests/run.sh`):\n{stderr}"
    );
    let known = shardfs::cli::mount_flag_names();
    let mut volumes = 0;
    for line in String::from_utf8_lossy(&out.stdout).lines() {
        let v: serde_json::Value = serde_json::from_str(line).unwrap();
        assert_eq!(v["driver"], "csi.shardfs.dev", "{line}");
        let mut attrs: HashMap<String, String> =
            serde_json::from_value(v["attributes"].clone()).unwrap();
        // What kubelet adds for an inline volume of a pod (podInfoOnMount).
        attrs.insert("csi.storage.k8s.io/pod.name".into(), "bert-worker-0".into());
        let options: Vec<String> = serde_json::from_value(v["mountOptions"].clone()).unwrap();
        let req =
            shardfs::csi::attributes::mount_request(&attrs, &options, &HashMap::new(), &known)
                .unwrap_or_else(|e| panic!("{}: {e}", v["file"]));
        assert!(!req.source.is_empty());
        volumes += 1;
    }
    assert!(volumes >= 4, "found {volumes} CSI volumes");
}
