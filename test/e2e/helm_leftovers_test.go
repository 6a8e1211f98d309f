package e2e

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"slices"
	"strings"

	. "github.com/onsi/gomega"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/discovery"
	"k8s.io/client-go/dynamic"

	slicerv1alpha1 "github.com/slicer-operator/slicer/api/v1alpha1"
	"github.com/slicer-operator/slicer/device-plugin/cdi"
	"github.com/slicer-operator/slicer/device-plugin/nvml/emulated"
)

// slicerObjects lists every object on the cluster, of every resource the apiserver serves that
// can be listed (Events aside: they outlive what they report on by design), that names Slicer:
// its API group, namespace or name contains "slicer", or one of its label keys or values, or
// an annotation key, does. The key identifies the object and what names Slicer on it (UID and
// those labels and annotations), so an object that was there before but gained a label counts
// as changed; the value is the object as a reader names it ("resource.group namespace/name").
func slicerObjects(ctx context.Context) (map[string]string, error) {
	dc, err := discovery.NewDiscoveryClientForConfig(restConfig)
	if err != nil {
		return nil, err
	}
	dyn, err := dynamic.NewForConfig(restConfig)
	if err != nil {
		return nil, err
	}
	lists, err := dc.ServerPreferredResources()
	if err != nil {
		return nil, fmt.Errorf("discovery: %w", err)
	}
	out := map[string]string{}
	for _, l := range lists {
		gv, err := schema.ParseGroupVersion(l.GroupVersion)
		if err != nil {
			return nil, err
		}
		for _, r := range l.APIResources {
			if !slices.Contains(r.Verbs, "list") || strings.Contains(r.Name, "/") || r.Name == "events" {
				continue
			}
			gvr := gv.WithResource(r.Name)
			objs, err := dyn.Resource(gvr).List(ctx, metav1.ListOptions{})
			if err != nil {
				return nil, fmt.Errorf("list %s: %w", gvr, err)
			}
			what := r.Name
			if gv.Group != "" {
				what += "." + gv.Group
			}
			for _, o := range objs.Items {
				marks := slicerMarks(&o)
				if len(marks) == 0 && !strings.Contains(gv.Group, "slicer") &&
					!strings.Contains(o.GetNamespace(), "slicer") && !strings.Contains(o.GetName(), "slicer") {
					continue
				}
				name := o.GetName()
				if o.GetNamespace() != "" {
					name = o.GetNamespace() + "/" + name
				}
				out[fmt.Sprintf("%s %s %s %v", what, name, o.GetUID(), marks)] = what + " " + name
			}
		}
	}
	return out, nil
}

// slicerMarks are the labels (key=value) and annotation keys of o that contain "slicer".
func slicerMarks(o *unstructured.Unstructured) []string {
	var marks []string
	for k, v := range o.GetLabels() {
		if strings.Contains(k, "slicer") || strings.Contains(v, "slicer") {
			marks = append(marks, k+"="+v)
		}
	}
	for k := range o.GetAnnotations() {
		if strings.Contains(k, "slicer") {
			marks = append(marks, k)
		}
	}
	slices.Sort(marks)
	return marks
}

func sortedKeys(m map[string]string) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	return keys
}

// expectNoSliceLeft: no SliceAllocation (nor its finalizer), no MIG or GPU instance on the
// emulated GPUs, no CDI spec on the host: every slice released (docs/uninstall.md).
func expectNoSliceLeft(ctx context.Context) {
	var allocs slicerv1alpha1.SliceAllocationList
	Expect(k8s.List(ctx, &allocs)).To(Succeed())
	Expect(allocs.Items).To(BeEmpty(), "allocations (and their finalizers) left behind")
	insts, err := emulated.ReadStateFile(emulatedStateFile)
	if errors.Is(err, fs.ErrNotExist) {
		insts, err = nil, nil
	}
	Expect(err).NotTo(HaveOccurred())
	for _, si := range insts {
		Expect(si.MIGUUIDs).To(BeEmpty(), "MIG instance %s %s on GPU %s left behind", si.Profile, si.MIGUUIDs, si.GPUUUID)
	}
	Expect(insts).To(BeEmpty(), "GPU instances left behind")
	specs, err := (&cdi.Writer{Dir: cdiDir}).List()
	Expect(err).NotTo(HaveOccurred())
	Expect(specs).To(BeEmpty(), "CDI specs left behind")
}
