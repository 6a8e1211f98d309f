package webhook

import (
	"fmt"
	"sort"
	"strings"

	"gomodules.xyz/jsonpatch/v2"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"

	slicerv1alpha1 "github.com/slicer-operator/slicer/api/v1alpha1"
	"github.com/slicer-operator/slicer/internal/mig"
	"github.com/slicer-operator/slicer/internal/podrequest"
)

// DefaultSchedulerName is the Slicer scheduler's name unless configured otherwise.
const DefaultSchedulerName = slicerv1alpha1.SchedulerName

// Settings is what a mutation depends on besides the pod.
type Settings struct {
	// SchedulerName is the Slicer scheduler's name; pods that ask for MIG slices get it, and so
	// do pods that ask for whole GPUs where TranslateNVIDIA is true.
	SchedulerName string
	// TranslateNVIDIA says Slicer serves NVIDIA's resource names: nvidia.com/mig-<profile> is
	// rewritten to slicer.dev/mig-<profile>, and a pod that asks for whole GPUs
	// (nvidia.com/gpu, never rewritten) is routed to the Slicer scheduler, which decides for
	// Slicer's nodes and NVIDIA's alike. When false, nvidia.com/mig-* and nvidia.com/gpu belong
	// to NVIDIA's device plugin and are left alone.
	TranslateNVIDIA bool
}

// Rejection is a pod the webhook refuses; Reasons are written for the pod's author.
type Rejection struct{ Reasons []string }

func (r *Rejection) Error() string { return strings.Join(r.Reasons, "; ") }

// containerList is one of the pod's lists of containers and its JSON field name.
type containerList struct {
	field      string
	containers []corev1.Container
}

// Mutate returns the JSON patch that turns pod into what Slicer schedules: an empty patch for
// a pod that asks for no MIG slice and no whole GPU Slicer routes (or is a mirror pod, or is
// already mutated), or a *Rejection. It is pure and deterministic: mutating a mutated pod
// gives an empty patch. A whole-GPU request (podrequest.WholeGPUResource) is never rewritten:
// with s.TranslateNVIDIA the pod only gets the Slicer scheduler, after the checks of
// podrequest.WholeGPUs (docs/design/pod-requests.md, "Whole GPUs").
func Mutate(pod *corev1.Pod, s Settings) ([]jsonpatch.JsonPatchOperation, error) {
	if _, mirror := pod.Annotations[corev1.MirrorPodAnnotationKey]; mirror {
		return nil, nil
	}
	if s.SchedulerName == "" {
		s.SchedulerName = DefaultSchedulerName
	}
	var (
		ops        []jsonpatch.JsonPatchOperation
		reasons    []string
		slicerMIG  bool // the pod asks for a Slicer slice (after translation)
		nativeMIG  bool // the pod asks for nvidia.com/mig-* left to NVIDIA's plugin
		mentionMIG bool // any MIG resource, valid or not
		// translated holds each container's Slicer resources as the patch leaves them, for
		// podrequest.ForPod: the pod-level rule is the scheduler's, word for word.
		translated corev1.PodSpec
	)
	lists := []containerList{
		{field: "initContainers", containers: pod.Spec.InitContainers},
		{field: "containers", containers: pod.Spec.Containers},
	}
	for _, l := range lists {
		for i := range l.containers {
			c := &l.containers[i]
			plan := planContainer(c.Name, c.Resources, s)
			reasons = append(reasons, plan.reasons...)
			nativeMIG = nativeMIG || plan.native
			mentionMIG = mentionMIG || plan.mentions
			if plan.slices > 0 {
				slicerMIG = true
			}
			after := corev1.Container{Name: c.Name, RestartPolicy: c.RestartPolicy}
			after.Resources.Limits = corev1.ResourceList{}
			for t, n := range plan.want {
				after.Resources.Limits[corev1.ResourceName(t)] = *resource.NewQuantity(n, resource.DecimalSI)
			}
			if l.field == "containers" {
				translated.Containers = append(translated.Containers, after)
			} else {
				translated.InitContainers = append(translated.InitContainers, after)
			}
			base := fmt.Sprintf("/spec/%s/%d/resources", l.field, i)
			ops = append(ops, plan.ops(base)...)
		}
	}
	for i := range pod.Spec.EphemeralContainers {
		c := &pod.Spec.EphemeralContainers[i]
		if plan := planContainer(c.Name, c.Resources, s); plan.mentions || plan.native {
			reasons = append(reasons, fmt.Sprintf("ephemeral container %q cannot hold a MIG slice; request it in a container or init container", c.Name))
		}
	}
	// wholeGPUs: the pod names nvidia.com/gpu where Slicer serves it, so it is routed. A slice
	// pod that names it is checked too, where NVIDIA's plugin serves it: the Slicer scheduler
	// gets that pod and would refuse it. WholeGPUs reads the pod as written; it refuses a
	// container with both whole GPUs and a slice in either spelling.
	mentionGPUs := podrequest.MentionsWholeGPUs(&pod.Spec)
	wholeGPUs := mentionGPUs && s.TranslateNVIDIA
	if wholeGPUs || (mentionGPUs && mentionMIG) {
		if _, err := podrequest.WholeGPUs(&pod.Spec); err != nil {
			reasons = append(reasons, err.Error())
		}
	}
	if !mentionMIG && !wholeGPUs && len(reasons) == 0 {
		return nil, nil
	}
	if slicerMIG && nativeMIG {
		reasons = append(reasons, "the pod asks for both nvidia.com/mig-* (served by NVIDIA's device plugin in this namespace) and slicer.dev/mig-* (served by Slicer); one pod cannot use both, pick one")
	}
	if len(reasons) == 0 {
		if _, err := podrequest.ForPod(&translated); err != nil {
			reasons = append(reasons, err.Error())
		}
	}
	switch {
	case mentionMIG:
		reasons = append(reasons, podReasons(pod, s, "MIG slices", "the GPU and the slice")...)
	case wholeGPUs:
		reasons = append(reasons, podReasons(pod, s, "whole GPUs", "the GPUs")...)
	}
	if len(reasons) > 0 {
		return nil, &Rejection{Reasons: reasons}
	}
	if slicerMIG || wholeGPUs {
		switch pod.Spec.SchedulerName {
		case s.SchedulerName:
		default: // "" or default-scheduler; podReasons rejected any other name
			ops = append(ops, jsonpatch.NewOperation("add", "/spec/schedulerName", s.SchedulerName))
		}
	}
	return ops, nil
}

// podReasons checks the pod-level rules for a pod the webhook routes to the Slicer scheduler;
// what is the pod's request in the messages, chooses what the scheduler picks for it.
func podReasons(pod *corev1.Pod, s Settings, what, chooses string) []string {
	var reasons []string
	if pod.Spec.NodeName != "" {
		reasons = append(reasons, fmt.Sprintf("spec.nodeName is set to %q, but a pod that asks for %s must be placed by the Slicer scheduler, which chooses %s; remove spec.nodeName (use a nodeSelector or node affinity instead)", pod.Spec.NodeName, what, chooses))
	}
	switch pod.Spec.SchedulerName {
	case "", corev1.DefaultSchedulerName, s.SchedulerName:
	default:
		reasons = append(reasons, fmt.Sprintf("spec.schedulerName is %q, but only the Slicer scheduler (%q) can place %s; remove spec.schedulerName or set it to %q", pod.Spec.SchedulerName, s.SchedulerName, what, s.SchedulerName))
	}
	for _, field := range []struct {
		name       string
		keys       map[string]string
		annotation bool
	}{{"metadata.labels", pod.Labels, false}, {"metadata.annotations", pod.Annotations, true}} {
		for _, k := range sortedKeys(field.keys) {
			if slicerv1alpha1.ReservedPodKey(k, field.annotation) {
				reasons = append(reasons, fmt.Sprintf("%s[%q]: keys under %s are reserved for Slicer's own allocation data and cannot be set on a pod that asks for %s; remove it", field.name, k, slicerv1alpha1.DomainPrefix, what))
			}
		}
	}
	return reasons
}

// containerPlan is what one container needs.
type containerPlan struct {
	limits, requests corev1.ResourceList // the container's own maps
	removeKeys       []string            // MIG keys to drop from both maps (renamed)
	want             map[string]int64    // target resource -> count, in both maps
	slices           int64
	native           bool // asks for nvidia.com/mig-* left untranslated
	mentions         bool // asks for any MIG resource Slicer handles
	reasons          []string
}

// planContainer classifies a container's MIG resources and validates them.
func planContainer(name string, res corev1.ResourceRequirements, s Settings) containerPlan {
	p := containerPlan{limits: res.Limits, requests: res.Requests, want: map[string]int64{}}
	type entry struct {
		limit, request *resource.Quantity
		sources        []string // original keys, sorted
	}
	entries := map[string]*entry{}
	var targets []string
	classify := func(list corev1.ResourceList, isLimit bool) {
		for _, k := range sortedKeys(list) {
			var profile string
			switch {
			case strings.HasPrefix(k, mig.ResourcePrefix):
				profile = strings.TrimPrefix(k, mig.ResourcePrefix)
			case strings.HasPrefix(k, mig.NVIDIAResourcePrefix):
				if !s.TranslateNVIDIA {
					p.native = true
					continue
				}
				profile = strings.TrimPrefix(k, mig.NVIDIAResourcePrefix)
			default:
				continue
			}
			p.mentions = true
			canon, err := mig.ParseProfileName(profile)
			if err != nil || strings.TrimSpace(profile) != profile {
				p.reasons = appendOnce(p.reasons, fmt.Sprintf("container %q: %s is not a MIG profile of any supported GPU; known: %s", name, profile, strings.Join(mig.KnownProfileNames(), ", ")))
				continue
			}
			target := mig.ResourceName(canon)
			e := entries[target]
			if e == nil {
				e = &entry{}
				entries[target] = e
				targets = append(targets, target)
			}
			q := list[corev1.ResourceName(k)]
			slot := &e.request
			if isLimit {
				slot = &e.limit
			}
			if *slot != nil {
				p.reasons = appendOnce(p.reasons, fmt.Sprintf("container %q asks for MIG profile %s under two names (%s); keep one", name, canon, strings.Join(append(e.sources, k), " and ")))
				continue
			}
			*slot = &q
			if k != target {
				p.removeKeys = appendOnce(p.removeKeys, k)
			}
			e.sources = appendOnce(e.sources, k)
		}
	}
	classify(res.Limits, true)
	classify(res.Requests, false)
	sort.Strings(targets)
	for _, t := range targets {
		e := entries[t]
		q := e.limit
		if q == nil {
			q = e.request
		}
		if e.limit != nil && e.request != nil && e.limit.Cmp(*e.request) != 0 {
			p.reasons = append(p.reasons, fmt.Sprintf("container %q: requests (%s) and limits (%s) of %s differ; a MIG slice is not shared, so set them equal (or set only limits)", name, e.request.String(), e.limit.String(), t))
			continue
		}
		n, err := podrequest.Count(name, corev1.ResourceName(t), *q)
		if err != nil {
			p.reasons = append(p.reasons, err.Error())
			continue
		}
		p.want[t] = int64(n)
		p.slices += int64(n)
	}
	return p
}

// ops returns the patch operations for the container whose resources are at base.
func (p containerPlan) ops(base string) []jsonpatch.JsonPatchOperation {
	if len(p.reasons) > 0 || len(p.want) == 0 {
		return nil
	}
	var ops []jsonpatch.JsonPatchOperation
	for _, m := range []struct {
		field string
		list  corev1.ResourceList
	}{{"limits", p.limits}, {"requests", p.requests}} {
		path := base + "/" + m.field
		if m.list == nil {
			whole := map[string]string{}
			for t, n := range p.want {
				whole[t] = quantity(n)
			}
			ops = append(ops, jsonpatch.NewOperation("add", path, whole))
			continue
		}
		for _, k := range p.removeKeys {
			if _, ok := m.list[corev1.ResourceName(k)]; ok {
				ops = append(ops, jsonpatch.NewOperation("remove", path+"/"+escapePointer(k), nil))
			}
		}
		for _, t := range sortedKeys(p.want) {
			if cur, ok := m.list[corev1.ResourceName(t)]; ok && cur.String() == quantity(p.want[t]) {
				continue
			}
			ops = append(ops, jsonpatch.NewOperation("add", path+"/"+escapePointer(t), quantity(p.want[t])))
		}
	}
	return ops
}

func quantity(n int64) string { return resource.NewQuantity(n, resource.DecimalSI).String() }

// escapePointer escapes a map key for a JSON pointer (RFC 6901).
func escapePointer(key string) string {
	return strings.ReplaceAll(strings.ReplaceAll(key, "~", "~0"), "/", "~1")
}

func sortedKeys[K ~string, V any](m map[K]V) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, string(k))
	}
	sort.Strings(keys)
	return keys
}

func appendOnce(list []string, s string) []string {
	for _, x := range list {
		if x == s {
			return list
		}
	}
	return append(list, s)
}
