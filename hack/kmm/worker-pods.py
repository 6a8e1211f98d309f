#!/usr/bin/env python3
"""Prints every KMM worker Pod in a `kubectl get --watch --output-watch-events
-o json` stream (hack/kmm/run.sh): what each container runs, its security
context, the host paths mounted, and how each container terminated."""
import json, sys
dec, text, i, seen = json.JSONDecoder(), open(sys.argv[1]).read(), 0, {}
while i < len(text):
    while i < len(text) and text[i].isspace(): i += 1
    if i >= len(text): break
    ev, i = dec.raw_decode(text, i)
    p = ev["object"]
    key = (p["metadata"]["name"], p["metadata"]["uid"])
    if key not in seen:
        seen[key] = 1
        s = p["spec"]
        print(f"  {p['metadata']['name']} action={p['metadata']['labels'].get('kmm.node.kubernetes.io/worker-action')}")
        for c in s.get("initContainers", []) + s["containers"]:
            print(f"    {c['name']}: image={c['image']} command={c.get('command')} args={c.get('args')} securityContext={c.get('securityContext')}")
        print("    hostPaths: " + ", ".join(v["hostPath"]["path"] for v in s["volumes"] if "hostPath" in v))
    for st in p.get("status", {}).get("initContainerStatuses", []) + p.get("status", {}).get("containerStatuses", []):
        t = st.get("state", {}).get("terminated")
        if t and seen.get(key + (st["name"],)) is None:
            seen[key + (st["name"],)] = 1
            print(f"    {st['name']} terminated: exitCode={t['exitCode']} reason={t.get('reason')}")
