//! The Kubernetes manifests in packaging/kubernetes: the kustomize base and overlays render
//! with `kubectl kustomize` and validate against the API schemas (kubernetes-validate,
//! strict), as do the examples; the image is set in one place and fully qualified; the
//! liveness probe is wired to the sidecar; inline volumes are off unless an overlay turns them
//! on; and every CSI volume in them is one the plugin accepts.

use std::collections::HashMap;
use std::path::PathBuf;
use std::process::Command;

fn render_and_validate(root: &std::path::Path, inputs: &[String]) -> Vec<serde_json::Value> {
    let python = crate::common::python_with_numpy();
    let out = Command::new(&python)
        .arg(root.join("tests/kubernetes/validate.py"))
        .arg("1.30.0")
        .args(inputs)
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        out.status.success(),
        "manifests do not render or validate (kubernetes-validate and kubectl come with `bash tests/run.sh`):\n{stderr}"
    );
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect()
}

fn strings(v: &serde_json::Value) -> Vec<String> {
    serde_json::from_value(v.clone()).unwrap()
}

#[test]
fn manifests_validate_and_their_volumes_are_accepted_by_the_plugin() {
    let root = PathBuf::from(env!("CARGO_MANIFEST_DIR"));
    let k8s = root.join("packaging/kubernetes");
    let mut inputs: Vec<String> = ["base", "overlays/example", "overlays/metrics"]
        .iter()
        .map(|d| format!("kustomize:{}", k8s.join(d).display()))
        .collect();
    let mut examples: Vec<String> = std::fs::read_dir(k8s.join("examples"))
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|x| x == "yaml"))
        .map(|p| p.display().to_string())
        .collect();
    examples.sort();
    assert!(examples.len() >= 4, "{examples:?}");
    inputs.extend(examples);
    let lines = render_and_validate(&root, &inputs);

    // The rendered installs.
    let daemonsets: HashMap<String, &serde_json::Value> = lines
        .iter()
        .filter_map(|l| {
            let dir = l["kustomize"].as_str()?;
            Some((dir.rsplit("kubernetes/").next().unwrap().to_string(), l))
        })
        .collect();
    assert_eq!(daemonsets.len(), 3, "{lines:?}");
    let known = shardfs::cli::mount_flag_names();
    for (name, ds) in &daemonsets {
        // Liveness: kubelet's probe reaches the sidecar's health port.
        assert_eq!(ds["liveness_path"], "/healthz", "{name}: {ds}");
        assert!(ds["liveness_port"].is_u64(), "{name}: {ds}");
        assert_eq!(
            ds["liveness_port"], ds["sidecar_health_port"],
            "{name}: {ds}"
        );
        // Every image names its registry: no `docker.io/library/…` by accident.
        for image in strings(&ds["images"]) {
            let host = image.split('/').next().unwrap();
            assert!(
                image.contains('/') && (host.contains('.') || host.contains(':')),
                "{name}: image {image} names no registry"
            );
        }
        // The plugin's arguments parse as `shardfs csi` arguments (the last repeat wins).
        let args = strings(&ds["args"]);
        let mut argv = vec!["shardfs".to_string()];
        argv.extend(args.iter().map(|a| a.replace("$(NODE_NAME)", "node-1")));
        use clap::Parser;
        shardfs::cli::Cli::try_parse_from(&argv)
            .unwrap_or_else(|e| panic!("{name}: {argv:?}: {e}"));
        let inline = args
            .iter()
            .rev()
            .find_map(|a| a.strip_prefix("--inline-volumes="));
        let host_cgroupfs = args.iter().any(|a| a.starts_with("--host-cgroupfs="));
        assert!(
            host_cgroupfs,
            "{name}: daemons must leave the pod's cgroup and network"
        );
        match name.as_str() {
            "base" => {
                assert_eq!(inline, Some("off"), "{name}");
                assert!(strings(&ds["images"])[0].starts_with("registry.example.com/shardfs:"));
            }
            "overlays/example" => {
                assert_eq!(inline, Some("own-credentials"), "{name}");
                assert_eq!(
                    strings(&ds["images"])[0],
                    "123456789012.dkr.ecr.us-east-1.amazonaws.com/shardfs:0.1.0"
                );
                assert!(args.contains(&"--daemon-memory-max=64GiB".to_string()));
            }
            _ => assert_eq!(
                ds["host_network"], true,
                "{name}: PodMonitor needs the node's IP"
            ),
        }
        let _ = &known;
    }
    // The PodMonitor scrapes a port the plugin pods declare.
    let monitor = lines
        .iter()
        .find(|l| l["podmonitor"].is_string())
        .expect("no PodMonitor rendered");
    let metrics = daemonsets["overlays/metrics"];
    for port in strings(&monitor["ports"]) {
        assert!(metrics["ports"].get(&port).is_some(), "{port}: {metrics}");
    }
    // Every object of an install lands in the one namespace (cluster-scoped ones aside).
    for l in lines.iter().filter(|l| l["rendered"].is_string()) {
        for kind in strings(&l["kinds"]) {
            let (k, ns) = kind.split_once('/').unwrap();
            let cluster_scoped = ["Namespace", "CSIDriver"].contains(&k);
            assert_eq!(ns.is_empty(), cluster_scoped, "{kind} in {}", l["rendered"]);
            if !cluster_scoped {
                assert_eq!(ns, "shardfs-system", "{kind}");
            }
        }
    }

    // Every CSI volume is one the plugin accepts.
    let mut volumes = 0;
    for v in lines.iter().filter(|l| l["driver"].is_string()) {
        assert_eq!(v["driver"], "csi.shardfs.dev", "{v}");
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
    assert!(volumes >= 5, "found {volumes} CSI volumes");
}
