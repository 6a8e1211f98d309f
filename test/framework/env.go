// Package framework starts the real control plane Slicer's integration tests
// run against: a source-built kube-apiserver and etcd (envtest), with
// Slicer's CRDs and the NFD, KMM and Prometheus-operator CRDs installed.
package framework

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"runtime"

	kmmv1beta1 "github.com/rh-ecosystem-edge/kernel-module-management/api/v1beta1"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	k8sruntime "k8s.io/apimachinery/pkg/runtime"
	utilruntime "k8s.io/apimachinery/pkg/util/runtime"
	"k8s.io/client-go/discovery"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/envtest"
	nfdv1alpha1 "sigs.k8s.io/node-feature-discovery/api/nfd/v1alpha1"

	slicerv1alpha1 "github.com/slicer-operator/slicer/api/v1alpha1"
)

// NewScheme returns a scheme with the built-in kinds, Slicer's kinds, the KMM
// Module and the NFD kinds.
func NewScheme() *k8sruntime.Scheme {
	s := k8sruntime.NewScheme()
	utilruntime.Must(clientgoscheme.AddToScheme(s))
	utilruntime.Must(apiextensionsv1.AddToScheme(s))
	utilruntime.Must(slicerv1alpha1.AddToScheme(s))
	utilruntime.Must(kmmv1beta1.AddToScheme(s))
	utilruntime.Must(nfdv1alpha1.AddToScheme(s))
	return s
}

// RepoRoot is the directory of the main module's go.mod.
func RepoRoot() string {
	_, file, _, ok := runtime.Caller(0)
	if !ok {
		panic("framework: cannot locate source file")
	}
	return filepath.Clean(filepath.Join(filepath.Dir(file), "..", ".."))
}

// AssetsDir is where kube-apiserver and etcd are: $KUBEBUILDER_ASSETS, or
// bin/k8s as built by `make envtest-bin`.
func AssetsDir() (string, error) {
	dir := os.Getenv("KUBEBUILDER_ASSETS")
	if dir == "" {
		dir = filepath.Join(RepoRoot(), "bin", "k8s")
	}
	for _, b := range []string{"kube-apiserver", "etcd"} {
		if _, err := os.Stat(filepath.Join(dir, b)); err != nil {
			return "", fmt.Errorf("control-plane binary %s not found in %s (run `make envtest-bin`): %w", b, dir, err)
		}
	}
	return dir, nil
}

// Options tune the environment.
type Options struct {
	// WithoutExternalCRDs leaves out the NFD, KMM and Prometheus-operator
	// CRDs, to test behaviour when those projects are not installed.
	WithoutExternalCRDs bool
	// ExtraCRDDirs are installed too.
	ExtraCRDDirs []string
	// Webhooks are installed and served by envtest (nil for none).
	Webhooks *envtest.WebhookInstallOptions
	// APIServerArgs are set on the kube-apiserver (key=value → --key=value).
	APIServerArgs map[string]string
}

// Env is a running control plane.
type Env struct {
	Environment *envtest.Environment
	Config      *rest.Config
	Scheme      *k8sruntime.Scheme
	// Client talks to the apiserver as an administrator.
	Client client.Client
	// ServerVersion is what the apiserver reports, e.g. v1.34.4.
	ServerVersion string
}

// Start starts etcd and kube-apiserver and installs the CRDs.
func Start(opts Options) (*Env, error) {
	assets, err := AssetsDir()
	if err != nil {
		return nil, err
	}
	root := RepoRoot()
	dirs := []string{filepath.Join(root, "config", "crd", "bases")}
	if !opts.WithoutExternalCRDs {
		dirs = append(dirs, filepath.Join(root, "config", "crd", "external"))
	}
	dirs = append(dirs, opts.ExtraCRDDirs...)
	te := &envtest.Environment{
		CRDDirectoryPaths:     dirs,
		ErrorIfCRDPathMissing: true,
		BinaryAssetsDirectory: assets,
	}
	if opts.Webhooks != nil {
		te.WebhookInstallOptions = *opts.Webhooks
	}
	args := te.ControlPlane.GetAPIServer().Configure()
	for k, v := range opts.APIServerArgs {
		args.Set(k, v)
	}
	cfg, err := te.Start()
	if err != nil {
		// envtest leaves etcd and kube-apiserver running when a later start
		// step (e.g. installing an invalid CRD) fails: stop them.
		return nil, errors.Join(fmt.Errorf("start envtest control plane from %s: %w", assets, err), te.Stop())
	}
	env := &Env{Environment: te, Config: cfg, Scheme: NewScheme()}
	if env.Client, err = client.New(cfg, client.Options{Scheme: env.Scheme}); err != nil {
		return nil, errors.Join(fmt.Errorf("client: %w", err), te.Stop())
	}
	if env.ServerVersion, err = serverVersion(cfg); err != nil {
		return nil, errors.Join(err, te.Stop())
	}
	return env, nil
}

// Stop stops the control plane.
func (e *Env) Stop() error {
	if e == nil || e.Environment == nil {
		return nil
	}
	if err := e.Environment.Stop(); err != nil {
		return fmt.Errorf("stop envtest: %w", err)
	}
	return nil
}

func serverVersion(cfg *rest.Config) (string, error) {
	dc, err := discovery.NewDiscoveryClientForConfig(cfg)
	if err != nil {
		return "", fmt.Errorf("discovery client: %w", err)
	}
	v, err := dc.ServerVersion()
	if err != nil {
		return "", fmt.Errorf("server version: %w", err)
	}
	return v.GitVersion, nil
}
