package render

import (
	"slices"
	"testing"

	"github.com/google/go-cmp/cmp"
	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	resourceapi "k8s.io/api/resource/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apiserver/pkg/admission"
	"k8s.io/apiserver/pkg/authentication/user"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	slicerv1alpha1 "github.com/slicer-operator/slicer/api/v1alpha1"
	"github.com/slicer-operator/slicer/test/builder"
)

var (
	allocationsGVR = slicerv1alpha1.GroupVersion.WithResource("sliceallocations")
	acceleratorGVR = slicerv1alpha1.GroupVersion.WithResource("nodeaccelerators")
	sliceGVR       = resourceapi.SchemeGroupVersion.WithResource("resourceslices")
	podsGVR        = corev1.SchemeGroupVersion.WithResource("pods")
)

func saUser(namespace, name, node string) user.Info {
	u := &user.DefaultInfo{Name: "system:serviceaccount:" + namespace + ":" + name,
		Groups: []string{"system:serviceaccounts", "system:serviceaccounts:" + namespace, "system:authenticated"}}
	if node != "" {
		u.Extra = map[string][]string{NodeNameExtra: {node}}
	}
	return u
}

// allocation is the allocation of pod p on node, as the agent's guards see it, changed by each
// mutation.
func allocation(node string, mutate ...func(*slicerv1alpha1.SliceAllocation)) *slicerv1alpha1.SliceAllocation {
	a := builder.Allocation("team-a", "p-0").Typed().ResourceVersion("7").
		Label(slicerv1alpha1.LabelNode, node).Label(slicerv1alpha1.LabelPodUID, "uid-1").
		Finalizer(slicerv1alpha1.AllocationFinalizer).
		Pod("p", "uid-1").Node(node).GPU("GPU-0").Profile("1g.10gb", 0, 0).Obj()
	for _, m := range mutate {
		m(a)
	}
	return a
}

// Every frontend renders the three guards and their bindings; cleanup deletes what RBAC lists.
func TestGuardsRenderedForBothFrontends(t *testing.T) {
	for _, o := range []Options{testOptions(), testOptions(func(s *slicerv1alpha1.Slicer) { s.Spec.Frontend = slicerv1alpha1.FrontendDRA })} {
		var policies, bindings []string
		for _, obj := range RBAC(o) {
			switch p := obj.(type) {
			case *admissionregistrationv1.ValidatingAdmissionPolicy:
				policies = append(policies, p.Name)
				if p.Spec.FailurePolicy == nil || *p.Spec.FailurePolicy != admissionregistrationv1.Fail {
					t.Errorf("%s: failure policy %v, want Fail", p.Name, p.Spec.FailurePolicy)
				}
			case *admissionregistrationv1.ValidatingAdmissionPolicyBinding:
				bindings = append(bindings, p.Spec.PolicyName)
				if p.Name != p.Spec.PolicyName || !slices.Equal(p.Spec.ValidationActions, []admissionregistrationv1.ValidationAction{admissionregistrationv1.Deny}) {
					t.Errorf("binding %s: %+v", p.Name, p.Spec)
				}
			}
		}
		want := []string{AllocationGuardName, AgentNodeGuardName, OperatorNodeGuardName, DeviceAccessGuardName}
		if diff := cmp.Diff(want, policies); diff != "" {
			t.Errorf("frontend %q policies (-want +got):\n%s", o.Slicer.Spec.Frontend, diff)
		}
		if diff := cmp.Diff(want, bindings); diff != "" {
			t.Errorf("frontend %q bindings (-want +got):\n%s", o.Slicer.Spec.Frontend, diff)
		}
	}
}

// The agent holds exactly the verbs its code uses (device-plugin/agent write.go and
// publish.go, k8s.io/dynamic-resource-allocation's resourceslice controller): a new verb
// must be added here, on purpose.
func TestAgentVerbs(t *testing.T) {
	got := map[string][]string{}
	for _, r := range append(append([]rbacv1.PolicyRule{}, AgentRules...), AgentDRARules...) {
		for _, res := range r.Resources {
			got[res] = append(got[res], r.Verbs...)
		}
	}
	want := map[string][]string{
		"nodes": {"get", "list", "watch"}, "pods": {"get", "list", "watch"}, "runtimeclasses": {"get", "list", "watch"},
		"events":           {"create", "patch", "update"},
		"nodeaccelerators": {"get", "list", "watch", "create"}, "nodeaccelerators/status": {"patch"},
		"sliceallocations": {"get", "list", "watch", "patch", "delete"}, "sliceallocations/status": {"patch"},
		"resourceslices": {"get", "list", "watch", "create", "update", "delete"}, "resourceclaims": {"get", "list", "watch"},
		"tokenreviews": {"create"}, "subjectaccessreviews": {"create"},
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("agent verbs (-want +got):\n%s", diff)
	}
}

func TestAllocationGuard(t *testing.T) {
	o := testOptions()
	e := newPolicyEval(t, policyOf(t, Guards(o), AllocationGuardName))
	scheduler := saUser(o.Namespace, SchedulerName, "")
	agent := saUser(o.AgentNamespace, AgentName, "node-a")
	gc := &user.DefaultInfo{Name: "system:serviceaccount:kube-system:generic-garbage-collector"}
	nsController := &user.DefaultInfo{Name: "system:serviceaccount:kube-system:namespace-controller"}
	tenant := &user.DefaultInfo{Name: "alice", Groups: []string{"system:authenticated"}}
	operator := saUser(o.Namespace, "slicer-operator", "")
	superuser := &user.DefaultInfo{Name: "root", Groups: []string{SuperuserGroup, "system:authenticated"}}

	live := allocation("node-a")
	deleting := allocation("node-a", func(a *slicerv1alpha1.SliceAllocation) { a.DeletionTimestamp = ptr.To(metav1.Now()) })
	noFinalizer := func(a *slicerv1alpha1.SliceAllocation) { a.Finalizers = nil }
	ready := func(a *slicerv1alpha1.SliceAllocation) {
		a.Status = slicerv1alpha1.SliceAllocationStatus{State: slicerv1alpha1.AllocationReady, MIGDeviceUUID: "MIG-1"}
	}
	relabel := func(a *slicerv1alpha1.SliceAllocation) { a.Labels[slicerv1alpha1.LabelNode] = "node-b" }
	orphaned := func(a *slicerv1alpha1.SliceAllocation) {
		a.OwnerReferences = nil
		a.Annotations = map[string]string{"x": "y"}
	}

	create := admissionCase{op: admission.Create, obj: live}
	del := admissionCase{op: admission.Delete, old: live}
	for _, c := range []struct {
		name string
		r    admissionCase
		who  user.Info
		want string
	}{
		{"scheduler creates", create, scheduler, ""},
		{"tenant creates", create, tenant, "created only by Slicer's scheduler"},
		{"superuser creates", create, superuser, "created only by Slicer's scheduler"},
		{"agent creates", create, agent, "created only by Slicer's scheduler"},
		{"scheduler deletes (unreserve)", del, scheduler, ""},
		{"agent deletes (pod gone)", del, agent, ""},
		{"garbage collector deletes", del, gc, ""},
		{"namespace controller deletes", del, nsController, ""},
		{"superuser deletes", del, superuser, ""},
		{"tenant deletes", del, tenant, AllocationDeleteMessage},
		{"operator deletes", del, operator, AllocationDeleteMessage},
		{"agent removes its finalizer", admissionCase{op: admission.Update, old: deleting, obj: allocation("node-a", noFinalizer)}, agent, ""},
		{"agent writes status", admissionCase{op: admission.Update, sub: "status", old: live, obj: allocation("node-a", ready)}, agent, ""},
		{"agent relabels", admissionCase{op: admission.Update, old: live, obj: allocation("node-a", relabel)}, agent, AllocationUpdateMessage},
		{"tenant removes the finalizer", admissionCase{op: admission.Update, old: live, obj: allocation("node-a", noFinalizer)}, tenant, AllocationUpdateMessage},
		{"tenant relabels", admissionCase{op: admission.Update, old: live, obj: allocation("node-a", relabel)}, tenant, AllocationUpdateMessage},
		{"tenant annotates", admissionCase{op: admission.Update, old: live, obj: allocation("node-a", orphaned)}, tenant, AllocationUpdateMessage},
		{"tenant writes status", admissionCase{op: admission.Update, sub: "status", old: live, obj: allocation("node-a", ready)}, tenant, AllocationUpdateMessage},
		{"scheduler updates", admissionCase{op: admission.Update, old: live, obj: allocation("node-a", orphaned)}, scheduler, AllocationUpdateMessage},
		{"garbage collector drops an owner reference", admissionCase{op: admission.Update, old: live, obj: allocation("node-a", orphaned)}, gc, ""},
		{"garbage collector removes the agent's finalizer", admissionCase{op: admission.Update, old: deleting, obj: allocation("node-a", noFinalizer)}, gc, AllocationUpdateMessage},
		{"garbage collector writes status", admissionCase{op: admission.Update, old: live, obj: allocation("node-a", ready)}, gc, AllocationUpdateMessage},
		{"superuser removes the finalizer of a deleted allocation", admissionCase{op: admission.Update, old: deleting, obj: allocation("node-a", noFinalizer)}, superuser, ""},
		{"superuser removes the finalizer of a live allocation", admissionCase{op: admission.Update, old: live, obj: allocation("node-a", noFinalizer)}, superuser, AllocationUpdateMessage},
		{"superuser relabels", admissionCase{op: admission.Update, old: live, obj: allocation("node-a", relabel)}, superuser, AllocationUpdateMessage},
	} {
		r := c.r.request(t, allocationsGVR, c.who)
		wantDenial(t, c.name, e.denial(r), c.want)
	}
}

func TestAgentNodeGuard(t *testing.T) {
	o := testOptions()
	e := newPolicyEval(t, policyOf(t, Guards(o), AgentNodeGuardName))
	agentA := saUser(o.AgentNamespace, AgentName, "node-a")
	noNode := saUser(o.AgentNamespace, AgentName, "")
	scheduler := saUser(o.Namespace, SchedulerName, "node-a")

	accel := func(name, node string) *slicerv1alpha1.NodeAccelerator {
		return &slicerv1alpha1.NodeAccelerator{TypeMeta: metav1.TypeMeta{APIVersion: slicerv1alpha1.GroupVersion.String(), Kind: "NodeAccelerator"},
			ObjectMeta: metav1.ObjectMeta{Name: name}, Spec: slicerv1alpha1.NodeAcceleratorSpec{NodeName: node}}
	}
	slice := func(node string) *resourceapi.ResourceSlice {
		s := &resourceapi.ResourceSlice{TypeMeta: metav1.TypeMeta{APIVersion: resourceapi.SchemeGroupVersion.String(), Kind: "ResourceSlice"},
			ObjectMeta: metav1.ObjectMeta{Name: "s-" + node}, Spec: resourceapi.ResourceSliceSpec{Driver: "slicer.dev"}}
		if node != "" {
			s.Spec.NodeName = ptr.To(node)
		} else {
			s.Spec.AllNodes = ptr.To(true)
		}
		return s
	}
	relabelTo := func(node string) func(*slicerv1alpha1.SliceAllocation) {
		return func(a *slicerv1alpha1.SliceAllocation) { a.Labels[slicerv1alpha1.LabelNode] = node }
	}
	foreign := AgentForeignNodeMessage + ": the agent on node 'node-a' may not write "
	for _, c := range []struct {
		name string
		gvr  schema.GroupVersionResource
		r    admissionCase
		who  user.Info
		want string
	}{
		{"own allocation's finalizer", allocationsGVR, admissionCase{op: admission.Update, old: allocation("node-a"), obj: allocation("node-a")}, agentA, ""},
		{"own allocation's status", allocationsGVR, admissionCase{op: admission.Update, sub: "status", old: allocation("node-a"), obj: allocation("node-a")}, agentA, ""},
		{"own allocation deleted", allocationsGVR, admissionCase{op: admission.Delete, old: allocation("node-a")}, agentA, ""},
		{"node B's allocation's finalizer", allocationsGVR, admissionCase{op: admission.Update, old: allocation("node-b"), obj: allocation("node-b")}, agentA, foreign + "sliceallocations of node 'node-b'"},
		{"node B's allocation's status", allocationsGVR, admissionCase{op: admission.Update, sub: "status", old: allocation("node-b"), obj: allocation("node-b")}, agentA, foreign + "sliceallocations of node 'node-b'"},
		{"node B's allocation deleted", allocationsGVR, admissionCase{op: admission.Delete, old: allocation("node-b")}, agentA, foreign + "sliceallocations of node 'node-b'"},
		{"node B's allocation labelled as A's", allocationsGVR, admissionCase{op: admission.Delete, old: allocation("node-b", relabelTo("node-a"))}, agentA, foreign + "sliceallocations of node 'node-b'"},
		{"own allocation without the node label", allocationsGVR, admissionCase{op: admission.Delete, old: allocation("node-a", func(a *slicerv1alpha1.SliceAllocation) { a.Labels = nil })}, agentA, ""},
		{"node B's allocation without the node label", allocationsGVR, admissionCase{op: admission.Delete, old: allocation("node-b", func(a *slicerv1alpha1.SliceAllocation) { a.Labels = nil })}, agentA, foreign + "sliceallocations of node 'node-b'"},
		{"own allocation given to B", allocationsGVR, admissionCase{op: admission.Update, old: allocation("node-a"), obj: allocation("node-a", relabelTo("node-b"))}, agentA, foreign + "sliceallocations of node 'node-b'"},
		{"own NodeAccelerator created", acceleratorGVR, admissionCase{op: admission.Create, obj: accel("node-a", "node-a")}, agentA, ""},
		{"own NodeAccelerator status", acceleratorGVR, admissionCase{op: admission.Update, sub: "status", old: accel("node-a", "node-a"), obj: accel("node-a", "node-a")}, agentA, ""},
		{"node B's NodeAccelerator created", acceleratorGVR, admissionCase{op: admission.Create, obj: accel("node-b", "node-b")}, agentA, foreign + "nodeaccelerators of node 'node-b'"},
		{"node B's NodeAccelerator status", acceleratorGVR, admissionCase{op: admission.Update, sub: "status", old: accel("node-b", "node-b"), obj: accel("node-b", "node-b")}, agentA, foreign + "nodeaccelerators of node 'node-b'"},
		{"a NodeAccelerator named A for node B", acceleratorGVR, admissionCase{op: admission.Create, obj: accel("node-a", "node-b")}, agentA, foreign + "nodeaccelerators of node 'node-b'"},
		{"node B's NodeAccelerator deleted", acceleratorGVR, admissionCase{op: admission.Delete, old: accel("node-b", "node-b")}, agentA, foreign + "nodeaccelerators of node 'node-b'"},
		{"own ResourceSlice created", sliceGVR, admissionCase{op: admission.Create, obj: slice("node-a")}, agentA, ""},
		{"own ResourceSlice updated", sliceGVR, admissionCase{op: admission.Update, old: slice("node-a"), obj: slice("node-a")}, agentA, ""},
		{"own ResourceSlice deleted", sliceGVR, admissionCase{op: admission.Delete, old: slice("node-a")}, agentA, ""},
		{"node B's ResourceSlice created", sliceGVR, admissionCase{op: admission.Create, obj: slice("node-b")}, agentA, foreign + "resourceslices of node 'node-b'"},
		{"node B's ResourceSlice deleted", sliceGVR, admissionCase{op: admission.Delete, old: slice("node-b")}, agentA, foreign + "resourceslices of node 'node-b'"},
		{"own ResourceSlice moved to B", sliceGVR, admissionCase{op: admission.Update, old: slice("node-a"), obj: slice("node-b")}, agentA, foreign + "resourceslices of node 'node-b'"},
		{"a ResourceSlice of all nodes", sliceGVR, admissionCase{op: admission.Create, obj: slice("")}, agentA, foreign + "resourceslices of no node"},
		{"a token of no node", acceleratorGVR, admissionCase{op: admission.Create, obj: accel("node-a", "node-a")}, noNode, AgentNoNodeMessage},
		{"not the agent", sliceGVR, admissionCase{op: admission.Create, obj: slice("node-b")}, scheduler, ""},
	} {
		wantDenial(t, c.name, e.denial(c.r.request(t, c.gvr, c.who)), c.want)
	}
}

func TestDeviceAccessGuard(t *testing.T) {
	e := newPolicyEval(t, policyOf(t, Guards(testOptions()), DeviceAccessGuardName))
	tenant := &user.DefaultInfo{Name: "alice"}
	pod := func(mutate ...func(*corev1.Pod)) *corev1.Pod {
		p := &corev1.Pod{TypeMeta: metav1.TypeMeta{APIVersion: "v1", Kind: "Pod"}, ObjectMeta: metav1.ObjectMeta{Namespace: "team-a", Name: "p"},
			Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "app", Image: "cuda", Env: []corev1.EnvVar{{Name: "CUDA_VISIBLE_DEVICES", Value: "0"}}}}}}
		for _, m := range mutate {
			m(p)
		}
		return p
	}
	env := func(name, value string) func(*corev1.Pod) {
		return func(p *corev1.Pod) {
			p.Spec.Containers[0].Env = append(p.Spec.Containers[0].Env, corev1.EnvVar{Name: name, Value: value})
		}
	}
	initEnv := func(p *corev1.Pod) {
		p.Spec.InitContainers = []corev1.Container{{Name: "setup", Env: []corev1.EnvVar{{Name: "NVIDIA_VISIBLE_DEVICES", Value: "all"}}}}
	}
	fromField := func(p *corev1.Pod) {
		p.Spec.Containers[0].Env = append(p.Spec.Containers[0].Env, corev1.EnvVar{Name: "NVIDIA_VISIBLE_DEVICES",
			ValueFrom: &corev1.EnvVarSource{FieldRef: &corev1.ObjectFieldSelector{FieldPath: "metadata.annotations['gpus']"}}})
	}
	debug := func(name, value string) func(*corev1.Pod) {
		return func(p *corev1.Pod) {
			p.Spec.EphemeralContainers = append(p.Spec.EphemeralContainers, corev1.EphemeralContainer{EphemeralContainerCommon: corev1.EphemeralContainerCommon{
				Name: name, Env: []corev1.EnvVar{{Name: "NVIDIA_VISIBLE_DEVICES", Value: value}}}})
		}
	}
	annotate := func(k, v string) func(*corev1.Pod) {
		return func(p *corev1.Pod) {
			if p.Annotations == nil {
				p.Annotations = map[string]string{}
			}
			p.Annotations[k] = v
		}
	}
	mirror := annotate(corev1.MirrorPodAnnotationKey, "hash")
	for _, c := range []struct {
		name string
		r    admissionCase
		want string
	}{
		{"a plain pod", admissionCase{op: admission.Create, obj: pod()}, ""},
		{"NVIDIA_VISIBLE_DEVICES=all", admissionCase{op: admission.Create, obj: pod(env("NVIDIA_VISIBLE_DEVICES", "all"))}, DeviceEnvMessage + ": container app sets NVIDIA_VISIBLE_DEVICES"},
		{"a GPU UUID", admissionCase{op: admission.Create, obj: pod(env("NVIDIA_VISIBLE_DEVICES", "GPU-1"))}, DeviceEnvMessage},
		{"NVIDIA_MIG_CONFIG_DEVICES", admissionCase{op: admission.Create, obj: pod(env("NVIDIA_MIG_CONFIG_DEVICES", "all"))}, DeviceEnvMessage},
		{"in an init container", admissionCase{op: admission.Create, obj: pod(initEnv)}, DeviceEnvMessage + ": container setup"},
		{"from a reference", admissionCase{op: admission.Create, obj: pod(fromField)}, DeviceEnvMessage},
		{"void selects nothing", admissionCase{op: admission.Create, obj: pod(env("NVIDIA_VISIBLE_DEVICES", "void"))}, ""},
		{"NVIDIA_DRIVER_CAPABILITIES selects nothing", admissionCase{op: admission.Create, obj: pod(env("NVIDIA_DRIVER_CAPABILITIES", "all"))}, ""},
		{"a mirror pod", admissionCase{op: admission.Create, obj: pod(mirror, env("NVIDIA_VISIBLE_DEVICES", "all"))}, ""},
		{"a CDI annotation", admissionCase{op: admission.Create, obj: pod(annotate("cdi.k8s.io/gpu", "nvidia.com/gpu=all"))}, DeviceAnnotationMessage + ": annotation cdi.k8s.io/gpu"},
		{"a CDI annotation added later", admissionCase{op: admission.Update, old: pod(), obj: pod(annotate("cdi.k8s.io/x", "slicer.dev/mig=MIG-1"))}, DeviceAnnotationMessage},
		{"an ephemeral container with a GPU", admissionCase{op: admission.Update, sub: "ephemeralcontainers", old: pod(), obj: pod(debug("dbg", "all"))}, DeviceEnvMessage + ": container dbg"},
		{"an update of a pod that predates the policy", admissionCase{op: admission.Update, old: pod(env("NVIDIA_VISIBLE_DEVICES", "all"), annotate("cdi.k8s.io/a", "b")),
			obj: pod(env("NVIDIA_VISIBLE_DEVICES", "all"), annotate("cdi.k8s.io/a", "b"), annotate("team", "x"))}, ""},
		{"another ephemeral container beside an old one", admissionCase{op: admission.Update, sub: "ephemeralcontainers", old: pod(debug("old", "all")),
			obj: pod(debug("old", "all"), debug("new", "void"))}, ""},
	} {
		r := c.r.request(t, podsGVR, tenant)
		r.namespace = &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "team-a"}}
		wantDenial(t, c.name, e.denial(r), c.want)
	}
}

// admissionCase is a request before its resource and user are known.
type admissionCase struct {
	op       admission.Operation
	sub      string
	obj, old client.Object
}

func (c admissionCase) request(t *testing.T, gvr schema.GroupVersionResource, who user.Info) request {
	conv := func(o client.Object) runtime.Object {
		if o == nil {
			return nil
		}
		if _, typed := o.(*corev1.Pod); typed {
			return o
		}
		return toUnstructured(t, o)
	}
	return request{op: c.op, gvr: gvr, subresource: c.sub, obj: conv(c.obj), old: conv(c.old), user: who}
}
