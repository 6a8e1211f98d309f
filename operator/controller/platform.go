package controller

import (
	"fmt"

	"k8s.io/client-go/discovery"

	slicerv1alpha1 "github.com/slicer-operator/slicer/api/v1alpha1"
	"github.com/slicer-operator/slicer/operator/render"
)

// API group versions whose presence the operator checks at every reconcile,
// so CRDs installed after the operator started are used at once.
const (
	nfdGroupVersion         = "nfd.k8s-sigs.io/v1alpha1"
	kmmGroupVersion         = "kmm.sigs.x-k8s.io/v1beta1"
	monitoringGroupVersion  = "monitoring.coreos.com/v1"
	certManagerGroupVersion = "cert-manager.io/v1"
	openShiftGroupVersion   = "security.openshift.io/v1"
	resourceGroupVersion    = "resource.k8s.io/v1"
)

// detectPlatform asks discovery which optional APIs are served.
func detectPlatform(dc discovery.DiscoveryInterface) (render.Platform, error) {
	groups, err := dc.ServerGroups()
	if err != nil {
		return render.Platform{}, fmt.Errorf("discover API groups: %w", err)
	}
	served := map[string]bool{}
	for _, g := range groups.Groups {
		for _, v := range g.Versions {
			served[v.GroupVersion] = true
		}
	}
	p := render.Platform{
		OpenShift:   served[openShiftGroupVersion],
		NFD:         served[nfdGroupVersion],
		KMM:         served[kmmGroupVersion],
		Monitoring:  served[monitoringGroupVersion],
		CertManager: served[certManagerGroupVersion],
		GPUOperator: served[gpuOperatorGroupVersion],
	}
	if served[resourceGroupVersion] {
		res, err := dc.ServerResourcesForGroupVersion(resourceGroupVersion)
		if err != nil {
			return render.Platform{}, fmt.Errorf("discover %s: %w", resourceGroupVersion, err)
		}
		for _, r := range res.APIResources {
			p.DeviceTaintRules = p.DeviceTaintRules || r.Name == "devicetaintrules"
		}
	}
	return p, nil
}

// resolveCertProvider picks the certificate source: the one asked for when
// it is installed, otherwise the operator's own CA. The second result
// explains a fallback ("" when there is none).
func resolveCertProvider(want slicerv1alpha1.CertificateProvider, p render.Platform) (render.CertProvider, string) {
	switch want {
	case slicerv1alpha1.CertificateProviderCertManager:
		if p.CertManager {
			return render.CertCertManager, ""
		}
		return render.CertSelfManaged, "cert-manager is not installed (cert-manager.io/v1 not served); using the operator's own CA"
	case slicerv1alpha1.CertificateProviderOpenShiftServiceCA:
		if p.OpenShift {
			return render.CertServiceCA, ""
		}
		return render.CertSelfManaged, "OpenShift service CA is not available; using the operator's own CA"
	case slicerv1alpha1.CertificateProviderSelfManaged:
		return render.CertSelfManaged, ""
	default:
		if p.OpenShift {
			return render.CertServiceCA, ""
		}
		return render.CertSelfManaged, ""
	}
}

// Which optional APIs the spec uses. NFD and KMM are required where used
// (without them no node is selected, no driver is loaded); the Prometheus
// operator and cert-manager are not (requiredConditions and
// optionalConditions in status.go).

func wantsNFD(s *slicerv1alpha1.Slicer) bool {
	return s.Spec.NodeSelection.NodeFeatureRule != slicerv1alpha1.FeatureDisabled
}

func wantsKMM(s *slicerv1alpha1.Slicer) bool {
	return s.Spec.Driver.Mode == slicerv1alpha1.DriverModeKMM
}

func wantsPrometheusOperator(s *slicerv1alpha1.Slicer) bool {
	m := s.Spec.Monitoring
	return m.ServiceMonitors != slicerv1alpha1.FeatureDisabled || m.PrometheusRule != slicerv1alpha1.FeatureDisabled
}
