"""Validates packaging/kubernetes/**/*.yaml against the Kubernetes API schemas.

Every document is checked with kubernetes-validate (strict: unknown fields are errors). Kinds
the schemas do not know (Kubeflow's PyTorchJob) have each pod template checked as a Pod. Prints,
as one JSON line per CSI volume found, the volume's attributes and mount options, so the Rust
test can check that the plugin accepts them.
Usage: python validate.py KUBERNETES_VERSION FILE...
"""
import json
import sys

import kubernetes_validate
import yaml

version, files = sys.argv[1], sys.argv[2:]
failures = 0


def check(doc, where):
    global failures
    try:
        kubernetes_validate.validate(doc, version, strict=True)
    except kubernetes_validate.ValidationError as e:
        failures += 1
        print(f"INVALID {where}: {e.message} at {'.'.join(map(str, e.path))}", file=sys.stderr)


def csi_volumes(node):
    if isinstance(node, dict):
        if "csi" in node and isinstance(node["csi"], dict) and "driver" in node["csi"]:
            yield node["csi"]
        for v in node.values():
            yield from csi_volumes(v)
    elif isinstance(node, list):
        for v in node:
            yield from csi_volumes(v)


for path in files:
    with open(path) as f:
        docs = [d for d in yaml.safe_load_all(f) if d]
    for i, doc in enumerate(docs):
        where = f"{path}#{i} {doc.get('kind')}/{doc.get('metadata', {}).get('name')}"
        if doc.get("kind") == "PyTorchJob":
            for role, spec in doc["spec"]["pytorchReplicaSpecs"].items():
                pod = {
                    "apiVersion": "v1",
                    "kind": "Pod",
                    "metadata": {"name": f"{doc['metadata']['name']}-{role.lower()}-0"},
                    "spec": spec["template"]["spec"],
                }
                check(pod, f"{where} {role} pod template")
        else:
            check(doc, where)
        for vol in csi_volumes(doc):
            print(json.dumps({
                "file": path,
                "driver": vol["driver"],
                "attributes": vol.get("volumeAttributes", {}),
                "mountOptions": doc.get("spec", {}).get("mountOptions", []) if doc.get("kind") == "PersistentVolume" else [],
            }))
        print(f"valid {where}", file=sys.stderr)

sys.exit(1 if failures else 0)
