package operator_test

import (
	"bytes"
	"encoding/pem"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	slicerv1alpha1 "github.com/slicer-operator/slicer/api/v1alpha1"
	"github.com/slicer-operator/slicer/operator/certs"
	"github.com/slicer-operator/slicer/operator/render"
)

func pemCount(b []byte) int {
	n := 0
	for {
		var blk *pem.Block
		blk, b = pem.Decode(b)
		if blk == nil {
			return n
		}
		n++
	}
}

// W10 (operator side): a stored certificate close to expiry (here one
// issued for two hours) is re-issued, and the new CA bundle (new and still
// valid previous CA) is injected into the webhook configuration.
var _ = Describe("Self-managed webhook certificate rotation (W10)", Ordered, func() {
	AfterEach(cleanSlate)

	It("rotates and re-injects the CA bundle", func() {
		ns := nextAgentNamespace()
		op := startOperator(operatorOptions{agentNamespace: ns})
		defer op.stop()
		Expect(admin.Create(ctx, newSlicer())).To(Succeed())
		waitAvailable(ns)
		secret := &corev1.Secret{}
		key := client.ObjectKey{Namespace: operatorNamespace, Name: render.WebhookCertSecret}
		Expect(admin.Get(ctx, key, secret)).To(Succeed())
		Expect(pemCount(secret.Data[certs.CAKey])).To(Equal(1))

		By("storing a certificate that expires within the renewal window")
		short, err := certs.Ensure(nil, certs.Request{
			DNSNames: []string{render.WebhookName + "." + operatorNamespace + ".svc", render.WebhookName + "." + operatorNamespace + ".svc.cluster.local"},
			Validity: 2 * time.Hour,
		}, time.Now())
		Expect(err).NotTo(HaveOccurred())
		original := secret.Data[certs.CertKey]
		secret.Data = short.Data
		Expect(admin.Update(ctx, secret)).To(Succeed())

		Eventually(func(g Gomega) {
			g.Expect(admin.Get(ctx, key, secret)).To(Succeed())
			if bytes.Equal(secret.Data[certs.CertKey], original) {
				// A reconcile that started from the cache before our write
				// re-applied the (still valid) original certificate; store the
				// short-lived one again, as time passing would.
				secret.Data = short.Data
				g.Expect(admin.Update(ctx, secret)).To(Succeed())
				g.Expect(secret.Data[certs.CertKey]).NotTo(Equal(original), "short-lived certificate stored again")
			}
			g.Expect(secret.Data[certs.CertKey]).NotTo(Equal(short.Data[certs.CertKey]))
			g.Expect(pemCount(secret.Data[certs.CAKey])).To(Equal(2), "bundle keeps the previous CA")
			mwc := &admissionregistrationv1.MutatingWebhookConfiguration{}
			g.Expect(admin.Get(ctx, client.ObjectKey{Name: admName}, mwc)).To(Succeed())
			for _, w := range mwc.Webhooks {
				g.Expect(w.ClientConfig.CABundle).To(Equal(secret.Data[certs.CAKey]))
			}
		}).Should(Succeed())
		Expect(condition(getSlicer(Default), slicerv1alpha1.ConditionWebhookAvailable).Status).To(BeEquivalentTo("True"))
	})
})
