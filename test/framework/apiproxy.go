package framework

import (
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/http/httputil"
	"net/url"
	"os"
	"strings"
	"sync"

	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"
)

// CountingProxy is a plain-HTTP reverse proxy on 127.0.0.1 in front of the
// apiserver. A component pointed at it (Kubeconfig) talks to the apiserver
// with the administrator's credentials, and every write it makes is counted
// by verb and resource ("POST sliceallocations", "POST pods/binding").
type CountingProxy struct {
	URL    string
	server *http.Server
	ln     net.Listener

	mu     sync.Mutex
	writes map[string]int
}

// StartCountingProxy starts a proxy to the apiserver of cfg.
func StartCountingProxy(cfg *rest.Config) (*CountingProxy, error) {
	target, err := url.Parse(cfg.Host)
	if err != nil {
		return nil, fmt.Errorf("apiserver URL: %w", err)
	}
	rt, err := rest.TransportFor(cfg)
	if err != nil {
		return nil, fmt.Errorf("apiserver transport: %w", err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, fmt.Errorf("listen: %w", err)
	}
	p := &CountingProxy{URL: "http://" + ln.Addr().String(), ln: ln, writes: map[string]int{}}
	rp := httputil.NewSingleHostReverseProxy(target)
	rp.Transport = rt
	rp.FlushInterval = -1 // watches stream
	p.server = &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch r.Method {
		case http.MethodPost, http.MethodPut, http.MethodPatch, http.MethodDelete:
			p.mu.Lock()
			p.writes[r.Method+" "+resourceOf(r.URL.Path)]++
			p.mu.Unlock()
		}
		rp.ServeHTTP(w, r)
	})}
	go func() { _ = p.server.Serve(ln) }()
	return p, nil
}

// resourceOf turns /api/v1/namespaces/ns/pods/p/binding into "pods/binding".
func resourceOf(path string) string {
	parts := strings.Split(strings.Trim(path, "/"), "/")
	// Skip /api/v1 or /apis/group/version.
	switch {
	case len(parts) >= 2 && parts[0] == "api":
		parts = parts[2:]
	case len(parts) >= 3 && parts[0] == "apis":
		parts = parts[3:]
	}
	if len(parts) >= 2 && parts[0] == "namespaces" && len(parts) > 2 {
		parts = parts[2:]
	}
	switch len(parts) {
	case 0:
		return path
	case 1, 2:
		return parts[0]
	default:
		return parts[0] + "/" + parts[2]
	}
}

// Writes returns a copy of the write counts.
func (p *CountingProxy) Writes() map[string]int {
	p.mu.Lock()
	defer p.mu.Unlock()
	out := make(map[string]int, len(p.writes))
	for k, v := range p.writes {
		out[k] = v
	}
	return out
}

// WriteKubeconfig writes a kubeconfig that points at the proxy.
func (p *CountingProxy) WriteKubeconfig(path string) error {
	cfg := clientcmdapi.NewConfig()
	cfg.Clusters["proxy"] = &clientcmdapi.Cluster{Server: p.URL}
	cfg.AuthInfos["proxy"] = &clientcmdapi.AuthInfo{}
	cfg.Contexts["proxy"] = &clientcmdapi.Context{Cluster: "proxy", AuthInfo: "proxy"}
	cfg.CurrentContext = "proxy"
	if err := clientcmd.WriteToFile(*cfg, path); err != nil {
		return fmt.Errorf("write kubeconfig: %w", err)
	}
	return nil
}

// RestConfig is a client config that goes through the proxy.
func (p *CountingProxy) RestConfig() *rest.Config { return &rest.Config{Host: p.URL} }

// Stop stops the proxy.
func (p *CountingProxy) Stop() error {
	if err := p.server.Close(); err != nil && !errors.Is(err, http.ErrServerClosed) {
		return fmt.Errorf("stop proxy: %w", err)
	}
	return nil
}

// WriteFile writes data to path (0600), a small helper for configs.
func WriteFile(path string, data []byte) error {
	if err := os.WriteFile(path, data, 0o600); err != nil {
		return fmt.Errorf("write %s: %w", path, err)
	}
	return nil
}
