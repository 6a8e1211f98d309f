package config

import (
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"k8s.io/apimachinery/pkg/runtime"
	schedconfig "k8s.io/kubernetes/pkg/scheduler/apis/config"
	schedscheme "k8s.io/kubernetes/pkg/scheduler/apis/config/scheme"
	"k8s.io/kubernetes/pkg/scheduler/apis/config/validation"
	"sigs.k8s.io/yaml"
)

// decode loads the YAML the way kube-scheduler does (defaulting, conversion
// to the internal type) and validates it.
func decode(t *testing.T, data []byte) *schedconfig.KubeSchedulerConfiguration {
	t.Helper()
	obj, gvk, err := schedscheme.Codecs.UniversalDecoder().Decode(data, nil, nil)
	if err != nil {
		t.Fatalf("decode: %v\n%s", err, data)
	}
	cfg, ok := obj.(*schedconfig.KubeSchedulerConfiguration)
	if !ok {
		t.Fatalf("decoded %v, want KubeSchedulerConfiguration", gvk)
	}
	if err := validation.ValidateKubeSchedulerConfiguration(cfg); err != nil {
		t.Fatalf("kube-scheduler rejects the rendered configuration: %v\n%s", err, data)
	}
	return cfg
}

func names(ps []schedconfig.Plugin) []string {
	var out []string
	for _, p := range ps {
		out = append(out, p.Name)
	}
	return out
}

func TestRenderIsValidKubeSchedulerConfiguration(t *testing.T) {
	cases := []struct {
		name          string
		opts          Options
		wantScheduler string
		wantLeader    bool
		wantLease     string
		wantPlugin    bool
		wantTimeout   time.Duration
	}{
		{name: "defaults", opts: Options{}, wantScheduler: "slicer-scheduler", wantLease: "slicer-scheduler", wantPlugin: true, wantTimeout: DefaultSliceReadyTimeout},
		{name: "ha", opts: Options{SchedulerName: "mig", LeaderElect: true, LeaseNamespace: "slicer-system", LeaseName: "l", SliceReadyTimeout: 5 * time.Second},
			wantScheduler: "mig", wantLeader: true, wantLease: "l", wantPlugin: true, wantTimeout: 5 * time.Second},
		{name: "plugin disabled", opts: Options{DisablePlugin: true}, wantScheduler: "slicer-scheduler", wantLease: "slicer-scheduler"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			data, err := Render(tc.opts)
			if err != nil {
				t.Fatal(err)
			}
			cfg := decode(t, data)
			if len(cfg.Profiles) != 1 {
				t.Fatalf("got %d profiles, want 1", len(cfg.Profiles))
			}
			p := cfg.Profiles[0]
			if p.SchedulerName != tc.wantScheduler {
				t.Errorf("schedulerName %q, want %q", p.SchedulerName, tc.wantScheduler)
			}
			if cfg.LeaderElection.LeaderElect != tc.wantLeader || cfg.LeaderElection.ResourceName != tc.wantLease {
				t.Errorf("leader election %+v", cfg.LeaderElection)
			}
			var fit *schedconfig.NodeResourcesFitArgs
			var ours []byte
			for _, pc := range p.PluginConfig {
				switch a := pc.Args.(type) {
				case *schedconfig.NodeResourcesFitArgs:
					fit = a
				case *runtime.Unknown:
					if pc.Name == PluginName {
						ours = a.Raw
					}
				}
			}
			if fit == nil {
				t.Fatal("no NodeResourcesFit args")
			}
			if diff := cmp.Diff([]string{"slicer.dev"}, fit.IgnoredResourceGroups); diff != "" {
				t.Errorf("ignoredResourceGroups (-want +got):\n%s", diff)
			}
			var wantIgnored []string
			if tc.wantPlugin {
				wantIgnored = []string{"nvidia.com/gpu"}
			}
			if diff := cmp.Diff(wantIgnored, fit.IgnoredResources); diff != "" {
				t.Errorf("ignoredResources (-want +got):\n%s", diff)
			}
			if !tc.wantPlugin {
				if ours != nil || strings.Contains(string(data), PluginName) {
					t.Errorf("plugin present although disabled:\n%s", data)
				}
				return
			}
			var args PluginArgs
			if err := yaml.Unmarshal(ours, &args); err != nil {
				t.Fatalf("plugin args %s: %v", ours, err)
			}
			if args.SliceReadyTimeout.Duration != tc.wantTimeout {
				t.Errorf("sliceReadyTimeout %s, want %s", args.SliceReadyTimeout.Duration, tc.wantTimeout)
			}
			// The scheduler merges our plugins into the defaults at
			// framework build time; here we check what we enable.
			want := map[string][]string{
				"preFilter": {PluginName}, "filter": {PluginName}, "preScore": {PluginName}, "score": {PluginName},
				"reserve": {PluginName}, "preBind": {PluginName}, "postBind": {PluginName},
				"postFilter": {PluginName, "DefaultPreemption"}, "multiPoint": {"DefaultPreemption", PluginName},
			}
			got := map[string][]string{
				// Both PostFilter plugins are in MultiPoint too, so the framework runs them first
				// and in this order, ahead of the other defaults (DynamicResources).
				"multiPoint": slices.DeleteFunc(names(p.Plugins.MultiPoint.Enabled), func(n string) bool { return n != PluginName && n != "DefaultPreemption" }),
				"preFilter":  names(p.Plugins.PreFilter.Enabled), "filter": names(p.Plugins.Filter.Enabled),
				"preScore": names(p.Plugins.PreScore.Enabled),
				"score":    names(p.Plugins.Score.Enabled), "reserve": names(p.Plugins.Reserve.Enabled),
				"preBind": names(p.Plugins.PreBind.Enabled), "postBind": names(p.Plugins.PostBind.Enabled),
				"postFilter": names(p.Plugins.PostFilter.Enabled),
			}
			if diff := cmp.Diff(want, got); diff != "" {
				t.Errorf("enabled plugins (-want +got):\n%s", diff)
			}
			if w := p.Plugins.Score.Enabled[0].Weight; w != DefaultScoreWeight {
				t.Errorf("score weight %d, want %d", w, DefaultScoreWeight)
			}
		})
	}
}

func TestRenderRejectsBadOptions(t *testing.T) {
	for name, o := range map[string]Options{
		"leader election without namespace": {LeaderElect: true},
		"weight over 100":                   {ScoreWeight: 101},
		"negative timeout":                  {SliceReadyTimeout: -time.Second},
		"lease shorter than renew deadline": {LeaderElect: true, LeaseNamespace: "ns", LeaseDuration: 2 * time.Second},
		"renew deadline within retry":       {RenewDeadline: 3 * time.Second, RetryPeriod: 3 * time.Second},
	} {
		if _, err := Render(o); err == nil {
			t.Errorf("%s: Render accepted %+v", name, o)
		}
	}
}

func TestRenderLeaseTimings(t *testing.T) {
	cases := map[string]struct {
		opts                Options
		lease, renew, retry time.Duration
	}{
		"defaults": {opts: Options{LeaderElect: true, LeaseNamespace: "ns"},
			lease: DefaultLeaseDuration, renew: DefaultRenewDeadline, retry: DefaultRetryPeriod},
		"short": {opts: Options{LeaderElect: true, LeaseNamespace: "ns", LeaseDuration: 4 * time.Second, RenewDeadline: 3 * time.Second, RetryPeriod: 500 * time.Millisecond},
			lease: 4 * time.Second, renew: 3 * time.Second, retry: 500 * time.Millisecond},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			data, err := Render(tc.opts)
			if err != nil {
				t.Fatal(err)
			}
			le := decode(t, data).LeaderElection
			got := []time.Duration{le.LeaseDuration.Duration, le.RenewDeadline.Duration, le.RetryPeriod.Duration}
			if diff := cmp.Diff([]time.Duration{tc.lease, tc.renew, tc.retry}, got); diff != "" {
				t.Errorf("lease, renew deadline, retry period (-want +got):\n%s", diff)
			}
		})
	}
}
