// Package config renders the KubeSchedulerConfiguration of Slicer's scheduler:
// one profile with Slicer's schedulerName, the SlicerMIG plugin enabled at
// every extension point it implements, and NodeResourcesFit told to leave the
// slicer.dev resources to the plugin. The operator and the tests use it.
package config

import (
	"errors"
	"fmt"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	componentbaseconfigv1alpha1 "k8s.io/component-base/config/v1alpha1"
	schedconfigv1 "k8s.io/kube-scheduler/config/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/yaml"

	slicerv1alpha1 "github.com/slicer-operator/slicer/api/v1alpha1"
	"github.com/slicer-operator/slicer/internal/mig/migapi"
)

const (
	// PluginName is the name the SlicerMIG plugin is registered under.
	PluginName = slicerv1alpha1.SchedulerPluginName
	// DefaultSchedulerName is the schedulerName of Slicer's profile.
	DefaultSchedulerName = slicerv1alpha1.SchedulerName
	// ResourceGroup is the extended-resource group the plugin decides.
	ResourceGroup = "slicer.dev"
	// WholeGPUResource is the whole-GPU resource the plugin decides too (migapi.NVIDIAGPUResource).
	WholeGPUResource = migapi.NVIDIAGPUResource
	// DefaultScoreWeight is the plugin's Score weight.
	DefaultScoreWeight = 5
	// DefaultSliceReadyTimeout bounds PreBind's wait for the agent.
	DefaultSliceReadyTimeout = 2 * time.Minute
	// DefaultLeaseName is the leader-election Lease of the scheduler.
	DefaultLeaseName = slicerv1alpha1.SchedulerName
	// DefaultLeaseDuration, DefaultRenewDeadline and DefaultRetryPeriod are
	// kube-scheduler's leader-election defaults: a standby takes over at most
	// about LeaseDuration after the leader dies without releasing the Lease.
	DefaultLeaseDuration = 15 * time.Second
	DefaultRenewDeadline = 10 * time.Second
	DefaultRetryPeriod   = 2 * time.Second
)

// PluginArgs are the SlicerMIG plugin's arguments (pluginConfig[].args).
type PluginArgs struct {
	// SliceReadyTimeout bounds how long PreBind waits for the node agent to
	// report the pod's slices Ready. Zero means DefaultSliceReadyTimeout.
	SliceReadyTimeout metav1.Duration `json:"sliceReadyTimeout,omitempty"`
	// Defragmentation is the Slicer's spec.defragmentation; nil, or a field left empty, means
	// the API's default (api/v1alpha1/defragmentation_types.go; mig.DefaultDefragMoves moves per plan).
	Defragmentation *slicerv1alpha1.DefragmentationSpec `json:"defragmentation,omitempty"`
}

// Options describe the scheduler configuration to render.
type Options struct {
	// SchedulerName of the profile; DefaultSchedulerName when empty.
	SchedulerName string
	// Kubeconfig path for clientConnection; empty means in-cluster config.
	Kubeconfig string
	// QPS and Burst of the scheduler's client; kube-scheduler's defaults when zero.
	QPS   float32
	Burst int32
	// LeaderElect turns leader election on (needed for 2 or more replicas).
	LeaderElect bool
	// LeaseNamespace and LeaseName locate the Lease; LeaseName defaults to DefaultLeaseName.
	LeaseNamespace string
	LeaseName      string
	// LeaseDuration, RenewDeadline and RetryPeriod time the leader election;
	// the Default* constants when zero. Tests shorten them to see a takeover
	// quickly; kube-scheduler requires LeaseDuration > RenewDeadline >
	// 1.2 × RetryPeriod.
	LeaseDuration time.Duration
	RenewDeadline time.Duration
	RetryPeriod   time.Duration
	// ScoreWeight of the plugin; DefaultScoreWeight when zero.
	ScoreWeight int32
	// SliceReadyTimeout of PreBind; DefaultSliceReadyTimeout when zero.
	SliceReadyTimeout time.Duration
	// Defragmentation is the plugin's defragmentation policy (PluginArgs.Defragmentation).
	Defragmentation *slicerv1alpha1.DefragmentationSpec
	// DisablePlugin renders the same profile without the SlicerMIG plugin
	// (NodeResourcesFit still ignores slicer.dev). Benchmarks compare the two.
	DisablePlugin bool
	// Parallelism of Filter/Score; kube-scheduler's default (16) when zero.
	Parallelism int32
	// PercentageOfNodesToScore; kube-scheduler's adaptive default when zero.
	PercentageOfNodesToScore int32
}

// Build returns the typed configuration.
func Build(o Options) (*schedconfigv1.KubeSchedulerConfiguration, error) {
	name := o.SchedulerName
	if name == "" {
		name = DefaultSchedulerName
	}
	if o.LeaderElect && o.LeaseNamespace == "" {
		return nil, errors.New("leader election needs a lease namespace")
	}
	lease := o.LeaseName
	if lease == "" {
		lease = DefaultLeaseName
	}
	weight := o.ScoreWeight
	if weight == 0 {
		weight = DefaultScoreWeight
	}
	if weight < 0 || weight > 100 {
		return nil, fmt.Errorf("score weight %d out of [1, 100]", weight)
	}
	leaseDuration := orDefault(o.LeaseDuration, DefaultLeaseDuration)
	renewDeadline := orDefault(o.RenewDeadline, DefaultRenewDeadline)
	retryPeriod := orDefault(o.RetryPeriod, DefaultRetryPeriod)
	if leaseDuration <= renewDeadline || float64(renewDeadline) <= 1.2*float64(retryPeriod) {
		return nil, fmt.Errorf("leader election needs leaseDuration (%s) > renewDeadline (%s) > 1.2 × retryPeriod (%s)",
			leaseDuration, renewDeadline, retryPeriod)
	}
	timeout := o.SliceReadyTimeout
	if timeout == 0 {
		timeout = DefaultSliceReadyTimeout
	}
	if timeout < 0 {
		return nil, fmt.Errorf("negative slice-ready timeout %s", timeout)
	}

	// Whole GPUs (nvidia.com/gpu) are the plugin's to count: a Slicer node's agent advertises
	// a GPU only once an allocation holds it whole, and a node NVIDIA's device plugin serves
	// is counted by its allocatable (scheduler/plugin/whole.go). Without the plugin the
	// stock rule stays.
	var ignored []string
	if !o.DisablePlugin {
		ignored = []string{WholeGPUResource}
	}
	fitArgs, err := rawArgs(&schedconfigv1.NodeResourcesFitArgs{
		TypeMeta:              metav1.TypeMeta{APIVersion: schedconfigv1.SchemeGroupVersion.String(), Kind: "NodeResourcesFitArgs"},
		IgnoredResources:      ignored,
		IgnoredResourceGroups: []string{ResourceGroup},
		ScoringStrategy: &schedconfigv1.ScoringStrategy{
			Type: schedconfigv1.LeastAllocated,
			Resources: []schedconfigv1.ResourceSpec{
				{Name: "cpu", Weight: 1}, {Name: "memory", Weight: 1},
			},
		},
	})
	if err != nil {
		return nil, err
	}
	profile := schedconfigv1.KubeSchedulerProfile{
		SchedulerName: ptr.To(name),
		PluginConfig:  []schedconfigv1.PluginConfig{{Name: "NodeResourcesFit", Args: fitArgs}},
	}
	if !o.DisablePlugin {
		plArgs, err := rawArgs(&PluginArgs{SliceReadyTimeout: metav1.Duration{Duration: timeout},
			Defragmentation: o.Defragmentation})
		if err != nil {
			return nil, err
		}
		one := []schedconfigv1.Plugin{{Name: PluginName}}
		profile.Plugins = &schedconfigv1.Plugins{
			// Enabled in MultiPoint too, so that each extension point below re-configures it
			// rather than adds it: the framework runs re-configured plugins first, in the order
			// given, then the other default plugins (docs/design/pending-reason.md).
			MultiPoint: schedconfigv1.PluginSet{Enabled: one},
			PreFilter:  schedconfigv1.PluginSet{Enabled: one},
			Filter:     schedconfigv1.PluginSet{Enabled: one},
			// Ours first: for a pod that asks for slices it explains and preempts with
			// Slicer's choice of victims, and ends the chain when it cannot help
			// (UnschedulableAndUnresolvable); DefaultPreemption preempts for the other pods
			// of the profile.
			PostFilter: schedconfigv1.PluginSet{
				Enabled: []schedconfigv1.Plugin{{Name: PluginName}, {Name: "DefaultPreemption"}},
			},
			PreScore: schedconfigv1.PluginSet{Enabled: one},
			Score:    schedconfigv1.PluginSet{Enabled: []schedconfigv1.Plugin{{Name: PluginName, Weight: ptr.To(weight)}}},
			Reserve:  schedconfigv1.PluginSet{Enabled: one},
			PreBind:  schedconfigv1.PluginSet{Enabled: one},
			PostBind: schedconfigv1.PluginSet{Enabled: one},
		}
		profile.PluginConfig = append(profile.PluginConfig, schedconfigv1.PluginConfig{Name: PluginName, Args: plArgs})
	}

	cfg := &schedconfigv1.KubeSchedulerConfiguration{
		TypeMeta: metav1.TypeMeta{APIVersion: schedconfigv1.SchemeGroupVersion.String(), Kind: "KubeSchedulerConfiguration"},
		LeaderElection: componentbaseconfigv1alpha1.LeaderElectionConfiguration{
			LeaderElect:       ptr.To(o.LeaderElect),
			LeaseDuration:     metav1.Duration{Duration: leaseDuration},
			RenewDeadline:     metav1.Duration{Duration: renewDeadline},
			RetryPeriod:       metav1.Duration{Duration: retryPeriod},
			ResourceLock:      "leases",
			ResourceName:      lease,
			ResourceNamespace: o.LeaseNamespace,
		},
		ClientConnection: componentbaseconfigv1alpha1.ClientConnectionConfiguration{
			Kubeconfig:  o.Kubeconfig,
			ContentType: "application/vnd.kubernetes.protobuf",
			QPS:         o.QPS,
			Burst:       o.Burst,
		},
		Profiles: []schedconfigv1.KubeSchedulerProfile{profile},
	}
	if !o.LeaderElect {
		cfg.LeaderElection.ResourceNamespace = "kube-system"
	}
	if o.Parallelism > 0 {
		cfg.Parallelism = ptr.To(o.Parallelism)
	}
	if o.PercentageOfNodesToScore > 0 {
		cfg.PercentageOfNodesToScore = ptr.To(o.PercentageOfNodesToScore)
	}
	return cfg, nil
}

// Render returns the configuration as YAML (kubescheduler.config.k8s.io/v1).
func Render(o Options) ([]byte, error) {
	cfg, err := Build(o)
	if err != nil {
		return nil, err
	}
	out, err := yaml.Marshal(cfg)
	if err != nil {
		return nil, fmt.Errorf("marshal scheduler configuration: %w", err)
	}
	return out, nil
}

// orDefault is d, or def when d is zero.
func orDefault(d, def time.Duration) time.Duration {
	if d == 0 {
		return def
	}
	return d
}

func rawArgs(v any) (runtime.RawExtension, error) {
	raw, err := yaml.Marshal(v)
	if err != nil {
		return runtime.RawExtension{}, fmt.Errorf("marshal plugin args: %w", err)
	}
	js, err := yaml.YAMLToJSON(raw)
	if err != nil {
		return runtime.RawExtension{}, fmt.Errorf("plugin args to JSON: %w", err)
	}
	return runtime.RawExtension{Raw: js}, nil
}
