package controller

import (
	"context"
	"errors"
	"fmt"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"sigs.k8s.io/controller-runtime/pkg/client"

	slicerv1alpha1 "github.com/slicer-operator/slicer/api/v1alpha1"
	"github.com/slicer-operator/slicer/operator/certs"
	"github.com/slicer-operator/slicer/operator/render"
)

// reconcileMetricsCerts keeps a serving certificate per verified metrics Service
// (render.MetricsTLS) and the ConfigMap with its CA bundle, which the ServiceMonitor names.
// It runs before the components that mount the certificates. Like the webhook's, each
// certificate has its own CA (operator/certs) and is renewed a third of its validity before
// it expires; during a renewal the bundle holds the new and the previous CA, so Prometheus
// trusts the pods that still serve the old certificate until the kubelet refreshes their
// mounted Secret (or the agent reads it again) and the component reloads it. The CA ConfigMaps
// of Services outside the operator's namespace (the agent's) are returned, not written: their
// namespace may not exist yet, and they go with the monitoring objects there.
func (r *SlicerReconciler) reconcileMetricsCerts(ctx context.Context, s *slicerv1alpha1.Slicer, o render.Options, res *result, apply applyFunc) []client.Object {
	var later []client.Object
	for _, v := range render.MetricsTLS(o) {
		ca, err := r.reconcileMetricsCert(ctx, s, v, res, apply)
		if err != nil {
			res.fail(err)
			continue
		}
		if v.Namespace != v.SecretNamespace {
			later = append(later, ca)
		}
	}
	return later
}

// reconcileMetricsCert keeps v's certificate Secret and returns the ConfigMap of its CA bundle.
func (r *SlicerReconciler) reconcileMetricsCert(ctx context.Context, s *slicerv1alpha1.Slicer, v render.VerifiedMetrics, res *result, apply applyFunc) (client.Object, error) {
	secret := &corev1.Secret{}
	err := r.Client.Get(ctx, client.ObjectKey{Namespace: v.SecretNamespace, Name: v.Secret}, secret)
	if err != nil && !apierrors.IsNotFound(err) {
		return nil, fmt.Errorf("read metrics certificate %s: %w", v.Secret, err)
	}
	now := r.now()
	out, err := certs.Ensure(secret.Data, certs.Request{DNSNames: v.DNSNames(), Validity: orDefault(r.CertValidity, DefaultCertValidity)}, now)
	if err != nil {
		return nil, fmt.Errorf("metrics certificate %s: %w", v.Secret, err)
	}
	ca := render.MetricsCAConfigMap(v, out.Data[certs.CAKey])
	// The CA first where it can be: a scraper that reads it trusts the certificate stored next.
	if v.Namespace == v.SecretNamespace && !apply("metrics CA "+v.CAConfigMap, []client.Object{ca}) {
		return nil, errors.New("metrics CA " + v.CAConfigMap + " could not be stored")
	}
	if !apply("metrics certificate "+v.Secret, []client.Object{render.MetricsCertSecret(v, out.Data)}) {
		return nil, errors.New("metrics certificate " + v.Secret + " could not be stored")
	}
	if out.Rotated && r.Recorder != nil {
		r.Recorder.Eventf(s, nil, corev1.EventTypeNormal, "MetricsCertificateIssued", "IssueCertificate", "issued the serving certificate of %s/%s, valid until %s",
			v.Namespace, v.Service, out.NotAfter.UTC().Format(time.RFC3339))
	}
	res.requeueAfter(out.RenewAt.Sub(now))
	return ca, nil
}
