package operator_test

import (
	"bytes"
	"crypto/x509"
	"encoding/pem"
	"strings"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/slicer-operator/slicer/operator/certs"
	"github.com/slicer-operator/slicer/operator/render"
)

// Metrics TLS (issue 28): the operator, with its own RBAC, stores a serving certificate per
// verified metrics Service and its CA in a ConfigMap next to the ServiceMonitor; the
// certificate chains to that CA for both of the Service's names, and the ServiceMonitor
// names the ConfigMap and the server name instead of skipping verification. A certificate
// close to expiry is renewed, and the ConfigMap then holds the new and the previous CA.
var _ = Describe("Verified metrics endpoints", Ordered, func() {
	AfterEach(cleanSlate)

	It("issues each metrics Service a certificate from the CA its ServiceMonitor trusts", func() {
		ns := nextAgentNamespace()
		op := startOperator(operatorOptions{agentNamespace: ns})
		defer op.stop()
		Expect(admin.Create(ctx, newSlicer())).To(Succeed())
		waitAvailable(ns)

		verified := render.MetricsTLS(render.Options{Slicer: newSlicer(), Namespace: operatorNamespace, AgentNamespace: ns})
		Expect(verified).To(HaveLen(3))
		for _, v := range verified {
			By(v.Service)
			secret := &corev1.Secret{}
			Expect(v.SecretNamespace).To(Equal(operatorNamespace), "every certificate's Secret is in the operator's namespace")
			Expect(admin.Get(ctx, client.ObjectKey{Namespace: operatorNamespace, Name: v.Secret}, secret)).To(Succeed())
			Expect(secret.Type).To(Equal(corev1.SecretTypeTLS))
			cm := &corev1.ConfigMap{}
			Expect(admin.Get(ctx, client.ObjectKey{Namespace: v.Namespace, Name: v.CAConfigMap}, cm)).To(Succeed())
			Expect(cm.Data[render.MetricsCAKey]).To(Equal(string(secret.Data[certs.CAKey])), "the ConfigMap publishes the Secret's CA bundle")

			roots := x509.NewCertPool()
			Expect(roots.AppendCertsFromPEM([]byte(cm.Data[render.MetricsCAKey]))).To(BeTrue())
			block, _ := pem.Decode(secret.Data[certs.CertKey])
			Expect(block).NotTo(BeNil())
			leaf, err := x509.ParseCertificate(block.Bytes)
			Expect(err).NotTo(HaveOccurred())
			Expect(leaf.DNSNames).To(ConsistOf(v.Service+"."+v.Namespace+".svc", v.Service+"."+v.Namespace+".svc.cluster.local"))
			for _, name := range leaf.DNSNames {
				_, err := leaf.Verify(x509.VerifyOptions{DNSName: name, Roots: roots})
				Expect(err).NotTo(HaveOccurred(), "certificate of %s for %s", v.Service, name)
			}
			// Another Service's CA does not verify it: each Service has its own.
			for _, other := range verified {
				if other.Service == v.Service {
					continue
				}
				oc := &corev1.ConfigMap{}
				Expect(admin.Get(ctx, client.ObjectKey{Namespace: other.Namespace, Name: other.CAConfigMap}, oc)).To(Succeed())
				otherRoots := x509.NewCertPool()
				Expect(otherRoots.AppendCertsFromPEM([]byte(oc.Data[render.MetricsCAKey]))).To(BeTrue())
				_, err := leaf.Verify(x509.VerifyOptions{DNSName: v.ServerName(), Roots: otherRoots})
				Expect(err).To(HaveOccurred(), "%s's certificate verified with %s's CA", v.Service, other.Service)
			}

			sm := &unstructured.Unstructured{}
			sm.SetGroupVersionKind(smGVK)
			Expect(admin.Get(ctx, client.ObjectKey{Namespace: v.Namespace, Name: v.Service}, sm)).To(Succeed())
			eps, _, _ := unstructured.NestedSlice(sm.Object, "spec", "endpoints")
			Expect(eps).To(HaveLen(1))
			tlsConfig, _, _ := unstructured.NestedMap(eps[0].(map[string]any), "tlsConfig")
			Expect(tlsConfig).NotTo(HaveKey("insecureSkipVerify"))
			Expect(tlsConfig).To(HaveKeyWithValue("serverName", v.ServerName()))
			Expect(tlsConfig).To(HaveKeyWithValue("ca", HaveKeyWithValue("configMap", And(HaveKeyWithValue("name", v.CAConfigMap), HaveKeyWithValue("key", render.MetricsCAKey)))))

			By(v.Service + ": renewal keeps the previous CA in the ConfigMap")
			short, err := certs.Ensure(nil, certs.Request{DNSNames: v.DNSNames(), Validity: 2 * time.Hour}, time.Now())
			Expect(err).NotTo(HaveOccurred())
			original := secret.Data[certs.CertKey]
			secret.Data = short.Data
			Expect(admin.Update(ctx, secret)).To(Succeed())
			Eventually(func(g Gomega) {
				g.Expect(admin.Get(ctx, client.ObjectKey{Namespace: operatorNamespace, Name: v.Secret}, secret)).To(Succeed())
				if bytes.Equal(secret.Data[certs.CertKey], original) {
					// A reconcile from the cache before our write put the original back (W10).
					secret.Data = short.Data
					g.Expect(admin.Update(ctx, secret)).To(Succeed())
					g.Expect(secret.Data[certs.CertKey]).NotTo(Equal(original), "short-lived certificate stored again")
				}
				g.Expect(secret.Data[certs.CertKey]).NotTo(Equal(short.Data[certs.CertKey]), "renewed")
				g.Expect(pemCount(secret.Data[certs.CAKey])).To(Equal(2), "bundle keeps the previous CA")
				g.Expect(admin.Get(ctx, client.ObjectKey{Namespace: v.Namespace, Name: v.CAConfigMap}, cm)).To(Succeed())
				g.Expect(cm.Data[render.MetricsCAKey]).To(Equal(string(secret.Data[certs.CAKey])))
			}).Should(Succeed())

			if v.Component == render.ComponentAgent {
				// The agent reads its Secret through the API: that one, and no other.
				ds := &appsv1.DaemonSet{}
				Expect(admin.Get(ctx, client.ObjectKey{Namespace: ns, Name: render.AgentName}, ds)).To(Succeed())
				Expect(ds.Spec.Template.Spec.Containers[0].Args).To(ContainElement("--metrics-cert-secret=" + operatorNamespace + "/" + v.Secret))
				agent := agentOn(ns, "")
				Expect(agent.Get(ctx, client.ObjectKey{Namespace: operatorNamespace, Name: v.Secret}, &corev1.Secret{})).To(Succeed())
				for _, other := range verified {
					if other.Secret != v.Secret {
						err := agent.Get(ctx, client.ObjectKey{Namespace: operatorNamespace, Name: other.Secret}, &corev1.Secret{})
						Expect(apierrors.IsForbidden(err)).To(BeTrue(), "the agent reads %s: %v", other.Secret, err)
					}
				}
				Expect(apierrors.IsForbidden(agent.List(ctx, &corev1.SecretList{}, client.InNamespace(operatorNamespace)))).To(BeTrue(), "the agent lists Secrets")
				continue
			}
			dep := &appsv1.Deployment{}
			Expect(admin.Get(ctx, client.ObjectKey{Namespace: operatorNamespace, Name: strings.TrimSuffix(v.Service, "-metrics")}, dep)).To(Succeed())
			Expect(dep.Spec.Template.Spec.Volumes).To(ContainElement(HaveField("VolumeSource.Secret", HaveField("SecretName", v.Secret))))
		}
	})
})
