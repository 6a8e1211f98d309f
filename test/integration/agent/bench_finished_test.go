package agent_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"sigs.k8s.io/controller-runtime/pkg/client"

	slicerv1alpha1 "github.com/slicer-operator/slicer/api/v1alpha1"
	"github.com/slicer-operator/slicer/device-plugin/nvml/emulated"
	"github.com/slicer-operator/slicer/test/builder"
	"github.com/slicer-operator/slicer/test/framework"
)

// BenchmarkFinishedToFree: a pod holding a Ready 7g.80gb slice turns Succeeded (the status
// write the kubelet makes) → its allocation is gone and the NodeAccelerator shows the GPU
// empty, which is when the scheduler's snapshot gives the room to the next pod (issue 26).
// The agent's side of the local node's finished → slot reusable.
func BenchmarkFinishedToFree(b *testing.B) {
	const node = "bench-finished"
	e, _ := benchNode(b, node, 1, true)
	c, bg := e.Client, context.Background()
	gpu := emulated.GPUUUID(node, 0)
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		b.StopTimer()
		name := fmt.Sprintf("done-%d", i)
		pod := builder.Pod("bench", name).Node(node).Container("c", builder.None).Obj()
		if err := c.Create(bg, pod); err != nil {
			b.Fatal(err)
		}
		pod.Status.Phase = corev1.PodRunning
		if err := c.Status().Update(bg, pod); err != nil {
			b.Fatal(err)
		}
		a := framework.MakeSliceAllocation("bench", name).Node(node).GPU(gpu).Profile("7g.80gb", 0, 8).Pod(name, string(pod.UID)).Obj()
		a.Labels = map[string]string{slicerv1alpha1.LabelNode: node}
		a.Finalizers = []string{slicerv1alpha1.AllocationFinalizer}
		create(b, c, []*slicerv1alpha1.SliceAllocation{a})
		waitAll(b, c, node, 1, true)
		b.StartTimer()

		pod.Status.Phase = corev1.PodSucceeded
		if err := c.Status().Update(bg, pod); err != nil {
			b.Fatal(err)
		}
		for deadline := time.Now().Add(time.Minute); ; time.Sleep(2 * time.Millisecond) {
			if time.Now().After(deadline) {
				b.Fatalf("the allocation of finished pod %s was not released", name)
			}
			err := c.Get(bg, client.ObjectKeyFromObject(a), &slicerv1alpha1.SliceAllocation{})
			if !apierrors.IsNotFound(err) {
				continue
			}
			var na slicerv1alpha1.NodeAccelerator
			if err := c.Get(bg, client.ObjectKey{Name: node}, &na); err != nil {
				b.Fatal(err)
			}
			if len(na.Status.GPUs) == 1 && len(na.Status.GPUs[0].Slices) == 0 {
				break
			}
		}
	}
	b.ReportMetric(float64(b.Elapsed().Milliseconds())/float64(b.N), "finished-to-free-ms")
}
