package ha_test

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	coordinationv1 "k8s.io/api/coordination/v1"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/slicer-operator/slicer/test/framework"
)

// build compiles a command of this module (e.g. ./scheduler/cmd/slicer-scheduler)
// into dir and returns its path; the Go build cache makes a rebuild cheap.
func build(pkg string) string {
	GinkgoHelper()
	bin := filepath.Join(dir, filepath.Base(pkg))
	cmd := exec.Command("go", "build", "-o", bin, pkg)
	cmd.Dir = framework.RepoRoot()
	out, err := cmd.CombinedOutput()
	Expect(err).NotTo(HaveOccurred(), "go build %s:\n%s", pkg, out)
	return bin
}

// replica is one process of a replicated component. Its API traffic goes
// through a counting proxy of its own, so a test can tell which replica
// wrote what.
type replica struct {
	name  string
	cmd   *exec.Cmd
	proxy *framework.CountingProxy
	logs  *syncBuffer
	done  chan struct{}
	err   error
}

// startReplica starts bin with the arguments args returns for the path of a
// kubeconfig that points at the replica's own proxy (also its KUBECONFIG).
func startReplica(name, bin string, args func(kubeconfig string) []string) *replica {
	GinkgoHelper()
	return startReplicaOn(env, "", name, bin, args)
}

// startReplicaOn is startReplica against the control plane e, acting as the
// ServiceAccount as ("namespace/name", impersonated) unless it is empty.
func startReplicaOn(e *framework.Env, as, name, bin string, args func(kubeconfig string) []string) *replica {
	GinkgoHelper()
	proxy, err := framework.StartCountingProxy(e.Config)
	Expect(err).NotTo(HaveOccurred())
	kubeconfig := filepath.Join(dir, name+".kubeconfig")
	Expect(writeKubeconfig(kubeconfig, proxy.URL, as)).To(Succeed())
	r := &replica{name: name, proxy: proxy, logs: &syncBuffer{}, done: make(chan struct{})}
	r.cmd = exec.Command(bin, args(kubeconfig)...)
	r.cmd.Env = append(os.Environ(), "KUBECONFIG="+kubeconfig)
	r.cmd.Stdout, r.cmd.Stderr = r.logs, r.logs
	Expect(r.cmd.Start()).To(Succeed())
	go func() {
		defer close(r.done)
		r.err = r.cmd.Wait()
	}()
	DeferCleanup(func() {
		r.kill()
		Expect(proxy.Stop()).To(Succeed())
		if CurrentSpecReport().Failed() {
			GinkgoWriter.Printf("---- %s logs ----\n%s\n", name, r.logs.String())
		}
	})
	return r
}

// writeKubeconfig writes a kubeconfig for server, impersonating the
// ServiceAccount as ("namespace/name") when it is not empty.
func writeKubeconfig(path, server, as string) error {
	cfg := clientcmdapi.NewConfig()
	cfg.Clusters["c"] = &clientcmdapi.Cluster{Server: server}
	user := &clientcmdapi.AuthInfo{}
	if ns, name, ok := strings.Cut(as, "/"); ok {
		user.Impersonate = "system:serviceaccount:" + ns + ":" + name
		user.ImpersonateGroups = []string{"system:serviceaccounts", "system:serviceaccounts:" + ns, "system:authenticated"}
	}
	cfg.AuthInfos["c"] = user
	cfg.Contexts["c"] = &clientcmdapi.Context{Cluster: "c", AuthInfo: "c"}
	cfg.CurrentContext = "c"
	if err := clientcmd.WriteToFile(*cfg, path); err != nil {
		return fmt.Errorf("write kubeconfig %s: %w", path, err)
	}
	return nil
}

// kill sends SIGKILL and waits for the process to be gone: it releases
// nothing and writes nothing more.
func (r *replica) kill() {
	GinkgoHelper()
	if err := r.cmd.Process.Kill(); err != nil && !errors.Is(err, os.ErrProcessDone) {
		Expect(err).NotTo(HaveOccurred())
	}
	<-r.done
}

// running reports whether the process has not exited.
func (r *replica) running() bool {
	select {
	case <-r.done:
		return false
	default:
		return true
	}
}

// exitStatus describes how the process ended, for failure messages.
func (r *replica) exitStatus() string {
	if r.running() {
		return "running"
	}
	if r.err == nil {
		return "exited 0"
	}
	return r.err.Error()
}

// lines returns the log lines matching re, for the report of a takeover.
func (r *replica) lines(re string) []string {
	var out []string
	m := regexp.MustCompile(re)
	for _, l := range strings.Split(r.logs.String(), "\n") {
		if m.MatchString(l) {
			out = append(out, l)
		}
	}
	return out
}

// holder is the holderIdentity of a Lease, "" while there is none.
func holder(namespace, name string) string {
	GinkgoHelper()
	return holderOn(k8s, namespace, name)
}

// holderOn is holder on the control plane of c.
func holderOn(c client.Client, namespace, name string) string {
	GinkgoHelper()
	var l coordinationv1.Lease
	if err := c.Get(ctx, client.ObjectKey{Namespace: namespace, Name: name}, &l); err != nil {
		Expect(client.IgnoreNotFound(err)).To(Succeed())
		return ""
	}
	if l.Spec.HolderIdentity == nil {
		return ""
	}
	return *l.Spec.HolderIdentity
}

// syncBuffer is a bytes.Buffer safe for the process's two output streams
// and the test reading it.
type syncBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *syncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *syncBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

// since formats the time elapsed from t0, for the takeover report.
func since(t0 time.Time) string { return time.Since(t0).Round(10 * time.Millisecond).String() }
