package plugin

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"strings"

	"k8s.io/apimachinery/pkg/types"
)

// What a pod's tenant reads about other tenants (docs/design/threat-model.md, "What the
// scheduler tells a tenant"). The Pending reason, the Events and the plan record of a pod are
// read by whoever may read pods of its namespace, so they name pods of that namespace only:
// another namespace's pods are counted, never named, and no UID of another namespace's object
// is written. Where the scheduler must recognise another tenant's pod again (a plan record read
// after a restart), it keeps a digest (podKey, ownerKey), which tells whether a pod is the one
// recorded but not which pod it is. The scheduler's own log, read by administrators, names
// every pod.

// podsFor lists pods (each "namespace/name") as the tenant of namespace ns may read them: at
// most max pods of ns by name, in their order, then how many more of ns there are, then how
// many belong to other namespaces.
func podsFor(ns string, pods []string, max int) []string {
	var out []string
	own, others := 0, 0
	for _, p := range pods {
		switch {
		case !inNamespace(ns, p):
			others++
		case own < max:
			out = append(out, p)
			own++
		default:
			own++
		}
	}
	if own > max {
		out = append(out, fmt.Sprintf("%d more", own-max))
	}
	if others > 0 {
		out = append(out, countOthers(others))
	}
	return out
}

// podFor names one pod ("namespace/name") for the tenant of namespace ns: "pod ns/name" when it
// is of ns, "a pod of another namespace" otherwise.
func podFor(ns, pod string) string {
	if inNamespace(ns, pod) {
		return "pod " + pod
	}
	return "a pod of another namespace"
}

// countOthers is "1 pod of another namespace" or "N pods of other namespaces".
func countOthers(n int) string {
	if n == 1 {
		return "1 pod of another namespace"
	}
	return fmt.Sprintf("%d pods of other namespaces", n)
}

func inNamespace(ns, pod string) bool { return ns != "" && strings.HasPrefix(pod, ns+"/") }

// podKey is the digest by which a plan record names a moved pod: of its UID.
func podKey(uid types.UID) string { return digest("pod", string(uid)) }

// ownerKey is the digest by which a plan record names a moved pod's controller: of the moved
// pod's namespace and the controller's UID, which is what its replacement must match
// (pledge.replacedBy).
func ownerKey(namespace string, owner types.UID) string {
	return digest("owner", namespace, string(owner))
}

// digest is a SHA-256 of the parts (each ended by a zero byte, after a label for what they
// are), 128 bits of it in hex. A UID is random (122 bits), so the digest of one cannot be turned
// back into it, and one who already knows a UID learns only whether it is the one recorded.
func digest(label string, parts ...string) string {
	h := sha256.New()
	h.Write([]byte("slicer.dev/defragmentation-record/" + label + "\x00"))
	for _, p := range parts {
		h.Write([]byte(p + "\x00"))
	}
	return hex.EncodeToString(h.Sum(nil)[:16])
}
