package releasehook_test

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"strings"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	slicerv1alpha1 "github.com/slicer-operator/slicer/api/v1alpha1"
	"github.com/slicer-operator/slicer/operator/controller"
	"github.com/slicer-operator/slicer/operator/releasehook"
	"github.com/slicer-operator/slicer/test/framework"
)

// The hook runs against the real kube-apiserver (test/framework): the
// apiserver keeps a deleted Slicer while it has finalizers, which is what the
// hook waits on. No operator runs here; the tests play its part by writing the
// SlicesReleased condition and removing the finalizer.
var k8s client.Client

func TestMain(m *testing.M) {
	env, err := framework.Start(framework.Options{WithoutExternalCRDs: true})
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	k8s = env.Client
	code := m.Run()
	if err := env.Stop(); err != nil {
		fmt.Fprintln(os.Stderr, err)
	}
	os.Exit(code)
}

const release, releaseNS = "slicer", "default"

func options(timeout time.Duration) releasehook.Options {
	return releasehook.Options{ReleaseName: release, ReleaseNamespace: releaseNS, Finalizer: controller.Finalizer,
		Timeout: timeout, Poll: 100 * time.Millisecond}
}

// createSlicer creates a Slicer with the operator's finalizer, annotated as
// release's when release is not empty; the test removes what is left.
func createSlicer(t *testing.T, name, rel string) *slicerv1alpha1.Slicer {
	t.Helper()
	s := &slicerv1alpha1.Slicer{ObjectMeta: metav1.ObjectMeta{Name: name, Finalizers: []string{controller.Finalizer}}}
	if rel != "" {
		s.Annotations = map[string]string{releasehook.ReleaseNameAnnotation: rel, releasehook.ReleaseNamespaceAnnotation: releaseNS}
	}
	if err := k8s.Create(context.Background(), s); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { finish(t, name) })
	return s
}

// finish plays the operator's end of the teardown: it removes the finalizer.
func finish(t *testing.T, name string) {
	ctx := context.Background()
	var s slicerv1alpha1.Slicer
	if err := k8s.Get(ctx, client.ObjectKey{Name: name}, &s); err != nil {
		return
	}
	s.Finalizers = nil
	if err := k8s.Update(ctx, &s); err != nil {
		t.Errorf("remove the finalizer of %s: %v", name, err)
	}
	_ = k8s.Delete(ctx, &s)
}

// deleting waits until the Slicer has a deletion timestamp: the hook deleted it.
func deleting(t *testing.T, name string) *slicerv1alpha1.Slicer {
	t.Helper()
	for range 100 {
		var s slicerv1alpha1.Slicer
		if err := k8s.Get(context.Background(), client.ObjectKey{Name: name}, &s); err != nil {
			t.Fatal(err)
		}
		if s.DeletionTimestamp != nil {
			return &s
		}
		time.Sleep(50 * time.Millisecond)
	}
	t.Fatalf("Slicer %s was not deleted", name)
	return nil
}

// The hook deletes the release's Slicer and returns once the operator's
// finalizer is gone, not before.
func TestDeletesTheReleasesSlicerAndWaitsForItsTeardown(t *testing.T) {
	createSlicer(t, slicerv1alpha1.SlicerName, release)
	done := make(chan error, 1)
	var out bytes.Buffer
	go func() { done <- releasehook.Run(context.Background(), k8s, options(time.Minute), &out) }()
	deleting(t, slicerv1alpha1.SlicerName)
	select {
	case err := <-done:
		t.Fatalf("the hook returned (%v) while the Slicer's finalizer was still there", err)
	case <-time.After(time.Second):
	}
	finish(t, slicerv1alpha1.SlicerName)
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("hook: %v\n%s", err, out.String())
		}
	case <-time.After(30 * time.Second):
		t.Fatal("the hook did not return once the Slicer was gone")
	}
	if !strings.Contains(out.String(), "gone") {
		t.Errorf("output does not say the Slicer is gone:\n%s", out.String())
	}
}

// Under uninstall policy Wait with MIG pods running, the operator holds the
// deletion with SlicesReleased=False naming the pods: the hook fails after its
// timeout with that message, and leaves the Slicer being deleted (the operator
// finishes once the pods are gone), never stranded.
func TestTimeoutNamesWhatSlicesReleasedSays(t *testing.T) {
	ctx := context.Background()
	createSlicer(t, slicerv1alpha1.SlicerName, release)
	const pods = "2 pods hold MIG slices: team-a/train-0, team-b/infer-1; Slicer keeps running until they are deleted, or set spec.uninstall.policy to Force to delete them"
	done := make(chan error, 1)
	var out bytes.Buffer
	go func() { done <- releasehook.Run(ctx, k8s, options(3*time.Second), &out) }()
	s := deleting(t, slicerv1alpha1.SlicerName)
	meta.SetStatusCondition(&s.Status.Conditions, metav1.Condition{Type: slicerv1alpha1.ConditionSlicesReleased,
		Status: metav1.ConditionFalse, Reason: slicerv1alpha1.ReasonWaitingForPods, Message: pods})
	if err := k8s.Status().Update(ctx, s); err != nil {
		t.Fatal(err)
	}
	var err error
	select {
	case err = <-done:
	case <-time.After(30 * time.Second):
		t.Fatal("the hook did not time out")
	}
	if err == nil {
		t.Fatal("the hook succeeded with the Slicer still there")
	}
	for _, want := range []string{"after 3s", "Slicer default is still there", controller.Finalizer,
		"SlicesReleased=False (" + slicerv1alpha1.ReasonWaitingForPods + "): " + pods, "run helm uninstall again"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("the error does not say %q:\n%v", want, err)
		}
	}
	var left slicerv1alpha1.Slicer
	if err := k8s.Get(ctx, client.ObjectKey{Name: slicerv1alpha1.SlicerName}, &left); err != nil || left.DeletionTimestamp == nil {
		t.Errorf("the Slicer should stay, being deleted, for the operator to finish: %v %v", err, left.DeletionTimestamp)
	}
	if !strings.Contains(out.String(), pods) {
		t.Errorf("the progress output does not show the condition:\n%s", out.String())
	}
}

// A Slicer that is not the release's (slicer.create=false) but carries the
// operator's finalizer would be stranded by removing the operator: the hook
// refuses, deleting nothing, and says how to proceed.
func TestForeignSlicerWithFinalizerRefused(t *testing.T) {
	ctx := context.Background()
	createSlicer(t, slicerv1alpha1.SlicerName, "")
	err := releasehook.Run(ctx, k8s, options(time.Minute), &bytes.Buffer{})
	if err == nil || !strings.Contains(err.Error(), "kubectl delete slicer default --wait") {
		t.Fatalf("want a refusal naming the Slicer, got %v", err)
	}
	var s slicerv1alpha1.Slicer
	if err := k8s.Get(ctx, client.ObjectKey{Name: slicerv1alpha1.SlicerName}, &s); err != nil || s.DeletionTimestamp != nil {
		t.Errorf("the Slicer was deleted by a refused hook: %v", err)
	}
}

// With no Slicer of the release (and none of anyone else's with the finalizer), the hook succeeds at once.
func TestNothingToDelete(t *testing.T) {
	var out bytes.Buffer
	if err := releasehook.Run(context.Background(), k8s, options(time.Minute), &out); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(out.String(), "nothing to delete") {
		t.Errorf("output: %s", out.String())
	}
}
