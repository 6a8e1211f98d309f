package dra

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"

	"github.com/slicer-operator/slicer/device-plugin/dra"
	"github.com/slicer-operator/slicer/test/builder"
)

// tenant creates namespace ns and a user bound to the stock edit ClusterRole in it, and
// returns a client acting as that user (rest.Config.Impersonate): a namespace editor. The
// edit role is filled as kube-controller-manager's ClusterRole aggregation controller fills it
// (envtest runs none): with the rules of the roles its aggregation rule selects.
func (h *harness) tenant(ns, user string) kubernetes.Interface {
	h.t.Helper()
	ctx := context.Background()
	edit, err := h.cs.RbacV1().ClusterRoles().Get(ctx, "edit", metav1.GetOptions{})
	if err != nil {
		h.t.Fatal(err)
	}
	edit.Rules = nil
	for _, sel := range edit.AggregationRule.ClusterRoleSelectors {
		l, err := h.cs.RbacV1().ClusterRoles().List(ctx, metav1.ListOptions{LabelSelector: metav1.FormatLabelSelector(&sel)})
		if err != nil {
			h.t.Fatal(err)
		}
		for _, r := range l.Items {
			edit.Rules = append(edit.Rules, r.Rules...)
		}
	}
	if _, err := h.cs.RbacV1().ClusterRoles().Update(ctx, edit, metav1.UpdateOptions{}); err != nil {
		h.t.Fatal(err)
	}
	if _, err := h.cs.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}, metav1.CreateOptions{}); err != nil {
		h.t.Fatal(err)
	}
	rb := &rbacv1.RoleBinding{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: user + "-edit"},
		Subjects: []rbacv1.Subject{{Kind: rbacv1.UserKind, APIGroup: rbacv1.GroupName, Name: user}},
		RoleRef:  rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: "edit"}}
	if _, err := h.cs.RbacV1().RoleBindings(ns).Create(ctx, rb, metav1.CreateOptions{}); err != nil {
		h.t.Fatal(err)
	}
	cfg := rest.CopyConfig(h.cfg)
	cfg.Impersonate = rest.ImpersonationConfig{UserName: user, Groups: []string{"system:authenticated"}}
	cs, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		h.t.Fatal(err)
	}
	return cs
}

// runningPod creates a pod bound to the node and reports it Running, as its kubelet would.
func (h *harness) runningPod(ns, name string) *corev1.Pod {
	h.t.Helper()
	ctx := context.Background()
	p, err := h.cs.CoreV1().Pods(ns).Create(ctx, builder.Pod(ns, name).Node(nodeName).Container("c", builder.None).Obj(), metav1.CreateOptions{})
	if err != nil {
		h.t.Fatal(err)
	}
	p.Status.Phase = corev1.PodRunning
	if p, err = h.cs.CoreV1().Pods(ns).UpdateStatus(ctx, p, metav1.UpdateOptions{}); err != nil {
		h.t.Fatal(err)
	}
	return p
}

// A namespace editor deletes the claim of its running pod and strips the claim's finalizer:
// the claim is gone from the API while the pod keeps using its MIG instance, so the stock
// scheduler sees the device free and allocates it to another namespace's claim. The node's
// record of what it prepared, for which claim, is the authority: the second claim is not
// prepared onto the live instance (its Prepare fails, with a Warning Event on the claim that
// names no other tenant, and the conflict counted), the instance survives the orphan sweep
// past its grace, and it is released only on evidence (the pod gone); the second claim then
// gets an instance of its own. docs/design/threat-model.md names this test.
func TestDeletedClaimKeepsItsInstance(t *testing.T) {
	h := newHarness(t)
	ctx := context.Background()
	const device = "gpu-0-3g-40gb-at-0"
	alice := h.tenant("tenant-a", "alice")
	if _, err := h.cs.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "tenant-b"}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}

	podA := h.runningPod("tenant-a", "pod-a")
	a := h.allocateFor(podA, "claim-a", device)
	h.prepare(a)
	live := h.instances()[device]
	if live == "" {
		t.Fatalf("no instance for %s after prepare: %v", device, h.instances())
	}

	// The tenant, with nothing but edit in its namespace, makes the claim vanish.
	if err := alice.ResourceV1().ResourceClaims("tenant-a").Delete(ctx, a.Name, metav1.DeleteOptions{}); err != nil {
		t.Fatalf("the namespace editor deletes its claim: %v", err)
	}
	if _, err := alice.ResourceV1().ResourceClaims("tenant-a").Patch(ctx, a.Name, types.MergePatchType, []byte(`{"metadata":{"finalizers":null}}`), metav1.PatchOptions{}); err != nil {
		t.Fatalf("the namespace editor strips the claim's finalizer: %v", err)
	}
	waitFor(t, "the claim gone from the API", func() (bool, error) {
		_, err := h.cs.ResourceV1().ResourceClaims("tenant-a").Get(ctx, a.Name, metav1.GetOptions{})
		return apierrors.IsNotFound(err), err
	})

	// The stock scheduler hands the device to another namespace's claim.
	podB := h.runningPod("tenant-b", "pod-b")
	b := h.allocateFor(podB, "claim-b", device)
	r := h.prepareResult(b)
	if r.Error == "" {
		t.Fatalf("claim-b was prepared onto the live instance of a deleted claim's running pod: %+v (instance %s)", r.Devices, live)
	}
	for _, leak := range []string{"tenant-a", "claim-a", string(a.UID), "pod-a"} {
		if strings.Contains(r.Error, leak) {
			t.Errorf("the error tenant-b's pod sees names the other tenant's %q: %s", leak, r.Error)
		}
	}
	if got := h.instances(); len(got) != 1 || got[device] != live {
		t.Fatalf("instances after the refused prepare: %v, want only %s = %s", got, device, live)
	}
	if n := testutil.ToFloat64(h.plugin.metrics.Conflicts); n != 1 {
		t.Errorf("slicer_agent_allocation_conflicts_total = %v, want 1", n)
	}
	waitFor(t, "a Warning Event on claim-b", func() (bool, error) {
		l, err := h.cs.EventsV1().Events("tenant-b").List(ctx, metav1.ListOptions{})
		if err != nil {
			return false, err
		}
		for _, e := range l.Items {
			if e.Regarding.Name == b.Name && e.Reason == dra.ReasonDevicePreparedForAnotherClaim && e.Type == corev1.EventTypeWarning &&
				!strings.Contains(e.Note, "tenant-a") {
				return true, nil
			}
		}
		return false, nil
	})

	// No sweep takes the instance while its pod runs, past the orphan grace too.
	sync := func() {
		t.Helper()
		if err := h.plugin.drv.Sync(ctx); err != nil {
			t.Fatal(err)
		}
	}
	sync()
	h.clock.Add(h.grace + time.Second)
	sync()
	if got := h.instances(); got[device] != live {
		t.Fatalf("the sweep destroyed the running pod's instance: %v", got)
	}
	if _, ok, err := h.cdi.ReadClaim(string(a.UID)); err != nil || !ok {
		t.Fatalf("the record of claim-a is gone while its pod runs: %v, %v", ok, err)
	}
	na, err := h.nodeAccelerator()
	if err != nil {
		t.Fatal(err)
	}
	if s := na.Status.GPUs[0].Slices; len(s) != 1 || s[0].Claim == nil || s[0].Claim.UID != string(a.UID) {
		t.Errorf("NodeAccelerator slices %+v: want the instance shown held by claim-a", s)
	}
	if r := h.prepareResult(b); r.Error == "" {
		t.Fatalf("claim-b prepared onto the live instance on the kubelet's retry: %+v", r.Devices)
	}

	// The pod goes: that is the evidence. The record is released and claim-b gets its own
	// instance.
	if err := h.cs.CoreV1().Pods("tenant-a").Delete(ctx, podA.Name, metav1.DeleteOptions{GracePeriodSeconds: new(int64)}); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "pod-a gone", func() (bool, error) {
		_, err := h.cs.CoreV1().Pods("tenant-a").Get(ctx, podA.Name, metav1.GetOptions{})
		return apierrors.IsNotFound(err), err
	})
	sync()
	if got := h.instances(); len(got) != 0 {
		t.Fatalf("instances once the pod is gone: %v, want none", got)
	}
	if _, ok, err := h.cdi.ReadClaim(string(a.UID)); err != nil || ok {
		t.Fatalf("claim-a's record once its pod is gone: %v, %v", ok, err)
	}
	h.prepare(b)
	if got := h.instances()[device]; got == "" || got == live {
		t.Fatalf("claim-b's instance %q: want a new one, not %s", got, live)
	}
	h.unprepare(b)
}
