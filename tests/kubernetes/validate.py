"""Validates the Kubernetes manifests of packaging/kubernetes against the API schemas.

Every document is checked with kubernetes-validate (strict: unknown fields are errors). Kinds
the schemas do not know (Kubeflow's PyTorchJob, prometheus-operator's PodMonitor) get a check of
their own: PyTorchJob pod templates are checked as Pods; a PodMonitor must select the plugin's
pods and scrape a port they declare.
Arguments: KUBERNETES_VERSION, then files, and `kustomize:DIR` for a kustomization rendered with
`kubectl kustomize DIR`. Prints one JSON line per CSI volume found (its attributes and mount
options, so the Rust test checks that the plugin accepts them) and one per rendered
kustomization (its DaemonSet's images, plugin arguments and liveness wiring).
"""
import json
import subprocess
import sys

import kubernetes_validate
import yaml

version, inputs = sys.argv[1], sys.argv[2:]
failures = 0


def fail(msg):
    global failures
    failures += 1
    print(f"INVALID {msg}", file=sys.stderr)


def check(doc, where):
    try:
        kubernetes_validate.validate(doc, version, strict=True)
    except kubernetes_validate.ValidationError as e:
        fail(f"{where}: {e.message} at {'.'.join(map(str, e.path))}")


def csi_volumes(node):
    if isinstance(node, dict):
        if "csi" in node and isinstance(node["csi"], dict) and "driver" in node["csi"]:
            yield node["csi"]
        for v in node.values():
            yield from csi_volumes(v)
    elif isinstance(node, list):
        for v in node:
            yield from csi_volumes(v)


def daemonset_summary(ds, where):
    """The DaemonSet's images, the plugin's arguments and its liveness wiring."""
    spec = ds["spec"]["template"]["spec"]
    containers = {c["name"]: c for c in spec["containers"]}
    ports = {p["name"]: p["containerPort"] for c in spec["containers"] for p in c.get("ports", []) if "name" in p}
    plugin = containers.get("shardfs")
    if plugin is None:
        fail(f"{where}: no container named shardfs")
        return {}
    probe = plugin.get("livenessProbe", {}).get("httpGet")
    port = None
    if probe:
        port = probe["port"]
        port = ports.get(port, port) if isinstance(port, str) else port
    sidecar = containers.get("liveness-probe", {})
    health = [a.split("=", 1)[1] for a in sidecar.get("args", []) if a.startswith("--health-port=")]
    return {
        "images": [c["image"] for c in spec["containers"]],
        "args": plugin.get("args", []),
        "liveness_port": port,
        "liveness_path": probe.get("path") if probe else None,
        "sidecar_health_port": int(health[0]) if health else None,
        "host_network": spec.get("hostNetwork", False),
        "ports": ports,
    }


def check_docs(docs, source):
    out = []
    labels = {}
    for doc in docs:
        if doc.get("kind") == "DaemonSet":
            labels = doc["spec"]["template"]["metadata"].get("labels", {})
    for i, doc in enumerate(docs):
        where = f"{source}#{i} {doc.get('kind')}/{doc.get('metadata', {}).get('name')}"
        kind = doc.get("kind")
        if kind == "PyTorchJob":
            for role, spec in doc["spec"]["pytorchReplicaSpecs"].items():
                pod = {
                    "apiVersion": "v1",
                    "kind": "Pod",
                    "metadata": {"name": f"{doc['metadata']['name']}-{role.lower()}-0"},
                    "spec": spec["template"]["spec"],
                }
                check(pod, f"{where} {role} pod template")
        elif kind == "PodMonitor":
            sel = doc["spec"]["selector"]["matchLabels"]
            if not labels or any(labels.get(k) != v for k, v in sel.items()):
                fail(f"{where}: selector {sel} does not match the plugin pods' labels {labels}")
            out.append({"podmonitor": source, "ports": [e.get("port") for e in doc["spec"]["podMetricsEndpoints"]]})
        else:
            check(doc, where)
        if kind == "DaemonSet":
            out.append({"kustomize": source, **daemonset_summary(doc, where)})
        for vol in csi_volumes(doc):
            out.append({
                "file": source,
                "driver": vol["driver"],
                "attributes": vol.get("volumeAttributes", {}),
                "mountOptions": doc.get("spec", {}).get("mountOptions", []) if kind == "PersistentVolume" else [],
            })
        print(f"valid {where}", file=sys.stderr)
    return out


for item in inputs:
    if item.startswith("kustomize:"):
        folder = item.split(":", 1)[1]
        r = subprocess.run(["kubectl", "kustomize", folder], capture_output=True, text=True)
        if r.returncode != 0:
            fail(f"kubectl kustomize {folder}: {r.stderr.strip()}")
            continue
        docs = [d for d in yaml.safe_load_all(r.stdout) if d]
        lines = check_docs(docs, folder)
        lines.append({"rendered": folder, "kinds": sorted(f"{d['kind']}/{d['metadata'].get('namespace', '')}" for d in docs)})
    else:
        with open(item) as f:
            lines = check_docs([d for d in yaml.safe_load_all(f) if d], item)
    for line in lines:
        print(json.dumps(line))

sys.exit(1 if failures else 0)
