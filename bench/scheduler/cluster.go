package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"time"

	"k8s.io/apimachinery/pkg/api/resource"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/slicer-operator/slicer/test/builder"
	"github.com/slicer-operator/slicer/test/framework"
)

const plainResource = "example.com/gpu"

// cluster is one fresh control plane with the benchmark's nodes, and two
// counting proxies: one for the scheduler's traffic, one for the agent's.
type cluster struct {
	env        *framework.Env
	admin      client.Client        // setup and pod creation (not counted)
	cs         kubernetes.Interface // the bound-pod watch (not counted)
	schedProxy *framework.CountingProxy
	agentProxy *framework.CountingProxy
	dir        string
	kubeconfig string // the scheduler's, through schedProxy
	setup      time.Duration
}

// fast lifts client-side rate limits: the apiserver is what is measured.
func fast(cfg *rest.Config) *rest.Config {
	cfg = rest.CopyConfig(cfg)
	cfg.QPS, cfg.Burst = 5000, 10000
	return cfg
}

func startCluster(ctx context.Context, nodes, gpus, workers int, dra bool, draProfiles []string) (cl *cluster, err error) {
	start := time.Now()
	env, err := framework.Start(framework.Options{WithoutExternalCRDs: true,
		APIServerArgs: map[string]string{"max-requests-inflight": "2000", "max-mutating-requests-inflight": "1000"}})
	if err != nil {
		return nil, err
	}
	cl = &cluster{env: env}
	defer func() {
		if err != nil {
			err = errors.Join(err, cl.stop())
		}
	}()
	if cl.admin, err = client.New(fast(env.Config), client.Options{Scheme: framework.NewScheme()}); err != nil {
		return cl, fmt.Errorf("client: %w", err)
	}
	if cl.cs, err = kubernetes.NewForConfig(fast(env.Config)); err != nil {
		return cl, fmt.Errorf("clientset: %w", err)
	}
	if cl.schedProxy, err = framework.StartCountingProxy(env.Config); err != nil {
		return cl, err
	}
	if cl.agentProxy, err = framework.StartCountingProxy(env.Config); err != nil {
		return cl, err
	}
	if cl.dir, err = os.MkdirTemp("", "bench-scheduler-"); err != nil {
		return cl, fmt.Errorf("temp dir: %w", err)
	}
	cl.kubeconfig = filepath.Join(cl.dir, "kubeconfig")
	if err = cl.schedProxy.WriteKubeconfig(cl.kubeconfig); err != nil {
		return cl, err
	}
	perNode := int64(gpus * 7) // as many plain devices as 1g slices
	if dra {
		if err := createDeviceClasses(ctx, cl.admin); err != nil {
			return cl, err
		}
	}
	err = parallel(nodes, workers, func(i int) error {
		name := fmt.Sprintf("node-%05d", i)
		n := builder.Node(name).Ready().Obj()
		n.Status.Capacity[plainResource] = *resource.NewQuantity(perNode, resource.DecimalSI)
		n.Status.Allocatable[plainResource] = *resource.NewQuantity(perNode, resource.DecimalSI)
		if err := framework.CreateNode(ctx, cl.admin, n); err != nil {
			return err
		}
		if dra {
			return createPool(ctx, cl.admin, name, gpus, draProfiles)
		}
		return framework.CreateNodeAccelerator(ctx, cl.admin, framework.MakeNodeAccelerator(name).GPUs("H100-80GB", gpus).Obj())
	})
	cl.setup = time.Since(start)
	return cl, err
}

// agentConfig is a client config whose traffic the agent proxy counts.
func (cl *cluster) agentConfig() *rest.Config { return fast(cl.agentProxy.RestConfig()) }

func (cl *cluster) stop() error {
	var errs []error
	for _, p := range []*framework.CountingProxy{cl.schedProxy, cl.agentProxy} {
		if p != nil {
			errs = append(errs, p.Stop())
		}
	}
	if cl.dir != "" {
		errs = append(errs, os.RemoveAll(cl.dir))
	}
	errs = append(errs, cl.env.Stop())
	return errors.Join(errs...)
}
