package v1alpha1

// GPUModel names a MIG-capable GPU model. The set matches the model tables
// of internal/mig (a unit test keeps the two in step).
// +kubebuilder:validation:Enum=A30-24GB;A100-40GB;A100-80GB;H100-80GB;H100-94GB;GH200-96GB;H200-141GB;B200-180GB;GB200-186GB;GH200-144GB;H20-96GB;B300-288GB;GB300-288GB
type GPUModel string

// MIGProfile is a GPU-instance profile name in its Kubernetes-legal spelling:
// "<compute>g.<memory>gb", with ".me" standing for NVIDIA's "+me" (media
// extensions) suffix, because '+' is not legal in a resource name. The set
// matches internal/mig's profile tables (a unit test keeps the two in step).
// +kubebuilder:validation:Enum="1g.5gb";"1g.5gb.me";"1g.6gb";"1g.6gb.me";"1g.10gb";"1g.10gb.me";"1g.12gb";"1g.12gb.me";"1g.18gb";"1g.18gb.me";"1g.20gb";"1g.23gb";"1g.23gb.me";"1g.24gb";"1g.34gb";"1g.34gb.me";"1g.35gb";"1g.35gb.me";"1g.36gb";"1g.45gb";"1g.47gb";"1g.67gb";"1g.70gb";"2g.10gb";"2g.12gb";"2g.12gb.me";"2g.20gb";"2g.24gb";"2g.35gb";"2g.36gb";"2g.45gb";"2g.47gb";"2g.67gb";"2g.70gb";"3g.20gb";"3g.40gb";"3g.47gb";"3g.48gb";"3g.71gb";"3g.72gb";"3g.90gb";"3g.93gb";"3g.135gb";"3g.139gb";"4g.20gb";"4g.24gb";"4g.40gb";"4g.47gb";"4g.48gb";"4g.71gb";"4g.72gb";"4g.90gb";"4g.93gb";"4g.135gb";"4g.139gb";"7g.40gb";"7g.80gb";"7g.94gb";"7g.96gb";"7g.141gb";"7g.144gb";"7g.180gb";"7g.186gb";"7g.269gb";"7g.278gb"
type MIGProfile string

// Placement is where a GPU instance sits on its GPU, in memory slices, exactly
// as NVML's nvmlGpuInstancePlacement_t reports it.
// +kubebuilder:validation:XValidation:rule="self.start % self.size == 0",message="start must be a multiple of size"
// +kubebuilder:validation:XValidation:rule="self.start + self.size <= 8",message="start + size must not exceed the GPU's 8 memory slices"
type Placement struct {
	// start is the first memory slice of the instance.
	// +required
	// +kubebuilder:validation:Minimum=0
	// +kubebuilder:validation:Maximum=7
	Start int32 `json:"start"`

	// size is the number of memory slices of the instance.
	// +required
	// +kubebuilder:validation:Enum=1;2;4;8
	Size int32 `json:"size"`
}

// FeatureState turns an optional feature on or off.
// +kubebuilder:validation:Enum=Enabled;Disabled
type FeatureState string

const (
	// FeatureEnabled turns the feature on.
	FeatureEnabled FeatureState = "Enabled"
	// FeatureDisabled turns the feature off.
	FeatureDisabled FeatureState = "Disabled"
)
