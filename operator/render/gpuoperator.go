package render

import (
	"encoding/json"
	"fmt"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"

	slicerv1alpha1 "github.com/slicer-operator/slicer/api/v1alpha1"
)

// GPUOperatorLabelKeys are the NVIDIA GPU operator's per-node deploy labels that Slicer turns
// off on the nodes it manages: its device plugin would advertise the MIG devices Slicer
// creates a second time, and its MIG manager would reconfigure the GPUs under Slicer. The
// driver, container toolkit and DCGM exporter labels are left alone (docs/install.md).
var GPUOperatorLabelKeys = []string{
	slicerv1alpha1.LabelGPUOperatorDeployDevicePlugin,
	slicerv1alpha1.LabelGPUOperatorDeployMIGManager,
}

// GPUOperatorOff is the value Slicer gives the deploy labels: the GPU operator's DaemonSets
// select "true", and its node labelling keeps a non-empty value it finds.
const GPUOperatorOff = "false"

// TurnsGPUOperatorOff reports whether the operator sets the GPU operator's deploy labels on
// Slicer's nodes: in Preinstalled driver mode (the mode used next to the GPU operator, which
// then provides the driver) while the GPU operator's API is served.
func TurnsGPUOperatorOff(o Options) bool {
	return o.driverMode() == slicerv1alpha1.DriverModePreinstalled && o.Platform.GPUOperator
}

// ManagedNode reports whether Slicer manages node: it is selected for the agent
// (AgentNodeAffinity's slicer.dev/mig-capable=true).
func ManagedNode(node *corev1.Node) bool {
	return node.Labels[slicerv1alpha1.LabelMIGCapable] == "true"
}

// GPUOperatorRecord is what the deploy labels were before Slicer set them: key to previous
// value, nil for absent (the AnnotationGPUOperatorLabels annotation, as JSON).
type GPUOperatorRecord map[string]*string

// GPUOperatorNodeLabels renders the server-side apply configuration of node for the field
// manager of the GPU operator's deploy labels (nil: nothing to write). With off, the labels
// are "false" and the annotation records what they were (the record made the first time is
// kept). Without off, a node that carries the record gets back what it recorded: a label
// that was absent is left out of the configuration, so the apply removes it, and one that
// had a value gets it back unless someone else has changed it since (then it is theirs and
// left out too); the record goes the same way. A malformed record is an error: the node is
// left as it is.
func GPUOperatorNodeLabels(node *corev1.Node, off bool) (*unstructured.Unstructured, error) {
	raw, recorded := node.Annotations[slicerv1alpha1.AnnotationGPUOperatorLabels]
	var rec GPUOperatorRecord
	if recorded {
		if err := json.Unmarshal([]byte(raw), &rec); err != nil {
			return nil, fmt.Errorf("node %s: annotation %s: %w", node.Name, slicerv1alpha1.AnnotationGPUOperatorLabels, err)
		}
	}
	labels := map[string]any{}
	annotations := map[string]any{}
	switch {
	case off:
		done := recorded
		if !recorded {
			rec = GPUOperatorRecord{}
			for _, k := range GPUOperatorLabelKeys {
				if v, ok := node.Labels[k]; ok {
					rec[k] = &v
				} else {
					rec[k] = nil
				}
			}
			b, err := json.Marshal(rec)
			if err != nil {
				return nil, fmt.Errorf("node %s: record: %w", node.Name, err)
			}
			raw = string(b)
		}
		for _, k := range GPUOperatorLabelKeys {
			labels[k] = GPUOperatorOff
			if node.Labels[k] != GPUOperatorOff {
				done = false
			}
		}
		if done {
			return nil, nil
		}
		annotations[slicerv1alpha1.AnnotationGPUOperatorLabels] = raw
	case recorded:
		for _, k := range GPUOperatorLabelKeys {
			if prev := rec[k]; prev != nil && node.Labels[k] == GPUOperatorOff {
				labels[k] = *prev
			}
		}
	default:
		return nil, nil
	}
	meta := map[string]any{"name": node.Name}
	if len(labels) > 0 {
		meta["labels"] = labels
	}
	if len(annotations) > 0 {
		meta["annotations"] = annotations
	}
	return &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "v1", "kind": "Node", "metadata": meta,
	}}, nil
}
