package main

import (
	"fmt"

	"github.com/go-logr/logr"
	"k8s.io/client-go/rest"
	ctrl "sigs.k8s.io/controller-runtime"
)

// newManager is the agent's manager in either frontend. Its metrics are served with the
// certificate of --metrics-cert-secret when given (read through the API: the Secret is in the
// operator's namespace, operator/render/metricstls.go), else as internal/serving's flags say.
func newManager(cfg *rest.Config, f flags, opts ctrl.Options, log logr.Logger) (ctrl.Manager, error) {
	certs, err := f.listen.SecretCertificate()
	if err != nil {
		return nil, err
	}
	if opts.Metrics, err = f.listen.MetricsOptions(); err != nil {
		return nil, err
	}
	opts.HealthProbeBindAddress = f.listen.ProbeAddr
	if certs != nil {
		opts.Metrics.TLSOpts = append(opts.Metrics.TLSOpts, certs.ServeWith)
	}
	mgr, err := ctrl.NewManager(cfg, opts)
	if err != nil {
		return nil, fmt.Errorf("manager: %w", err)
	}
	if certs != nil {
		certs.Reader, certs.Log = mgr.GetAPIReader(), log.WithName("metrics-certificate")
		if err := mgr.Add(certs); err != nil {
			return nil, fmt.Errorf("metrics certificate: %w", err)
		}
	}
	return mgr, nil
}
