package localnode

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"time"

	"github.com/onsi/ginkgo/v2"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"sigs.k8s.io/controller-runtime/pkg/client"

	slicerv1alpha1 "github.com/slicer-operator/slicer/api/v1alpha1"
)

// DigestFile is where a failed spec's digest is appended, under the repository root; .ci/run
// prints its last lines after a failure, where CI's short excerpt of the output shows them.
const DigestFile = ".local/e2e-failure-digest.txt"

// digestWidth bounds one digest line: CI shows a few lines, each read whole.
const digestWidth = 300

// ReportIfFailed runs ReportFailure for the current spec when it failed; the suites call it
// from a top-level AfterEach, before the next spec or the suite's cleanup changes the cluster.
func ReportIfFailed(ctx context.Context, root string, c client.Client, cs kubernetes.Interface) {
	r := ginkgo.CurrentSpecReport()
	if !r.Failed() || c == nil || cs == nil {
		return
	}
	ReportFailure(ctx, root, r.FullText(), c, cs, func(s string) { fmt.Fprint(ginkgo.GinkgoWriter, s) })
}

// ReportFailure writes, for a spec that failed, the cluster's state in a few lines: the pods
// that are neither Running nor Succeeded with why (their waiting reason and last Warning
// event), the SliceAllocations that are not Ready with their reason, and the last errors of
// Slicer's agent and scheduler. It prints them to out and appends them to DigestFile under
// root. Reading the cluster may fail (it may be what broke): that is written instead.
func ReportFailure(ctx context.Context, root, spec string, c client.Client, cs kubernetes.Interface, out func(string)) {
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	lines := []string{fmt.Sprintf("FAILED %q at %s:", spec, time.Now().UTC().Format(time.TimeOnly))}
	lines = append(lines, podLines(ctx, cs)...)
	lines = append(lines, allocationLines(ctx, c)...)
	lines = append(lines, componentErrors(ctx, cs, "slicer-agent", "slicer-scheduler")...)
	for i, l := range lines {
		if len(l) > digestWidth {
			lines[i] = l[:digestWidth-3] + "..."
		}
	}
	text := strings.Join(lines, "\n") + "\n"
	out(text)
	path := filepath.Join(root, DigestFile)
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		out(fmt.Sprintf("digest: %v", err))
		return
	}
	f, err := os.OpenFile(path, os.O_APPEND|os.O_CREATE|os.O_WRONLY, 0o644)
	if err != nil {
		out(fmt.Sprintf("digest: %v", err))
		return
	}
	defer f.Close()
	if _, err := f.WriteString(text); err != nil {
		out(fmt.Sprintf("digest: %v", err))
	}
}

// podLines names each pod that is not Running or Succeeded, in every namespace.
func podLines(ctx context.Context, cs kubernetes.Interface) []string {
	pods, err := cs.CoreV1().Pods("").List(ctx, metav1.ListOptions{})
	if err != nil {
		return []string{"pods: " + err.Error()}
	}
	warnings := lastWarnings(ctx, cs)
	var out []string
	for i := range pods.Items {
		p := &pods.Items[i]
		if p.Status.Phase == corev1.PodRunning || p.Status.Phase == corev1.PodSucceeded {
			continue
		}
		l := fmt.Sprintf("pod %s/%s %s node=%q", p.Namespace, p.Name, p.Status.Phase, p.Spec.NodeName)
		if p.Status.Reason != "" {
			l += fmt.Sprintf(" reason=%s: %s", p.Status.Reason, p.Status.Message)
		}
		for _, s := range append(append([]corev1.ContainerStatus(nil), p.Status.InitContainerStatuses...), p.Status.ContainerStatuses...) {
			if w := s.State.Waiting; w != nil {
				l += fmt.Sprintf(" %s waiting %s: %s", s.Name, w.Reason, w.Message)
			}
		}
		if w, ok := warnings[p.Namespace+"/"+p.Name]; ok {
			l += " | last warning " + w
		}
		out = append(out, l)
	}
	sort.Strings(out)
	return out
}

// lastWarnings maps "namespace/name" of a pod to its latest Warning event, "Reason: message".
func lastWarnings(ctx context.Context, cs kubernetes.Interface) map[string]string {
	evs, err := cs.CoreV1().Events("").List(ctx, metav1.ListOptions{FieldSelector: "type=Warning,involvedObject.kind=Pod"})
	if err != nil {
		return nil
	}
	latest := map[string]corev1.Event{}
	for _, e := range evs.Items {
		k := e.InvolvedObject.Namespace + "/" + e.InvolvedObject.Name
		if old, ok := latest[k]; !ok || eventTime(e).After(eventTime(old)) {
			latest[k] = e
		}
	}
	out := map[string]string{}
	for k, e := range latest {
		out[k] = e.Reason + ": " + e.Message
	}
	return out
}

func eventTime(e corev1.Event) time.Time {
	switch {
	case !e.LastTimestamp.IsZero():
		return e.LastTimestamp.Time
	case !e.EventTime.IsZero():
		return e.EventTime.Time
	}
	return e.CreationTimestamp.Time
}

// allocationLines names each SliceAllocation that is not Ready.
func allocationLines(ctx context.Context, c client.Client) []string {
	var l slicerv1alpha1.SliceAllocationList
	if err := c.List(ctx, &l); err != nil {
		return []string{"slice allocations: " + err.Error()}
	}
	var out []string
	for _, a := range l.Items {
		if a.Status.State == slicerv1alpha1.AllocationReady {
			continue
		}
		out = append(out, fmt.Sprintf("allocation %s/%s pod=%s %s %s@%d state=%q %s: %s", a.Namespace, a.Name, a.Spec.PodName,
			a.Spec.GPUUUID, a.Spec.Profile, a.Spec.Placement.Start, a.Status.State, a.Status.Reason, a.Status.Message))
	}
	sort.Strings(out)
	return out
}

// maxErrorLines bounds the log lines kept per component.
const maxErrorLines = 4

// componentErrors is the last error lines of each pod whose name starts with one of the
// prefixes (Slicer's components run as pods on the local node).
func componentErrors(ctx context.Context, cs kubernetes.Interface, prefixes ...string) []string {
	pods, err := cs.CoreV1().Pods("").List(ctx, metav1.ListOptions{})
	if err != nil {
		return nil
	}
	var out []string
	for _, p := range pods.Items {
		for _, prefix := range prefixes {
			if !strings.HasPrefix(p.Name, prefix) {
				continue
			}
			tail := int64(400)
			raw, err := cs.CoreV1().Pods(p.Namespace).GetLogs(p.Name, &corev1.PodLogOptions{TailLines: &tail}).DoRaw(ctx)
			if err != nil {
				out = append(out, fmt.Sprintf("log %s: %v", p.Name, err))
				continue
			}
			var errs []string
			for _, line := range strings.Split(string(raw), "\n") {
				if (strings.Contains(line, `"level":"error"`) || strings.HasPrefix(line, "E")) && !noise(line) {
					errs = append(errs, line)
				}
			}
			if len(errs) > maxErrorLines {
				errs = errs[len(errs)-maxErrorLines:]
			}
			for _, e := range errs {
				out = append(out, p.Name+": "+e)
			}
		}
	}
	return out
}

// noise reports a component's error line that says nothing about a failed spec: the
// scheduler's complaint, on every resync, that the local control plane has no request-header
// CA (it authenticates no front proxy).
func noise(line string) bool {
	return strings.Contains(line, "configmap_cafile_content.go")
}
