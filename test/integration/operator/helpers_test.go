package operator_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	"github.com/prometheus/client_golang/prometheus"
	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	resourceapi "k8s.io/api/resource/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/discovery"
	"k8s.io/client-go/rest"
	"k8s.io/utils/ptr"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/interceptor"
	"sigs.k8s.io/controller-runtime/pkg/config"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"

	slicerv1alpha1 "github.com/slicer-operator/slicer/api/v1alpha1"
	"github.com/slicer-operator/slicer/dashboards"
	"github.com/slicer-operator/slicer/internal/kubeversion"
	"github.com/slicer-operator/slicer/operator/controller"
	"github.com/slicer-operator/slicer/operator/manager"
	"github.com/slicer-operator/slicer/operator/metrics"
	"github.com/slicer-operator/slicer/operator/render"
	"github.com/slicer-operator/slicer/prometheusrules"
	"github.com/slicer-operator/slicer/test/framework"
)

// writeCounter counts the operator's API writes. With killAt > 0 it plays a
// process that dies right after its killAt-th write: it cancels the manager
// and fails every later write without sending it (O2).
type writeCounter struct {
	mu     sync.Mutex
	n      int
	killAt int
	dead   bool
	cancel context.CancelFunc
	log    []string
}

var errKilled = errors.New("operator killed by the test")

func (w *writeCounter) write(desc string, do func() error) error {
	w.mu.Lock()
	if w.dead {
		w.mu.Unlock()
		return errKilled
	}
	w.mu.Unlock()
	if err := do(); err != nil {
		return err
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	w.n++
	w.log = append(w.log, desc)
	if w.killAt > 0 && w.n >= w.killAt && !w.dead {
		w.dead = true
		w.cancel()
	}
	return nil
}

func (w *writeCounter) count() (int, []string) {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.n, append([]string(nil), w.log...)
}

func describe(obj any) string {
	if o, ok := obj.(client.Object); ok {
		return fmt.Sprintf("%T %s/%s", obj, o.GetNamespace(), o.GetName())
	}
	if u, ok := obj.(runtime.ApplyConfiguration); ok {
		return fmt.Sprintf("apply %T", u)
	}
	return fmt.Sprintf("%T", obj)
}

func (w *writeCounter) funcs() interceptor.Funcs {
	return interceptor.Funcs{
		Create: func(ctx context.Context, c client.WithWatch, obj client.Object, opts ...client.CreateOption) error {
			return w.write("create "+describe(obj), func() error { return c.Create(ctx, obj, opts...) })
		},
		Update: func(ctx context.Context, c client.WithWatch, obj client.Object, opts ...client.UpdateOption) error {
			return w.write("update "+describe(obj), func() error { return c.Update(ctx, obj, opts...) })
		},
		Patch: func(ctx context.Context, c client.WithWatch, obj client.Object, p client.Patch, opts ...client.PatchOption) error {
			return w.write("patch "+describe(obj), func() error { return c.Patch(ctx, obj, p, opts...) })
		},
		Apply: func(ctx context.Context, c client.WithWatch, obj runtime.ApplyConfiguration, opts ...client.ApplyOption) error {
			desc := "apply"
			if u, ok := obj.(interface{ GetName() *string }); ok && u.GetName() != nil {
				desc += " " + *u.GetName()
			}
			return w.write(desc, func() error { return c.Apply(ctx, obj, opts...) })
		},
		Delete: func(ctx context.Context, c client.WithWatch, obj client.Object, opts ...client.DeleteOption) error {
			return w.write("delete "+describe(obj), func() error { return c.Delete(ctx, obj, opts...) })
		},
		DeleteAllOf: func(ctx context.Context, c client.WithWatch, obj client.Object, opts ...client.DeleteAllOfOption) error {
			return w.write("deleteallof "+describe(obj), func() error { return c.DeleteAllOf(ctx, obj, opts...) })
		},
		SubResourceUpdate: func(ctx context.Context, c client.Client, sub string, obj client.Object, opts ...client.SubResourceUpdateOption) error {
			return w.write("update "+sub+" "+describe(obj), func() error { return c.SubResource(sub).Update(ctx, obj, opts...) })
		},
		SubResourcePatch: func(ctx context.Context, c client.Client, sub string, obj client.Object, p client.Patch, opts ...client.SubResourcePatchOption) error {
			return w.write("patch "+sub+" "+describe(obj), func() error { return c.SubResource(sub).Patch(ctx, obj, p, opts...) })
		},
		SubResourceCreate: func(ctx context.Context, c client.Client, sub string, obj, subObj client.Object, opts ...client.SubResourceCreateOption) error {
			return w.write("create "+sub+" "+describe(obj), func() error { return c.SubResource(sub).Create(ctx, obj, subObj, opts...) })
		},
	}
}

func mustDashboards() map[string][]byte {
	d, err := dashboards.Files()
	Expect(err).NotTo(HaveOccurred())
	Expect(d).NotTo(BeEmpty())
	return d
}

// operatorOptions tune one operator run.
type operatorOptions struct {
	agentNamespace string
	killAt         int
	cfg            *rest.Config
	slicerPatch    func(*controller.SlicerReconciler)
}

type runningOperator struct {
	cancel  context.CancelFunc
	done    chan error
	writes  *writeCounter
	metrics *metrics.Metrics
}

// testSchedulerImages are the per-minor scheduler builds of the tests.
func testSchedulerImages() map[kubeversion.Minor]string {
	out := map[kubeversion.Minor]string{}
	for _, m := range kubeversion.Supported {
		out[m] = schedulerImage(m.Minor)
	}
	return out
}

// schedulerImage is the tests' scheduler build for Kubernetes 1.<minor>.
func schedulerImage(minor int) string { return fmt.Sprintf("reg.test/scheduler:v1-k8s-1.%d", minor) }

func newReconciler(cfg *rest.Config, c client.Client, agentNamespace string, m *metrics.Metrics) *controller.SlicerReconciler {
	dc, err := discovery.NewDiscoveryClientForConfig(cfg)
	Expect(err).NotTo(HaveOccurred())
	return &controller.SlicerReconciler{
		Client:            c,
		Discovery:         dc,
		Metrics:           m,
		Namespace:         operatorNamespace,
		AgentNamespace:    agentNamespace,
		Images:            render.Images{Schedulers: testSchedulerImages(), Webhook: "reg.test/webhook:v1", Agent: "reg.test/agent:v1", Driver: "reg.test/driver"},
		Ports:             render.DefaultPorts(),
		Admission:         render.Admission,
		PrometheusRule:    prometheusrules.PrometheusRule,
		Dashboards:        mustDashboards(),
		DependencyRecheck: time.Second,
		DeletionTimeout:   5 * time.Second,
	}
}

// startOperator runs the operator's manager as the operator's ServiceAccount.
func startOperator(o operatorOptions) *runningOperator {
	cfg := o.cfg
	if cfg == nil {
		cfg = asOperator
	}
	mctx, cancel := context.WithCancel(ctx)
	w := &writeCounter{killAt: o.killAt, cancel: cancel}
	opts := manager.Options(manager.Config{
		Namespace:      operatorNamespace,
		AgentNamespace: o.agentNamespace,
		Metrics:        metricsserver.Options{BindAddress: "0"},
	})
	opts.HealthProbeBindAddress = "0"
	opts.Controller = config.Controller{SkipNameValidation: ptr.To(true)}
	opts.NewClient = func(c *rest.Config, co client.Options) (client.Client, error) {
		inner, err := client.NewWithWatch(c, co)
		if err != nil {
			return nil, err
		}
		return interceptor.NewClient(inner, w.funcs()), nil
	}
	mgr, err := ctrl.NewManager(cfg, opts)
	Expect(err).NotTo(HaveOccurred())
	m, err := metrics.New(prometheus.NewRegistry())
	Expect(err).NotTo(HaveOccurred())
	r := newReconciler(cfg, mgr.GetClient(), o.agentNamespace, m)
	r.Recorder = mgr.GetEventRecorder("slicer-operator")
	r.APIReader = mgr.GetAPIReader()
	if o.slicerPatch != nil {
		o.slicerPatch(r)
	}
	Expect(r.SetupWithManager(mgr)).To(Succeed())
	done := make(chan error, 1)
	go func() {
		defer GinkgoRecover()
		done <- mgr.Start(mctx)
	}()
	return &runningOperator{cancel: cancel, done: done, writes: w, metrics: m}
}

func (r *runningOperator) stop() {
	r.cancel()
	Eventually(r.done, time.Minute).Should(Receive())
}

func newSlicer(mutate ...func(*slicerv1alpha1.Slicer)) *slicerv1alpha1.Slicer {
	s := &slicerv1alpha1.Slicer{ObjectMeta: metav1.ObjectMeta{Name: slicerv1alpha1.SlicerName}}
	for _, m := range mutate {
		m(s)
	}
	return s
}

func getSlicer(g Gomega) *slicerv1alpha1.Slicer {
	s := &slicerv1alpha1.Slicer{}
	g.Expect(admin.Get(ctx, client.ObjectKey{Name: slicerv1alpha1.SlicerName}, s)).To(Succeed())
	return s
}

func condition(s *slicerv1alpha1.Slicer, t string) *metav1.Condition {
	return meta.FindStatusCondition(s.Status.Conditions, t)
}

// waitAvailable plays kube-controller-manager until the Slicer is Available.
func waitAvailable(agentNamespace string) *slicerv1alpha1.Slicer {
	var s *slicerv1alpha1.Slicer
	Eventually(func(g Gomega) {
		_, err := framework.MarkWorkloadsAvailable(ctx, admin, operatorNamespace, agentNamespace)
		g.Expect(err).NotTo(HaveOccurred())
		s = getSlicer(g)
		c := condition(s, slicerv1alpha1.ConditionAvailable)
		g.Expect(c).NotTo(BeNil())
		g.Expect(c.Status).To(Equal(metav1.ConditionTrue), "%s: %s", c.Reason, c.Message)
		g.Expect(c.ObservedGeneration).To(Equal(s.Generation))
	}, 2*time.Minute, 100*time.Millisecond).Should(Succeed())
	return s
}

// ref names one managed object.
type ref struct {
	gvk       schema.GroupVersionKind
	namespace string
	name      string
}

func (r ref) String() string { return r.gvk.Kind + " " + r.namespace + "/" + r.name }

func gvk(obj runtime.Object) schema.GroupVersionKind {
	kinds, _, err := env.Scheme.ObjectKinds(obj)
	Expect(err).NotTo(HaveOccurred())
	return kinds[0]
}

var (
	nfrGVK    = schema.GroupVersionKind{Group: "nfd.k8s-sigs.io", Version: "v1alpha1", Kind: "NodeFeatureRule"}
	moduleGVK = schema.GroupVersionKind{Group: "kmm.sigs.x-k8s.io", Version: "v1beta1", Kind: "Module"}
	smGVK     = schema.GroupVersionKind{Group: "monitoring.coreos.com", Version: "v1", Kind: "ServiceMonitor"}
	ruleGVK   = schema.GroupVersionKind{Group: "monitoring.coreos.com", Version: "v1", Kind: "PrometheusRule"}
	admName   = "slicer-mig-pods"
	// clusterRefs are what the finalizer deletes explicitly: the cluster-scoped
	// objects and the Module (in the agent namespace).
	clusterRefs = func(agentNamespace string) []ref {
		var out []ref
		for _, n := range []string{render.SchedulerName, render.WebhookName, render.AgentName} {
			out = append(out, ref{gvk(&rbacv1.ClusterRole{}), "", n}, ref{gvk(&rbacv1.ClusterRoleBinding{}), "", n})
		}
		return append(out,
			ref{gvk(&admissionregistrationv1.MutatingWebhookConfiguration{}), "", admName},
			ref{gvk(&admissionregistrationv1.ValidatingAdmissionPolicy{}), "", admName},
			ref{gvk(&admissionregistrationv1.ValidatingAdmissionPolicyBinding{}), "", admName},
			ref{gvk(&admissionregistrationv1.ValidatingAdmissionPolicy{}), "", render.AllocationGuardName},
			ref{gvk(&admissionregistrationv1.ValidatingAdmissionPolicyBinding{}), "", render.AllocationGuardName},
			ref{gvk(&admissionregistrationv1.ValidatingAdmissionPolicy{}), "", render.AgentNodeGuardName},
			ref{gvk(&admissionregistrationv1.ValidatingAdmissionPolicyBinding{}), "", render.AgentNodeGuardName},
			ref{gvk(&admissionregistrationv1.ValidatingAdmissionPolicy{}), "", render.OperatorNodeGuardName},
			ref{gvk(&admissionregistrationv1.ValidatingAdmissionPolicyBinding{}), "", render.OperatorNodeGuardName},
			ref{gvk(&admissionregistrationv1.ValidatingAdmissionPolicy{}), "", render.DeviceAccessGuardName},
			ref{gvk(&admissionregistrationv1.ValidatingAdmissionPolicyBinding{}), "", render.DeviceAccessGuardName},
			ref{nfrGVK, "", render.NodeFeatureRuleKey},
			ref{moduleGVK, agentNamespace, render.ModuleName},
		)
	}
)

// fullInstall lists every object of a KMM-mode install with monitoring.
func fullInstall(agentNamespace string) []ref {
	ns := operatorNamespace
	dep, ds, sa, svc, cm := gvk(&appsv1.Deployment{}), gvk(&appsv1.DaemonSet{}), gvk(&corev1.ServiceAccount{}), gvk(&corev1.Service{}), gvk(&corev1.ConfigMap{})
	refs := append(clusterRefs(agentNamespace),
		ref{gvk(&rbacv1.Role{}), ns, render.SchedulerName},
		ref{gvk(&rbacv1.RoleBinding{}), ns, render.SchedulerName},
		ref{sa, agentNamespace, render.DriverName},
		ref{gvk(&corev1.Secret{}), ns, render.WebhookCertSecret},
		ref{sa, ns, render.WebhookName}, ref{svc, ns, render.WebhookName}, ref{dep, ns, render.WebhookName},
		ref{gvk(&policyv1.PodDisruptionBudget{}), ns, render.WebhookName},
		ref{sa, ns, render.SchedulerName}, ref{cm, ns, render.SchedulerConfigMap}, ref{dep, ns, render.SchedulerName},
		ref{gvk(&policyv1.PodDisruptionBudget{}), ns, render.SchedulerName},
		ref{gvk(&corev1.Namespace{}), "", agentNamespace}, ref{sa, agentNamespace, render.AgentName}, ref{ds, agentNamespace, render.AgentName},
		ref{svc, ns, render.SchedulerName + "-metrics"}, ref{svc, ns, render.WebhookName + "-metrics"}, ref{svc, agentNamespace, render.AgentName + "-metrics"},
		ref{smGVK, ns, render.SchedulerName + "-metrics"}, ref{smGVK, ns, render.WebhookName + "-metrics"}, ref{smGVK, agentNamespace, render.AgentName + "-metrics"},
		ref{ruleGVK, ns, "slicer"},
	)
	for name := range mustDashboards() {
		refs = append(refs, ref{cm, ns, render.DashboardConfigMapName(strings.TrimSuffix(name, ".json"))})
	}
	for _, v := range render.MetricsTLS(render.Options{Slicer: newSlicer(), Namespace: ns, AgentNamespace: agentNamespace}) {
		refs = append(refs, ref{gvk(&corev1.Secret{}), v.SecretNamespace, v.Secret}, ref{cm, v.Namespace, v.CAConfigMap})
	}
	refs = append(refs, ref{gvk(&rbacv1.Role{}), ns, render.AgentMetricsCertName}, ref{gvk(&rbacv1.RoleBinding{}), ns, render.AgentMetricsCertName})
	return refs
}

func getRef(r ref) (*unstructured.Unstructured, error) {
	u := &unstructured.Unstructured{}
	u.SetGroupVersionKind(r.gvk)
	return u, admin.Get(ctx, client.ObjectKey{Namespace: r.namespace, Name: r.name}, u)
}

// expectInstalled checks every object exists, is controlled by the Slicer
// and holds the operator's field manager.
func expectInstalled(g Gomega, refs []ref) map[string]string {
	s := getSlicer(g)
	rvs := map[string]string{}
	for _, r := range refs {
		u, err := getRef(r)
		g.Expect(err).NotTo(HaveOccurred(), r.String())
		owner := metav1.GetControllerOf(u)
		g.Expect(owner).NotTo(BeNil(), "%s has no controller", r)
		g.Expect(owner.UID).To(Equal(s.UID), "%s is controlled by %s", r, owner.UID)
		managers := []string{}
		for _, mf := range u.GetManagedFields() {
			managers = append(managers, mf.Manager)
		}
		g.Expect(managers).To(ContainElement(controller.FieldManager), r.String())
		rvs[r.String()] = u.GetResourceVersion()
	}
	return rvs
}

// cleanSlate removes the Slicer and everything the operator made, as an
// administrator, so the next test starts from nothing (envtest has no
// garbage collector).
func cleanSlate() {
	// Allocations a spec left: a later Slicer's deletion would wait for their pods
	// (docs/uninstall.md). The admin is a superuser: it may delete them and then remove the
	// agent's finalizer (the allocation guard).
	var allocs slicerv1alpha1.SliceAllocationList
	Expect(admin.List(ctx, &allocs)).To(Succeed())
	for i := range allocs.Items {
		a := &allocs.Items[i]
		Expect(client.IgnoreNotFound(admin.Delete(ctx, a))).To(Succeed())
		if len(a.Finalizers) > 0 {
			patch := client.MergeFrom(a.DeepCopy())
			a.Finalizers = nil
			Expect(client.IgnoreNotFound(admin.Patch(ctx, a, patch))).To(Succeed())
		}
	}
	s := &slicerv1alpha1.Slicer{}
	if err := admin.Get(ctx, client.ObjectKey{Name: slicerv1alpha1.SlicerName}, s); err == nil {
		s.Finalizers = nil
		Expect(client.IgnoreNotFound(admin.Update(ctx, s))).To(Succeed())
		Expect(client.IgnoreNotFound(admin.Delete(ctx, s))).To(Succeed())
	}
	sel := client.MatchingLabels{render.ManagedByLabel: render.ManagedByValue}
	namespaced := []client.Object{&appsv1.Deployment{}, &appsv1.DaemonSet{}, &corev1.Service{}, &corev1.ConfigMap{},
		&corev1.ServiceAccount{}, &corev1.Secret{}, &policyv1.PodDisruptionBudget{}, &rbacv1.Role{}, &rbacv1.RoleBinding{}}
	for _, obj := range namespaced {
		Expect(admin.DeleteAllOf(ctx, obj, client.InNamespace(operatorNamespace), sel)).To(Succeed())
	}
	for _, obj := range []client.Object{&rbacv1.ClusterRole{}, &rbacv1.ClusterRoleBinding{},
		&admissionregistrationv1.MutatingWebhookConfiguration{}, &admissionregistrationv1.ValidatingAdmissionPolicy{},
		&admissionregistrationv1.ValidatingAdmissionPolicyBinding{}, &resourceapi.DeviceClass{}} {
		Expect(admin.DeleteAllOf(ctx, obj, sel)).To(Succeed())
	}
	for _, k := range []schema.GroupVersionKind{nfrGVK, moduleGVK, smGVK, ruleGVK} {
		u := &unstructured.Unstructured{}
		u.SetGroupVersionKind(k)
		err := admin.DeleteAllOf(ctx, u, client.InNamespace(operatorNamespace), sel)
		if k == nfrGVK {
			err = admin.DeleteAllOf(ctx, u, sel)
		}
		if err != nil && !meta.IsNoMatchError(err) && !apierrors.IsNotFound(err) {
			Expect(err).NotTo(HaveOccurred())
		}
	}
	Eventually(func(g Gomega) {
		err := admin.Get(ctx, client.ObjectKey{Name: slicerv1alpha1.SlicerName}, &slicerv1alpha1.Slicer{})
		g.Expect(apierrors.IsNotFound(err)).To(BeTrue())
	}).Should(Succeed())
}

var agentNamespaceSeq int

// nextAgentNamespace returns a fresh agent namespace (a deleted namespace
// stays Terminating forever in envtest, which has no namespace controller).
func nextAgentNamespace() string {
	agentNamespaceSeq++
	return fmt.Sprintf("slicer-agent-%d", agentNamespaceSeq)
}

var _ = AfterEach(func() {
	if CurrentSpecReport().Failed() {
		s := &slicerv1alpha1.Slicer{}
		if err := admin.Get(ctx, client.ObjectKey{Name: slicerv1alpha1.SlicerName}, s); err == nil {
			GinkgoWriter.Printf("Slicer status at failure: %+v\n", s.Status)
		}
	}
})

// ownControlPlane gives the Ordered container it is called in a control plane of its own,
// started with opts, in place of the suite's (env, admin, asOperator) for its specs: the
// operator's namespace and RBAC installed, then setup run on it. The suite's come back after.
func ownControlPlane(opts framework.Options, setup ...func()) {
	var (
		own           *framework.Env
		savedEnv      *framework.Env
		savedAdmin    client.Client
		savedOperator *rest.Config
	)
	BeforeAll(func() {
		var err error
		own, err = framework.Start(opts)
		Expect(err).NotTo(HaveOccurred())
		savedEnv, savedAdmin, savedOperator = env, admin, asOperator
		env, admin = own, own.Client
		Expect(admin.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: operatorNamespace}})).To(Succeed())
		Expect(framework.InstallOperatorRBAC(ctx, admin, operatorNamespace)).To(Succeed())
		asOperator = framework.ImpersonatedConfig(own.Config, operatorNamespace, framework.OperatorServiceAccount)
		for _, f := range setup {
			f()
		}
	})
	AfterAll(func() {
		env, admin, asOperator = savedEnv, savedAdmin, savedOperator
		Expect(own.Stop()).To(Succeed())
	})
}
